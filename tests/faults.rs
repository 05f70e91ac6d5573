//! Faults survived with nothing lost and nothing doubled: PostgreSQL
//! crashing, going away and cutting connections mid-transaction during a
//! catch-up, a chain node that hangs or answers slowly, and `paywatch run`
//! killed with SIGKILL at random points over and over, the database checked
//! after every kill.

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::api::ApiClient;
use common::backlog::{
    assert_money_rules, assert_recorded_once_and_credited_once, cursor, pay_backlog, wait_cursor,
};
use common::daemon::Daemon;
use common::eth::{deploy_contracts, eth_settings, EthOptions, ETH_FOR_100_USD, ETH_PAYER};
use common::private_postgres::PrivatePostgres;
use common::proxy::{FaultProxy, Link};
use common::replica::{eth_config, Replica};
use common::{Backend, TestDb};
use paywatch::app::Context;
use paywatch::reconcile::Status;
use paywatch::store::Store;
use paywatch_core::Network;
use paywatch_testkit::{AnvilNode, AnvilOptions};
use reqwest::{Method, StatusCode};

const NETWORK: Network = Network::Ethereum;

async fn anvil() -> AnvilNode {
    AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"))
}

/// The test server's host and port, from `postgres://user@host:port`.
fn postgres_host_port() -> String {
    let admin = common::postgres_admin_url();
    let after_at = admin.rsplit('@').next().unwrap().to_owned();
    after_at.trim_end_matches('/').to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_going_down_and_cutting_connections_mid_catch_up_loses_nothing() {
    let node = anvil().await;
    let contracts = deploy_contracts(&node).await;
    let db = TestDb::new(Backend::Postgres).await;
    let proxy = FaultProxy::start(&postgres_host_port()).await;
    let name = db.url.rsplit('/').next().unwrap().to_owned();
    let proxied = format!(
        "{}@127.0.0.1:{}/{name}",
        common::postgres_admin_url().rsplit_once('@').unwrap().0,
        proxy.port
    );
    let mut settings = eth_settings(
        &proxied,
        &node,
        &contracts,
        &EthOptions {
            backend: Backend::Postgres,
            traces: false,
            ..EthOptions::default()
        },
    );
    let start = node.block_number().await.unwrap();
    {
        let n = settings.networks.get_mut("ethereum").unwrap();
        n.start_height = Some(start);
        n.blocks_per_poll = 50;
    }
    // Intents are made on a direct connection before the daemon starts.
    let direct = Context::build(eth_settings(
        &db.url,
        &node,
        &contracts,
        &EthOptions::default(),
    ))
    .await
    .unwrap();
    let (intents, end) = pay_backlog(&node, &contracts, &direct.intents, 12, 250).await;
    let store = db.store.clone();
    let store = &store;

    let daemon = Daemon::start(db, settings).await;
    let api = ApiClient::serve(daemon.ctx.clone()).await;
    let ready = || async { api.call(Method::GET, "/readyz", None, None, None).await.0 };
    assert_eq!(ready().await, StatusCode::OK);
    let no_logs = String::new;

    // A restart: every connection cut mid-whatever, none accepted for 3 s
    // (longer than the lease: the daemon loses it and takes it again).
    wait_cursor(store, NETWORK, start + 300, "catching up", no_logs).await;
    proxy.go_down();
    // A commit the server had already received when the link went lands;
    // nothing after it may.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let down_at = cursor(store, NETWORK).await;
    let looked = until_unready(ready).await;
    tokio::time::sleep(Duration::from_millis(2_500).saturating_sub(looked.elapsed())).await;
    assert_eq!(
        cursor(store, NETWORK).await,
        down_at,
        "nothing written while down"
    );
    proxy.up();
    wait_cursor(
        store,
        NETWORK,
        down_at + 100,
        "resuming after the restart",
        no_logs,
    )
    .await;
    assert_eq!(ready().await, StatusCode::OK);

    // Then connections dropped mid-transaction, again and again.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        proxy.cut();
    }
    assert!(
        cursor(store, NETWORK).await < end,
        "the cuts came during the catch-up"
    );
    assert_recorded_once_and_credited_once(store, NETWORK, &intents, (start, end), no_logs).await;
    let status = store.chain_status(NETWORK).await.unwrap().unwrap();
    assert_eq!(status.watcher_state, "running", "{status:?}");
    drop(daemon);
    drop(direct);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crashing_and_restarting_mid_catch_up_loses_nothing() {
    let pg = PrivatePostgres::start();
    let admin = Store::connect(&format!("{}/postgres", pg.admin_url()))
        .await
        .unwrap();
    admin.execute_raw("CREATE DATABASE paywatch").await.unwrap();
    admin.close().await;
    let url = format!("{}/paywatch", pg.admin_url());
    let node = anvil().await;
    let contracts = deploy_contracts(&node).await;
    let db = TestDb::at(&url).await;
    let opts = EthOptions {
        backend: Backend::Postgres,
        traces: false,
        ..EthOptions::default()
    };
    let mut settings = eth_settings(&url, &node, &contracts, &opts);
    let start = node.block_number().await.unwrap();
    {
        let n = settings.networks.get_mut("ethereum").unwrap();
        n.start_height = Some(start);
        n.blocks_per_poll = 50;
    }
    let direct = Context::build(eth_settings(&url, &node, &contracts, &opts))
        .await
        .unwrap();
    let (intents, end) = pay_backlog(&node, &contracts, &direct.intents, 12, 250).await;
    direct.store.close().await;
    let store = db.store.clone();
    let daemon = Daemon::start(db, settings).await;
    let api = ApiClient::serve(daemon.ctx.clone()).await;
    let ready = || async { api.call(Method::GET, "/readyz", None, None, None).await.0 };
    let server_log = || pg.log();

    wait_cursor(&store, NETWORK, start + 300, "catching up", server_log).await;
    // Crashed mid-catch-up: transactions in flight are lost, every
    // connection dropped; down for 3 s, then recovery from its WAL.
    pg.crash();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let looked = until_unready(ready).await;
    tokio::time::sleep(Duration::from_millis(2_500).saturating_sub(looked.elapsed())).await;
    pg.up();
    // The test's own pool lost its connections too: a fresh one reads.
    let store = Store::connect(&url).await.unwrap();
    let after = cursor(&store, NETWORK).await;
    wait_cursor(
        &store,
        NETWORK,
        after + 100,
        "resuming after the restart",
        server_log,
    )
    .await;
    assert!(after < end, "the crash came during the catch-up");
    assert_recorded_once_and_credited_once(&store, NETWORK, &intents, (start, end), server_log)
        .await;
    assert_eq!(ready().await, StatusCode::OK);
    drop(daemon);
}

/// A daemon on SQLite watching anvil through a fault proxy set to `link`,
/// with the node's request timeout in seconds if given.
/// Waits until readiness says the database is gone, which it must within
/// two seconds (it looks about once a second); returns when it started.
async fn until_unready<F, Fut>(ready: F) -> std::time::Instant
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = StatusCode>,
{
    let looked = std::time::Instant::now();
    while ready().await != StatusCode::SERVICE_UNAVAILABLE {
        assert!(
            looked.elapsed() < Duration::from_secs(2),
            "readiness says the database is gone within two seconds"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    looked
}

async fn behind_a_proxy(timeout_secs: Option<u64>, link: Link) -> (AnvilNode, FaultProxy, Daemon) {
    let node = anvil().await;
    let contracts = deploy_contracts(&node).await;
    let proxy = FaultProxy::start(&format!("127.0.0.1:{}", node.port())).await;
    proxy.set(link);
    let db = TestDb::new(Backend::Sqlite).await;
    let mut settings = eth_settings(&db.url, &node, &contracts, &EthOptions::default());
    let n = settings.networks.get_mut("ethereum").unwrap();
    n.rpc.url = format!("http://127.0.0.1:{}", proxy.port);
    n.traces = false;
    if let Some(t) = timeout_secs {
        n.rpc.timeout_secs = t;
    }
    let daemon = Daemon::start(db, settings).await;
    (node, proxy, daemon)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_node_degrades_the_watcher_which_carries_on_when_it_answers() {
    let (node, proxy, daemon) = behind_a_proxy(Some(2), Link::Up).await;
    daemon.wait_cursor(node.block_number().await.unwrap()).await;
    let before = daemon.order("before-hang", "100").await;
    let during = daemon.order("during-hang", "100").await;
    node.send_eth(ETH_PAYER, &before.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    daemon
        .wait_for(before.id, "confirming", |r| r.status == Status::Confirming)
        .await;

    proxy.set(Link::Hung);
    let hung_at = Instant::now();
    let degraded = daemon.wait_chain_state("degraded").await;
    let error = degraded.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("127.0.0.1") || error.contains("timed out") || error.contains("timeout"),
        "the error names the node or the timeout: {degraded:?}"
    );
    assert!(
        hung_at.elapsed() < Duration::from_secs(20),
        "a hung node is noticed within its timeout, not never"
    );
    // Money sent while the node hangs is found once it answers again.
    node.send_eth(ETH_PAYER, &during.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    node.mine(common::eth::FINALITY_DEPTH).await.unwrap();
    proxy.up();
    for i in [&before, &during] {
        daemon
            .wait_for(i.id, "paid once the node answers", |r| {
                r.status == Status::Paid
            })
            .await;
    }
    daemon.wait_chain_state("running").await;
    assert_eq!(daemon.count("SELECT COUNT(*) FROM settlements").await, 2);
    assert_eq!(daemon.count("SELECT COUNT(*) FROM transfers").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_slows_the_watcher_down_and_nothing_is_skipped() {
    // Every request and every answer held back 300 ms.
    let (node, _proxy, daemon) = behind_a_proxy(None, Link::Slow(300)).await;
    daemon.wait_cursor(node.block_number().await.unwrap()).await;
    let mut paid = Vec::new();
    for i in 0..3 {
        let intent = daemon.order(&format!("slow-{i}"), "100").await;
        node.send_eth(ETH_PAYER, &intent.address, ETH_FOR_100_USD)
            .await
            .unwrap();
        node.mine(40).await.unwrap();
        paid.push(intent);
    }
    node.mine(common::eth::FINALITY_DEPTH).await.unwrap();
    for i in &paid {
        daemon
            .wait_for(i.id, "paid through a slow node", |r| {
                r.status == Status::Paid
            })
            .await;
    }
    assert_eq!(daemon.count("SELECT COUNT(*) FROM settlements").await, 3);
    assert_eq!(daemon.count("SELECT COUNT(*) FROM transfers").await, 3);
    daemon.assert_money_rules().await;
}

/// Structure that must hold at every instant a process can die at: active
/// blocks form one chain with one block per height, ending at the cursor,
/// and no transfer is recorded twice.
async fn assert_consistent(store: &Store, start: u64, kill: usize) {
    let at = cursor(store, NETWORK).await;
    if at == 0 {
        return;
    }
    let active = store
        .count_raw("SELECT COUNT(*) FROM blocks WHERE orphaned_at IS NULL")
        .await
        .unwrap();
    let heights = store
        .count_raw("SELECT COUNT(DISTINCT height) FROM blocks WHERE orphaned_at IS NULL")
        .await
        .unwrap();
    let expected = i64::try_from(at - start + 1).unwrap();
    assert_eq!(
        (active, heights),
        (expected, expected),
        "after kill {kill}: blocks {start}..={at} each once"
    );
    let doubled = store
        .count_raw(
            "SELECT COUNT(*) FROM (SELECT txid, idx FROM transfers \
             WHERE orphaned_at IS NULL GROUP BY txid, idx HAVING COUNT(*) > 1) d",
        )
        .await
        .unwrap();
    assert_eq!(doubled, 0, "after kill {kill}: a transfer recorded twice");
    assert_money_rules(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_over_and_over_the_database_stays_consistent() {
    let node = anvil().await;
    let contracts = deploy_contracts(&node).await;
    let db = TestDb::new(Backend::Sqlite).await;
    let direct = Context::build(eth_settings(
        &db.url,
        &node,
        &contracts,
        &EthOptions::default(),
    ))
    .await
    .unwrap();
    let start = node.block_number().await.unwrap();
    let (intents, end) = pay_backlog(&node, &contracts, &direct.intents, 9, 1_000).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("paywatch.toml");
    std::fs::write(
        &config,
        eth_config(&db.url, &node, &contracts, start, 3_000, 200),
    )
    .unwrap();
    let store = &db.store;
    let mut replica = Replica::start("solo", &config, dir.path());
    // A cheap, seeded spread of kill points: from just after start (mid
    // migration or lease) to deep in a batch of blocks.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut kills = 0;
    while kills < 15 && cursor(store, NETWORK).await < end {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait_ms = 100 + seed % 700;
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        replica.kill();
        kills += 1;
        assert_consistent(store, start, kills).await;
        replica.restart();
    }
    assert!(
        kills >= 6,
        "only {kills} kills landed before the catch-up ended"
    );
    assert_recorded_once_and_credited_once(store, NETWORK, &intents, (start, end), || {
        replica.all_logs()
    })
    .await;
    drop(direct);
}

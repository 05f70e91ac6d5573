//! Three `paywatch run` processes on one PostgreSQL, watching a real anvil
//! node: one holds the Ethereum lease and watches; when it is killed or
//! frozen mid-catch-up another takes over within the lease's bound, from the
//! stored cursor, and afterwards every payment is recorded once and credited
//! once.

#[macro_use]
mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::backlog::{assert_recorded_once_and_credited_once, cursor, pay_backlog, wait_cursor};
use common::eth::{deploy_contracts, eth_settings, EthOptions};
use common::replica::{eth_config, lease, wait_for_holder, Replica};
use common::{Backend, TestDb};
use paywatch::app::Context;
use paywatch::store::IntentRecord;
use paywatch_core::Network;
use paywatch_testkit::{AnvilNode, AnvilOptions};

const NETWORK: Network = Network::Ethereum;
/// Short, so the stories run in seconds; the default is 10 s.
const TTL_MS: u64 = 3_000;
const RETRY_MS: u64 = 200;
/// What a takeover may take: the lease running out after the holder's last
/// renewal, one retry, and room for a loaded test machine. A frozen holder
/// caught mid-transaction adds nothing: the server ends its session after
/// two seconds, well inside the lease.
const TAKEOVER_BOUND: Duration = Duration::from_millis(TTL_MS + RETRY_MS + 2_000);
const INTENTS: usize = 12;
const BLOCKS_BETWEEN_PAYMENTS: u64 = 250;

struct World {
    /// Kept running for the whole story.
    _node: AnvilNode,
    db: TestDb,
    ctx: Context,
    dir: tempfile::TempDir,
    config: PathBuf,
    intents: Vec<IntentRecord>,
    start: u64,
    end: u64,
}

/// Twelve top-ups of 100 USD paid in ETH, USDT and USDC over 3,000 blocks,
/// all mined and final before any instance starts: the first leader has a
/// long catch-up ahead.
async fn world() -> World {
    let node = AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"));
    let contracts = deploy_contracts(&node).await;
    let db = TestDb::new(Backend::Postgres).await;
    let settings = eth_settings(
        &db.url,
        &node,
        &contracts,
        &EthOptions {
            backend: Backend::Postgres,
            traces: false,
            ..EthOptions::default()
        },
    );
    // Creates intents and reads; runs no watcher.
    let ctx = Context::build(settings).await.expect("context builds");
    let start = node.block_number().await.unwrap();
    let (intents, end) = pay_backlog(
        &node,
        &contracts,
        &ctx.intents,
        INTENTS,
        BLOCKS_BETWEEN_PAYMENTS,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("paywatch.toml");
    std::fs::write(
        &config,
        eth_config(&db.url, &node, &contracts, start, TTL_MS, RETRY_MS),
    )
    .unwrap();
    World {
        _node: node,
        db,
        ctx,
        dir,
        config,
        intents,
        start,
        end,
    }
}

impl World {
    fn replicas(&self) -> Vec<Replica> {
        ["r1", "r2", "r3"]
            .iter()
            .map(|name| Replica::start(name, &self.config, self.dir.path()))
            .collect()
    }

    async fn cursor(&self) -> u64 {
        cursor(&self.db.store, NETWORK).await
    }

    async fn wait_cursor(&self, height: u64, why: &str, logs: impl Fn() -> String) -> u64 {
        wait_cursor(&self.db.store, NETWORK, height, why, logs).await
    }

    async fn assert_all_recorded_once_and_credited_once(&self, logs: impl Fn() -> String) {
        assert_recorded_once_and_credited_once(
            &self.db.store,
            NETWORK,
            &self.intents,
            (self.start, self.end),
            logs,
        )
        .await;
    }
}

fn logs_of(replicas: &[Replica]) -> String {
    replicas
        .iter()
        .map(|r| format!("--- {} ---\n{}", r.name, r.all_logs()))
        .collect()
}

fn holder_index(replicas: &[Replica], holder: &str) -> usize {
    replicas
        .iter()
        .position(|r| r.name == holder)
        .unwrap_or_else(|| panic!("the lease is held by '{holder}', no replica of this test"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_mid_catch_up_is_replaced_in_time_and_nothing_is_lost_or_doubled() {
    let w = world().await;
    let mut replicas = w.replicas();
    let logs = || String::new();
    let (first, _) = wait_for_holder(
        &w.ctx.store,
        NETWORK,
        None,
        0,
        Duration::from_secs(30),
        logs,
    )
    .await;
    // Two kills, each while the leader is still catching up.
    let mut holder = first;
    for (kill, ahead) in [(1, 300), (2, 900)] {
        let at = w
            .wait_cursor(w.start + ahead, "catching up", || logs_of(&replicas))
            .await;
        assert!(
            at < w.end,
            "kill {kill} came after the catch-up ({at} of {})",
            w.end
        );
        let leader = holder_index(&replicas, &holder.holder);
        replicas[leader].kill();
        let (next, took) = wait_for_holder(
            &w.ctx.store,
            NETWORK,
            Some(&holder.holder),
            holder.token,
            TAKEOVER_BOUND,
            || logs_of(&replicas),
        )
        .await;
        eprintln!(
            "kill {kill}: {} took over from {} in {took:?} at height {at}",
            next.holder, holder.holder
        );
        // It resumes from the stored cursor, not from its start or the tip.
        w.wait_cursor(at + 1, "the new leader resuming", || logs_of(&replicas))
            .await;
        replicas[leader].restart();
        holder = next;
    }
    w.assert_all_recorded_once_and_credited_once(|| logs_of(&replicas))
        .await;
    let watching: usize = replicas
        .iter()
        .filter(|r| r.all_logs().contains("watcher lease acquired"))
        .count();
    assert!(watching >= 2, "{}", logs_of(&replicas));
    // A clean stop hands the lease over at once, not after it runs out.
    let leader = holder_index(
        &replicas,
        &lease(&w.ctx.store, NETWORK).await.unwrap().holder,
    );
    let before = lease(&w.ctx.store, NETWORK).await.unwrap();
    let status = replicas[leader].terminate(Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{}", replicas[leader].log());
    let (_, took) = wait_for_holder(
        &w.ctx.store,
        NETWORK,
        Some(&before.holder),
        before.token,
        Duration::from_millis(TTL_MS),
        || logs_of(&replicas),
    )
    .await;
    eprintln!("after SIGTERM the lease moved in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_replaced_and_writes_nothing_once_it_wakes() {
    let w = world().await;
    let replicas = w.replicas();
    let (first, _) = wait_for_holder(
        &w.ctx.store,
        NETWORK,
        None,
        0,
        Duration::from_secs(30),
        || logs_of(&replicas),
    )
    .await;
    let at = w
        .wait_cursor(w.start + 300, "catching up", || logs_of(&replicas))
        .await;
    let leader = holder_index(&replicas, &first.holder);
    replicas[leader].freeze();
    let (next, took) = wait_for_holder(
        &w.ctx.store,
        NETWORK,
        Some(&first.holder),
        first.token,
        TAKEOVER_BOUND,
        || logs_of(&replicas),
    )
    .await;
    eprintln!(
        "{} took over from the frozen {} in {took:?} at height {at}",
        next.holder, first.holder
    );
    let moved_on = w
        .wait_cursor(at + 300, "the new leader catching up", || {
            logs_of(&replicas)
        })
        .await;
    replicas[leader].thaw();
    // Awake, it finds the lease gone, stops its watcher and says so.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !replicas[leader].log().contains("lease_lost") {
        assert!(
            Instant::now() < deadline,
            "the thawed leader never noticed its lease was lost\n{}",
            replicas[leader].log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(w.cursor().await >= moved_on);
    let now_held = lease(&w.ctx.store, NETWORK).await.unwrap();
    assert_ne!(
        now_held.holder, first.holder,
        "it did not take the lease back"
    );
    w.assert_all_recorded_once_and_credited_once(|| logs_of(&replicas))
        .await;
    // Nothing the thawed process did after waking was written as a watcher:
    // every block is connected once (checked above) and its log shows the
    // fence refusing, or the supervisor stopping it before it tried.
    let log = replicas[leader].log();
    let after_wake = &log[log.find("lease_lost").unwrap()..];
    assert!(
        !after_wake.contains("applied"),
        "no block applied after the lease was lost:\n{after_wake}"
    );
}

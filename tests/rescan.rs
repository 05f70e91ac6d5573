//! Operators' rescans: the real watcher reads blocks it holds again from a
//! height and records what it had missed, once; a block the node replaced
//! is left to the reorg path; and the API takes requests from operators only.
//!
//! The miss is modelled as a node serving a block without one of its
//! transactions (same hash), then whole again: what load-balanced log
//! providers and lagging indexers really do. Deleting a transfer row would
//! fake a state ingest never produces (its settlement would stand without
//! it), and a payment to an address before it is issued is handled by the
//! watcher's own re-read of recent blocks.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::api::ApiClient;
use common::{Backend, Harness, TestDb};
use paywatch::api::TokenTable;
use paywatch::app::Context;
use paywatch::clock::Clock;
use paywatch::ingest::Ingest;
use paywatch::reconcile::Status;
use paywatch::settings::Settings;
use paywatch::store::{RescanOutcome, RescanRefusal, RescanRequest};
use paywatch::watcher::{self, WatcherConfig, WatcherDeps, WatcherError};
use paywatch_core::{Asset, CanonicalStream, Network};
use paywatch_testkit::ScriptedChain;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

on_both_databases!(
    a_rescan_records_what_the_node_left_out_once_and_settles_nothing_twice,
    a_rescan_outside_what_was_read_is_refused_and_a_pending_one_is_the_answer,
    a_block_the_node_replaced_is_left_to_the_reorg_and_ends_the_rescan,
    the_rescan_endpoints_answer_operators_only,
    a_block_the_source_learned_late_was_incomplete_is_read_again,
);

/// A rescan reads this many blocks between two polls.
const BLOCKS_PER_POLL: usize = 10;

struct Running {
    handle: JoinHandle<Result<(), WatcherError>>,
    stop: watch::Sender<bool>,
}

fn start(h: &Harness) -> Running {
    let cfg = WatcherConfig {
        network: h.network,
        start_height: Some(h.start_height),
        max_reorg_depth: 10,
        poll_interval: Duration::from_millis(20),
        events_per_transaction: 1,
        blocks_per_poll: BLOCKS_PER_POLL,
        dormancy: None,
        backstop_after_end: Duration::from_secs(86_400),
    };
    let deps = WatcherDeps {
        store: h.store.clone(),
        ingest: h.ingest.clone(),
        watch: h.watch.clone(),
        clock: h.clock.clone(),
        progress: Arc::new(Notify::new()),
    };
    let (stop, stop_rx) = watch::channel(false);
    let source = h.chain.source(h.watch.clone());
    Running {
        handle: tokio::spawn(watcher::run(cfg, source, deps, stop_rx)),
        stop,
    }
}

impl Running {
    async fn stop(self) {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.handle)
            .await
            .expect("stops promptly")
            .unwrap()
            .expect("a clean stop");
    }
}

async fn wait_cursor_at_tip(h: &Harness) {
    let tip = h.chain.tip();
    for _ in 0..500 {
        let s = h.store.chain_status(h.network).await.unwrap();
        if s.is_some_and(|s| s.cursor_hash.as_deref() == Some(tip.hash.as_str())) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the watcher never reached {tip}");
}

/// Waits until request `id` is finished, and returns it.
async fn wait_finished(h: &Harness, id: i64) -> RescanRequest {
    for _ in 0..500 {
        let all = h.store.rescans(h.network, 50).await.unwrap();
        let r = all.into_iter().find(|r| r.id == id).expect("request kept");
        if r.finished_at_ms.is_some() {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("rescan {id} never finished");
}

fn queued(outcome: RescanOutcome) -> RescanRequest {
    match outcome {
        RescanOutcome::Queued(r) => r,
        other => panic!("expected a queued rescan, got {other:?}"),
    }
}

async fn a_rescan_records_what_the_node_left_out_once_and_settles_nothing_twice(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(2).await;
    let topup = h.create("topup", "r-1", "BTC", "100").await;
    let order = h.create("order", "r-2", "BTC", "100").await;
    let running = start(&h);

    // The node serves the paying block without the order's payment.
    h.pay(&topup.address, Asset::Btc, topup.amount_due);
    let missed = h.pay(&order.address, Asset::Btc, order.amount_due);
    h.chain.withhold(&missed);
    h.mine(1);
    let paid_at = h.chain.height();
    h.mine(BLOCKS_PER_POLL + 2);
    wait_cursor_at_tip(&h).await;
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(topup.id).await.status, Status::Paid);
    assert_eq!(h.intent(order.id).await.status, Status::AwaitingPayment);
    let before = h.store.transfers(Some(h.network), None, 10).await.unwrap();
    assert_eq!(before.len(), 1);
    assert_eq!(h.balance("acct-1").await, 10_000);
    let topup_history = h.status_history(topup.id).await;
    let settled = h.footprint().await;
    running.stop().await;

    // The node serves whole blocks again; an operator asks, twice.
    h.chain.serve_everything();
    let now = h.clock.now_ms();
    let request = queued(
        h.store
            .request_rescan(h.network, paid_at, "operator", now)
            .await
            .unwrap(),
    );
    assert_eq!(
        (
            request.state(),
            request.from_height,
            request.requested_by.as_str()
        ),
        ("pending", paid_at, "operator")
    );
    let again = h
        .store
        .request_rescan(h.network, paid_at, "operator", now)
        .await
        .unwrap();
    assert_eq!(again, RescanOutcome::Pending(request.clone()));

    let tip = h.chain.height();
    let running = start(&h);
    let done = wait_finished(&h, request.id).await;
    assert_eq!(done.error, None, "{done:?}");
    assert_eq!(done.state(), "done");
    assert_eq!(done.to_height, Some(tip), "up to the cursor it started at");
    assert_eq!(
        done.blocks_read,
        tip - paid_at + 1,
        "every block, over more than one poll"
    );
    assert_eq!((done.transfers_seen, done.transfers_added), (2, 1));

    let after = h.store.transfers(Some(h.network), None, 10).await.unwrap();
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.contains(&before[0]), "the recorded one is untouched");
    let found = after.iter().find(|t| t.txid == missed).expect("recorded");
    assert_eq!(found.block_height, paid_at);
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(order.id).await.status, Status::Paid);
    assert_eq!(h.intent(topup.id).await.status, Status::Paid);
    assert_eq!(
        h.balance("acct-1").await,
        10_000,
        "the top-up credited once"
    );
    assert_eq!(h.status_history(topup.id).await, topup_history);
    let now_settled = h.footprint().await;
    assert_eq!(
        now_settled.settlements,
        settled.settlements + 1,
        "the order"
    );
    assert_eq!(now_settled.intents, settled.intents);

    // Finished, the same request is a new one, and finds nothing new.
    let second = queued(
        h.store
            .request_rescan(h.network, paid_at, "operator", h.clock.now_ms())
            .await
            .unwrap(),
    );
    assert_ne!(second.id, request.id);
    let done = wait_finished(&h, second.id).await;
    assert_eq!(done.error, None, "{done:?}");
    assert_eq!((done.transfers_seen, done.transfers_added), (2, 0));
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.footprint().await, now_settled, "nothing happened twice");
    assert_eq!(
        h.count("SELECT COUNT(*) FROM transfers").await,
        2,
        "nothing duplicated"
    );
    running.stop().await;
}

async fn a_rescan_outside_what_was_read_is_refused_and_a_pending_one_is_the_answer(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 1).await;
    let now = h.clock.now_ms();
    match h
        .store
        .request_rescan(h.network, h.start_height, "operator", now)
        .await
        .unwrap()
    {
        RescanOutcome::Refused(why @ RescanRefusal::NothingRead { .. }) => {
            assert!(
                why.to_string()
                    .contains("litecoin watcher has read no block"),
                "{why}"
            );
        }
        other => panic!("nothing read yet must be refused: {other:?}"),
    }
    h.mine(5);
    h.sync().await;
    let (start, tip) = (h.start_height, h.chain.height());
    for from in [start - 1, tip + 1] {
        let outcome = h
            .store
            .request_rescan(h.network, from, "operator", now)
            .await
            .unwrap();
        let RescanOutcome::Refused(why) = outcome else {
            panic!("{from} must be refused: {outcome:?}");
        };
        assert_eq!(
            why.to_string(),
            format!(
                "from_height {from} is outside what the litecoin watcher has read: its history \
                 here starts at height {start} and the chain's tip is {tip}"
            )
        );
    }
    assert!(h.store.rescans(h.network, 10).await.unwrap().is_empty());

    let first = queued(
        h.store
            .request_rescan(h.network, start, "operator", now)
            .await
            .unwrap(),
    );
    for from in [start, tip] {
        let again = h
            .store
            .request_rescan(h.network, from, "operator", now + 1)
            .await
            .unwrap();
        assert_eq!(again, RescanOutcome::Pending(first.clone()), "asked {from}");
    }
    assert_eq!(h.store.rescans(h.network, 10).await.unwrap(), vec![first]);
}

async fn a_block_the_node_replaced_is_left_to_the_reorg_and_ends_the_rescan(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "r-3", "ETH", "100").await;
    let running = start(&h);
    h.pay(&intent.address, Asset::Eth, intent.amount_due);
    h.mine(4);
    wait_cursor_at_tip(&h).await;
    running.stop().await;
    let old_tip = h.chain.height();

    // The node moves to another branch while no watcher runs; the rescan
    // comes first when it starts again, before the stream sees the reorg.
    h.chain.reorg(2);
    h.mine(3);
    let request = queued(
        h.store
            .request_rescan(h.network, h.start_height, "operator", h.clock.now_ms())
            .await
            .unwrap(),
    );
    let running = start(&h);
    let done = wait_finished(&h, request.id).await;
    assert_eq!(done.state(), "failed");
    let error = done.error.clone().unwrap();
    assert!(
        error.contains(&format!("block {} ", old_tip - 1)) && error.contains("reorganised"),
        "{error}"
    );
    assert_eq!(done.blocks_read, old_tip - 1 - h.start_height, "{done:?}");
    assert_eq!(done.transfers_added, 0);

    // The stream followed the reorg as any other.
    wait_cursor_at_tip(&h).await;
    assert_eq!(
        h.count("SELECT COUNT(*) FROM blocks WHERE orphaned_at IS NOT NULL")
            .await,
        2
    );
    let recorded = h.store.transfers(Some(h.network), None, 10).await.unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].orphaned_at_ms, None, "below the fork");
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    running.stop().await;
}

const STOREFRONT: &str = "shop-token-5e1b";
const OPERATOR: &str = "ops-token-0a9d";
const SUPPORT: &str = "help-token-c44f";

struct Api {
    client: ApiClient,
    _db: TestDb,
}

impl Api {
    /// The API over a database whose bitcoin watcher has read heights 100
    /// to 105, with no watcher running: a request stays pending.
    async fn start(backend: Backend) -> Api {
        let db = TestDb::new(backend).await;
        let mut s = Settings::load(None).expect("defaults load");
        s.database.url = db.url.clone();
        for (role, token) in [
            ("storefront", STOREFRONT),
            ("operator", OPERATOR),
            ("support", SUPPORT),
        ] {
            s.api
                .tokens
                .insert(role.into(), vec![TokenTable::hash_token(token)]);
        }
        let n = s.networks.get_mut("bitcoin").expect("bitcoin settings");
        n.enabled = true;
        n.source = "devchain".into();
        s.devchain.enabled = true;
        let ctx = Context::build(s).await.expect("context builds");

        let chain = ScriptedChain::new(Network::Bitcoin, 100);
        chain.mine_n(5);
        let now = ctx.clock.now_ms();
        ctx.store
            .ensure_chain_state(Network::Bitcoin, now)
            .await
            .unwrap();
        let mut stream = CanonicalStream::new(chain.unfiltered_source(), Vec::new(), 100, 10);
        let events = stream.next_batch(50).await.unwrap();
        Ingest::new(ctx.store.clone(), ctx.clock.clone())
            .apply(Network::Bitcoin, &events)
            .await
            .unwrap();
        ctx.store
            .record_chain_progress(Network::Bitcoin, 105, 104, now)
            .await
            .unwrap();

        Api {
            client: ApiClient::serve(ctx.clone()).await,
            _db: db,
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> (StatusCode, Value) {
        self.client.call(method, path, token, None, body).await
    }

    async fn rescan(&self, token: Option<&str>, body: Value) -> (StatusCode, Value) {
        self.call(
            Method::POST,
            "/v1/networks/bitcoin/rescan",
            token,
            Some(body.to_string()),
        )
        .await
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {v}"))
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or("")
}

async fn the_rescan_endpoints_answer_operators_only(b: Backend) {
    let api = Api::start(b).await;
    let ask = json!({"from_height": "101"});
    for token in [STOREFRONT, SUPPORT] {
        let (st, v) = api.rescan(Some(token), ask.clone()).await;
        assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "forbidden"), "{v}");
        let (st, v) = api
            .call(
                Method::GET,
                "/v1/networks/bitcoin/rescans",
                Some(token),
                None,
            )
            .await;
        assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "forbidden"), "{v}");
    }
    let (st, v) = api.rescan(None, ask.clone()).await;
    assert_eq!((st, code(&v)), (StatusCode::UNAUTHORIZED, "unauthorized"));

    for (body, want, mentions) in [
        (
            json!({"from_height": 101}),
            StatusCode::BAD_REQUEST,
            "from_height: must be a string",
        ),
        (
            json!({"from_height": "abc"}),
            StatusCode::BAD_REQUEST,
            "'abc' is not a block height",
        ),
        (
            json!({"from_height": "-1"}),
            StatusCode::BAD_REQUEST,
            "'-1' is not a block height",
        ),
        (
            json!({"from_height": "+101"}),
            StatusCode::BAD_REQUEST,
            "'+101'",
        ),
        (
            json!({}),
            StatusCode::BAD_REQUEST,
            "from_height: missing field",
        ),
        (
            json!({"from_height": "101", "to": "1"}),
            StatusCode::BAD_REQUEST,
            "unknown field 'to'",
        ),
        (
            json!({"from_height": "99"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "from_height 99 is outside what the bitcoin watcher has read: its history here \
             starts at height 100 and the chain's tip is 105",
        ),
        (
            json!({"from_height": "106"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "tip is 105",
        ),
    ] {
        let (st, v) = api.rescan(Some(OPERATOR), body.clone()).await;
        assert_eq!(st, want, "{body}: {v}");
        assert!(message(&v).contains(mentions), "{body}: {v}");
        if st == StatusCode::UNPROCESSABLE_ENTITY {
            assert_eq!(code(&v), "height_out_of_range");
        }
    }
    for path in [
        "/v1/networks/dogecoin/rescan",
        "/v1/networks/litecoin/rescan",
    ] {
        let (st, v) = api
            .call(Method::POST, path, Some(OPERATOR), Some(ask.to_string()))
            .await;
        assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"), "{v}");
    }

    let (st, first) = api.rescan(Some(OPERATOR), ask.clone()).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{first}");
    assert_eq!(first["state"], json!("pending"));
    assert_eq!(first["from_height"], json!("101"));
    assert_eq!(first["requested_by"], json!("operator"));
    assert_eq!(first["network"], json!("bitcoin"));
    for again in ["101", "103"] {
        let (st, v) = api
            .rescan(Some(OPERATOR), json!({"from_height": again}))
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(v, first, "the pending request, unchanged");
    }
    let (st, listed) = api
        .call(
            Method::GET,
            "/v1/networks/bitcoin/rescans",
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(listed["rescans"], json!([first]));
}

/// The Electrum source builds a block from address histories, and the news
/// that an address's history changed can come after the block was read.
/// When the source says so, the watcher queues a rescan from that block (so
/// it survives a restart) and records the payment at its block, once.
async fn a_block_the_source_learned_late_was_incomplete_is_read_again(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 1).await;
    h.import_pool(1).await;
    let order = h.create("order", "r-1", "LTC", "100").await;
    let running = start(&h);

    let late = h.pay(&order.address, Asset::Ltc, order.amount_due);
    h.chain.withhold(&late);
    h.mine(1);
    let paid_at = h.chain.height();
    h.mine(3);
    wait_cursor_at_tip(&h).await;
    assert!(h
        .store
        .transfers(Some(h.network), None, 10)
        .await
        .unwrap()
        .is_empty());

    // The news arrives: the source now has the block whole, and says so.
    h.chain.serve_everything();
    h.chain.report_missed(paid_at);
    let mut recorded = Vec::new();
    for _ in 0..500 {
        recorded = h.store.transfers(Some(h.network), None, 10).await.unwrap();
        if !recorded.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(recorded.len(), 1, "the late payment is recorded");
    assert_eq!(
        (recorded[0].txid.as_str(), recorded[0].block_height),
        (late.as_str(), paid_at)
    );
    assert_eq!(
        h.chain.missed(),
        None,
        "the source was told the rescan is queued"
    );
    let rescans = h.store.rescans(h.network, 10).await.unwrap();
    assert_eq!(rescans.len(), 1, "{rescans:?}");
    assert_eq!(rescans[0].from_height, paid_at);
    assert!(
        rescans[0].requested_by.contains("learned late"),
        "{rescans:?}"
    );
    let done = wait_finished(&h, rescans[0].id).await;
    assert_eq!((done.transfers_seen, done.transfers_added), (1, 1));

    h.mine(6);
    wait_cursor_at_tip(&h).await;
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(order.id).await.status, Status::Paid);
    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 1, "once");
    running.stop().await;
}

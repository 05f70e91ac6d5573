//! The real watcher task: stream → ingest, health, backoff and halting, on
//! the scripted chain against both databases.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Backend, Harness};
use paywatch::clock::Clock;
use paywatch::reconcile::Status;
use paywatch::watcher::{self, Dormancy, WatcherConfig, WatcherDeps, WatcherError};
use paywatch_core::{Asset, Network, StreamError, WatchSet};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

on_both_databases!(
    a_block_read_before_the_watcher_learned_of_an_address_is_read_again,
    a_failed_write_is_applied_again_without_waiting_for_another_block,
    the_watcher_records_payments_and_its_progress,
    a_node_outage_leaves_the_watcher_degraded_then_it_recovers_without_loss,
    a_reorg_deeper_than_allowed_halts_the_watcher_and_says_so,
    no_address_is_issued_on_a_network_whose_watcher_is_halted,
    an_address_issued_by_another_instance_is_watched_within_one_poll,
    an_address_committed_long_after_it_was_stamped_is_found_by_the_sweep,
    a_watcher_without_new_blocks_for_six_block_times_is_stalled_until_one_comes,
    an_ended_address_goes_dormant_and_the_sweep_finds_a_late_payment_to_it,
    dormant_addresses_come_back_with_a_rescan_on_a_source_that_cannot_look_them_up,
    a_sweep_that_fails_never_holds_the_chain_back,
    a_blocks_money_commits_with_its_finality_so_one_reconcile_pass_decides_it,
);

struct Running {
    handle: JoinHandle<Result<(), WatcherError>>,
    stop: watch::Sender<bool>,
}

fn start(h: &Harness, watch_set: Arc<WatchSet>, max_reorg_depth: usize) -> Running {
    start_with(h, watch_set, max_reorg_depth, None)
}

fn start_with(
    h: &Harness,
    watch_set: Arc<WatchSet>,
    max_reorg_depth: usize,
    dormancy: Option<Dormancy>,
) -> Running {
    let cfg = WatcherConfig {
        network: h.network,
        start_height: Some(h.chain.height()),
        max_reorg_depth,
        poll_interval: Duration::from_millis(20),
        events_per_transaction: 1,
        blocks_per_poll: 10,
        dormancy,
        backstop_after_end: Duration::from_secs(86_400),
    };
    let deps = WatcherDeps {
        store: h.store.clone(),
        ingest: h.ingest.clone(),
        watch: watch_set.clone(),
        clock: h.clock.clone(),
        progress: Arc::new(Notify::new()),
    };
    let (stop, stop_rx) = watch::channel(false);
    let source = h.chain.source(watch_set);
    Running {
        handle: tokio::spawn(watcher::run(cfg, source, deps, stop_rx)),
        stop,
    }
}

impl Running {
    async fn stop(self) -> Result<(), WatcherError> {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.handle)
            .await
            .expect("stops promptly")
            .unwrap()
    }
}

/// Waits until the stored watcher state satisfies `ok`.
async fn wait_for(h: &Harness, what: &str, ok: impl Fn(&paywatch::store::ChainStatus) -> bool) {
    for _ in 0..500 {
        if let Some(s) = h.store.chain_status(h.network).await.unwrap() {
            if ok(&s) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "timed out waiting for {what}: {:?}",
        h.store.chain_status(h.network).await.unwrap()
    );
}

async fn the_watcher_records_payments_and_its_progress(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 2).await;
    h.import_pool(2).await;
    let intent = h.create("order", "w-1", "LTC", "100").await;
    let running = start(&h, h.watch.clone(), 10);

    h.pay(&intent.address, Asset::Ltc, intent.amount_due);
    h.mine(3);
    let tip = h.chain.height();
    wait_for(&h, "the cursor at the tip", |s| {
        s.cursor_height == Some(tip) && s.final_height == Some(tip - 1)
    })
    .await;
    let status = h.store.chain_status(h.network).await.unwrap().unwrap();
    assert_eq!(status.watcher_state, "running");
    assert_eq!(status.tip_height, Some(tip));
    assert_eq!(status.last_error, None);

    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    assert_eq!(
        h.store
            .transfers(Some(h.network), None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    running.stop().await.expect("a clean stop");
}

async fn a_node_outage_leaves_the_watcher_degraded_then_it_recovers_without_loss(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "w-2", "BTC", "100").await;
    let running = start(&h, h.watch.clone(), 10);
    wait_for(&h, "the first poll", |s| s.watcher_state == "running").await;

    h.chain.fail_next(4);
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    wait_for(&h, "degraded health", |s| s.watcher_state == "degraded").await;
    let status = h.store.chain_status(h.network).await.unwrap().unwrap();
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("scripted node outage"),
        "{status:?}"
    );

    let tip = h.chain.height();
    wait_for(&h, "recovery", |s| {
        s.watcher_state == "running" && s.cursor_height == Some(tip) && s.final_height == Some(tip)
    })
    .await;
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    assert_eq!(h.balance("acct-1").await, 10_000);
    running.stop().await.expect("a clean stop");
}

async fn a_reorg_deeper_than_allowed_halts_the_watcher_and_says_so(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "w-3", "ETH", "100").await;
    let running = start(&h, h.watch.clone(), 3);
    h.pay(&intent.address, Asset::Eth, intent.amount_due);
    h.mine(6);
    let tip = h.chain.height();
    wait_for(&h, "the cursor at the tip", |s| {
        s.cursor_height == Some(tip)
    })
    .await;
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);

    // The node switches to a branch without the payment, 6 blocks deep.
    h.chain.reorg(6);
    h.mine(7);
    let outcome = tokio::time::timeout(Duration::from_secs(10), running.handle)
        .await
        .expect("halts")
        .unwrap();
    match outcome {
        Err(WatcherError::Halted {
            network,
            source: StreamError::ReorgTooDeep { max_depth, .. },
        }) => {
            assert_eq!((network, max_depth), (Network::Ethereum, 3));
        }
        other => panic!("expected a halt on a too-deep reorg, got {other:?}"),
    }
    let status = h.store.chain_status(h.network).await.unwrap().unwrap();
    assert_eq!(status.watcher_state, "halted");
    assert!(status
        .last_error
        .unwrap()
        .contains("reorg deeper than 3 blocks"));
    assert_eq!(
        status.cursor_height,
        Some(tip),
        "nothing was resynced silently"
    );
    assert_eq!(
        h.store.transfers(Some(h.network), None, 10).await.unwrap()[0].orphaned_at_ms,
        None,
        "nothing is orphaned behind the operator's back"
    );
}

// Issue 21, found 2: intent creation never looked at the watcher, so
// addresses kept being issued on a network nobody watched.
async fn no_address_is_issued_on_a_network_whose_watcher_is_halted(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(2).await;
    let now = h.clock.now_ms();
    h.store
        .record_watcher_trouble(h.network, "halted", "reorg deeper than 3 blocks", now)
        .await
        .unwrap();
    let refused = h
        .try_create("order", "w-halted", "ETH", "100")
        .await
        .expect_err("no address on a halted network");
    assert_eq!(refused.code(), "network_halted");
    let said = refused.to_string();
    assert!(
        said.contains("ethereum") && said.contains("reorg deeper than 3 blocks"),
        "{said}"
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM addresses WHERE issued_at IS NOT NULL")
            .await,
        0,
        "nothing was issued"
    );

    // Resumed (a degraded watcher still watches): addresses are issued again.
    h.store
        .record_watcher_trouble(h.network, "degraded", "node slow", now)
        .await
        .unwrap();
    h.create("order", "w-halted", "ETH", "100").await;
}

async fn an_address_issued_by_another_instance_is_watched_within_one_poll(b: Backend) {
    let mut h = Harness::new(b, Network::Solana, 1).await;
    h.import_pool(2).await;
    // This watcher's own set starts empty; the intent is issued through the
    // harness's service, whose watch set is not the watcher's.
    let own = Arc::new(WatchSet::new(Network::Solana));
    let running = start(&h, own.clone(), 10);
    wait_for(&h, "the first poll", |s| s.watcher_state == "running").await;
    let intent = h.create("order", "w-4", "SOL", "100").await;
    for _ in 0..500 {
        if own.contains(&intent.address) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(own.contains(&intent.address), "picked up from the database");
    h.pay(&intent.address, Asset::Sol, intent.amount_due);
    h.mine(2);
    let tip = h.chain.height();
    wait_for(&h, "the cursor at the tip", |s| {
        s.cursor_height == Some(tip)
    })
    .await;
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    let _ = h.clock.now_ms();
    running.stop().await.expect("a clean stop");
}

/// A block's transfers and the final height they make commit together: no
/// reader ever sees a final block's money as not final, and the one
/// reconcile pass the commit wakes decides the intent (before, the final
/// height followed in a second transaction, and a first pass found the
/// payment `confirming`).
async fn a_blocks_money_commits_with_its_finality_so_one_reconcile_pass_decides_it(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "w-one-pass", "LTC", "100").await;
    let running = start(&h, h.watch.clone(), 10);
    wait_for(&h, "the first poll", |s| s.watcher_state == "running").await;

    // The node serves the paying block, then times out when asked what is
    // final: the watcher holds the block without knowing its finality.
    h.pay(&intent.address, Asset::Ltc, intent.amount_due);
    h.chain.fail_final_height_after_block(h.chain.height() + 1);
    h.mine(1);
    let paying_block = h.chain.height();
    wait_for(&h, "the failed question", |s| s.watcher_state == "degraded").await;
    let status = h.store.chain_status(h.network).await.unwrap().unwrap();
    for t in h.store.transfers(Some(h.network), None, 10).await.unwrap() {
        assert!(
            status.final_height.is_some_and(|f| f >= t.block_height),
            "the payment in block {} was committed without its finality (final height {:?}): \
             a reconcile pass between the two commits reads a final payment as confirming",
            t.block_height,
            status.final_height
        );
    }

    // Written once the node answers: one pass decides it.
    wait_for_a_transfer(&h).await;
    let status = h.store.chain_status(h.network).await.unwrap().unwrap();
    assert_eq!(status.final_height, Some(paying_block), "{status:?}");
    let pass = h.reconciler.run_once().await.unwrap();
    assert_eq!(pass.settled, 1, "{pass:?}");
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    running.stop().await.expect("a clean stop");
}

async fn a_failed_write_is_applied_again_without_waiting_for_another_block(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "w-5", "BTC", "100").await;
    let running = start(&h, h.watch.clone(), 10);
    wait_for(&h, "the first poll", |s| s.watcher_state == "running").await;

    // The database refuses transfer rows for a while, as during an outage.
    let (block_writes, allow_writes) = match b {
        Backend::Sqlite => (
            "CREATE TRIGGER outage BEFORE INSERT ON transfers BEGIN SELECT RAISE(ABORT, 'outage'); END",
            "DROP TRIGGER outage",
        ),
        Backend::Postgres => (
            "ALTER TABLE transfers ADD CONSTRAINT outage CHECK (false) NOT VALID",
            "ALTER TABLE transfers DROP CONSTRAINT outage",
        ),
    };
    h.store.execute_raw(block_writes).await.unwrap();
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    wait_for(&h, "degraded health", |s| s.watcher_state == "degraded").await;
    h.store.execute_raw(allow_writes).await.unwrap();

    // No new block: the failed one must still be applied.
    let tip = h.chain.height();
    wait_for(&h, "the failed block applied", |s| {
        s.cursor_height == Some(tip) && s.final_height == Some(tip)
    })
    .await;
    assert_eq!(
        h.store
            .transfers(Some(h.network), None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    running.stop().await.expect("a clean stop");
}

/// Pays 0.04 ETH to `address` in a block of its own and waits until the
/// watcher has read that block; its height.
async fn pay_and_read(h: &Harness, address: &str) -> u64 {
    h.pay(
        address,
        Asset::Eth,
        paywatch_core::Amount(40_000_000_000_000_000),
    );
    h.mine(1);
    let tip = h.chain.height();
    wait_for(h, "the paying block read", |s| s.cursor_height == Some(tip)).await;
    tip
}

/// Waits up to 5 s for a transfer to be recorded.
async fn wait_for_a_transfer(h: &Harness) {
    for _ in 0..500 {
        if !h
            .store
            .transfers(Some(h.network), None, 10)
            .await
            .unwrap()
            .is_empty()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn a_block_read_before_the_watcher_learned_of_an_address_is_read_again(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    let pool = h.import_pool(1).await;
    // Another instance's watch set: this watcher learns of addresses only
    // from the database.
    let own = Arc::new(WatchSet::new(Network::Ethereum));
    let running = start(&h, own.clone(), 10);
    wait_for(&h, "the first poll", |s| s.watcher_state == "running").await;

    // The race, made deterministic: the watcher reads the paying block while
    // the address is still unknown to it...
    let tip = pay_and_read(&h, &pool[0]).await;
    assert_eq!(
        h.store
            .transfers(Some(h.network), None, 10)
            .await
            .unwrap()
            .len(),
        0
    );

    // ...and learns of it afterwards, issued elsewhere.
    let intent = h.create("order", "w-6", "ETH", "100").await;
    assert_eq!(intent.address, pool[0]);
    wait_for_a_transfer(&h).await;
    let recorded = h.store.transfers(Some(h.network), None, 10).await.unwrap();
    assert_eq!(
        recorded.len(),
        1,
        "the block was read again for the new address"
    );
    assert_eq!(recorded[0].block_height, tip);
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    running.stop().await.expect("a clean stop");
}

/// Another instance stamped an address issued at T but committed it much
/// later (a stalled transaction, or its clock behind this one's): the
/// per-poll look back (seconds) misses it, the minutely sweep (five minutes
/// back) finds it, and the block that paid it meanwhile is read again.
async fn an_address_committed_long_after_it_was_stamped_is_found_by_the_sweep(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    let pool = h.import_pool(1).await;
    let own = Arc::new(WatchSet::new(Network::Ethereum));
    let t0 = h.clock.now_ms();
    let running = start(&h, own.clone(), 10);
    wait_for(&h, "the first poll", |s| s.watcher_state == "running").await;
    h.clock.advance_secs(30);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let tip = pay_and_read(&h, &pool[0]).await;
    // Committed now, stamped well before the watcher's last look (mining
    // moved the clock on too).
    let issued = h
        .store
        .execute_raw(&format!(
            "UPDATE addresses SET issued_at = {} WHERE network = 'ethereum'",
            t0 + 10_000
        ))
        .await
        .unwrap();
    assert_eq!(issued, 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !own.contains(&pool[0]),
        "the per-poll look back is seconds, not minutes"
    );

    // A minute after the last sweep, the next poll looks five minutes back.
    h.clock.advance_secs(61);
    wait_for_a_transfer(&h).await;
    assert!(own.contains(&pool[0]), "the sweep found it");
    let recorded = h.store.transfers(Some(h.network), None, 10).await.unwrap();
    assert_eq!(recorded.len(), 1, "the paying block was read again");
    assert_eq!(recorded[0].block_height, tip);
    running.stop().await.expect("a clean stop");
}

async fn a_watcher_without_new_blocks_for_six_block_times_is_stalled_until_one_comes(b: Backend) {
    let h = Harness::new(b, Network::Bitcoin, 1).await;
    let running = start(&h, h.watch.clone(), 10);
    wait_for(&h, "the first poll", |s| s.watcher_state == "running").await;
    // 59 minutes without a block is still a quiet spell on Bitcoin.
    h.clock.advance_secs(59 * 60);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = h.store.chain_status(h.network).await.unwrap().unwrap();
    assert_eq!(status.watcher_state, "running");
    // An hour is about six block times.
    h.clock.advance_secs(2 * 60);
    wait_for(&h, "stalled", |s| s.watcher_state == "stalled").await;
    let status = h.store.chain_status(h.network).await.unwrap().unwrap();
    let why = status.last_error.unwrap_or_default();
    assert!(
        why.contains("no new block for 3660 s") && why.contains("bitcoin"),
        "{why}"
    );
    h.mine(1);
    wait_for(&h, "running again", |s| {
        s.watcher_state == "running" && s.last_error.is_none()
    })
    .await;
    running.stop().await.expect("a clean stop");
}

/// An hour without money after its intent ended, and a sweep every ten minutes.
const DORMANCY: Dormancy = Dormancy {
    dormant_after: Duration::from_secs(3600),
    sweep_every: Duration::from_secs(600),
    page: 10,
};

/// Polls until `ok` holds, or fails naming `what`.
async fn eventually(what: &str, ok: impl Fn() -> bool) {
    for _ in 0..500 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// An intent on a source that looks addresses up, expired and left quiet
/// for an hour: its address goes dormant. Returns it, and the watcher.
async fn dormant_intent(h: &Harness) -> (paywatch::store::IntentRecord, Running) {
    h.chain.answer_look_ups(true);
    let intent = h.create("order", "dormant", "LTC", "100").await;
    let running = start_with(h, h.watch.clone(), 2, Some(DORMANCY));
    wait_for(h, "the first poll", |s| s.watcher_state == "running").await;
    h.pass_expiry(&intent);
    h.reconciler.run_until_idle().await.unwrap();
    assert_eq!(h.intent(intent.id).await.status, Status::Expired);
    h.mine(4);
    h.clock.advance_secs(3600);
    eventually("the ended address to leave the watch set", || {
        !h.watch.contains(&intent.address)
    })
    .await;
    let row = h
        .row(&format!(
            "SELECT dormant_at, dormant_height FROM addresses WHERE address = '{}'",
            intent.address
        ))
        .await;
    assert!(row.get("dormant_at").is_some(), "marked dormant");
    assert!(
        row.int("dormant_height") <= i64::try_from(h.chain.height()).unwrap() - 3,
        "read to below the reorg window"
    );
    (intent, running)
}

/// Pays the dormant intent's address in full, then mines two blocks, which
/// the watcher reads without the address; returns the tip.
async fn pay_while_dormant(h: &Harness, intent: &paywatch::store::IntentRecord) -> u64 {
    h.pay(&intent.address, Asset::Ltc, intent.amount_due);
    h.mine(2);
    let tip = h.chain.height();
    wait_for(h, "the paying blocks read", |s| {
        s.cursor_height == Some(tip)
    })
    .await;
    assert!(
        h.store
            .transfers(Some(h.network), None, 10)
            .await
            .unwrap()
            .is_empty(),
        "read while dormant: not seen live"
    );
    tip
}

/// Issue 21, found 2: every issued address stayed watched for ever. Now one
/// whose intent ended and saw no money leaves the live set; money sent to
/// it later is found by the sweep within one round, read again from its
/// block, and goes to review.
async fn an_ended_address_goes_dormant_and_the_sweep_finds_a_late_payment_to_it(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 2).await;
    h.import_pool(1).await;
    let (intent, running) = dormant_intent(&h).await;
    let tip = pay_while_dormant(&h, &intent).await;

    // The next round of the sweep, ten minutes on.
    h.clock.advance_secs(600);
    wait_for_a_transfer(&h).await;
    let recorded = h.store.transfers(Some(h.network), None, 10).await.unwrap();
    assert_eq!(recorded.len(), 1, "the paying block was read again");
    assert_eq!(recorded[0].block_height, tip - 1);
    assert!(h.watch.contains(&intent.address), "watched again");
    assert_eq!(
        h.count("SELECT COUNT(*) FROM addresses WHERE dormant_at IS NULL AND woke_at IS NOT NULL")
            .await,
        1
    );
    h.mine(1);
    let tip = h.chain.height();
    wait_for(&h, "final past the payment", |s| {
        s.final_height >= Some(tip - 1)
    })
    .await;
    h.reconciler.run_until_idle().await.unwrap();
    let late = h.intent(intent.id).await;
    assert_eq!(late.status, Status::NeedsReview, "{:?}", late.reason);
    assert_eq!(
        late.exception,
        Some(paywatch::reconcile::Exception::PaidLate)
    );
    running.stop().await.expect("a clean stop");
}

/// The network moves from Electrum to a node, which reads whole blocks and
/// cannot look an address up: the dormant addresses are watched again, and
/// the blocks read while they were dormant are read again for them.
async fn dormant_addresses_come_back_with_a_rescan_on_a_source_that_cannot_look_them_up(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Litecoin, 2).await;
    h.import_pool(1).await;
    let (intent, running) = dormant_intent(&h).await;
    pay_while_dormant(&h, &intent).await;
    running.stop().await.expect("a clean stop");

    h.chain.answer_look_ups(false);
    // A new process: its watch set starts empty.
    let fresh = Arc::new(WatchSet::new(Network::Litecoin));
    let running = start_with(&h, fresh.clone(), 2, None);
    wait_for_a_transfer(&h).await;
    let recorded = h.store.transfers(Some(h.network), None, 10).await.unwrap();
    assert_eq!(recorded.len(), 1, "the paying block was read again");
    assert!(fresh.contains(&intent.address));
    assert_eq!(
        h.count("SELECT COUNT(*) FROM addresses WHERE dormant_at IS NOT NULL")
            .await,
        0
    );
    running.stop().await.expect("a clean stop");
}

/// Look-ups the server refuses leave the sweep's page for later; blocks are
/// read on meanwhile, and the page asked again finds the payment.
async fn a_sweep_that_fails_never_holds_the_chain_back(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 2).await;
    h.import_pool(1).await;
    let (intent, running) = dormant_intent(&h).await;
    pay_while_dormant(&h, &intent).await;
    // A server that refuses every look-up for now.
    h.chain.fail_look_ups(u32::MAX);
    h.clock.advance_secs(600);
    h.mine(3);
    let tip = h.chain.height();
    wait_for(&h, "blocks read while the sweep fails", |s| {
        s.cursor_height == Some(tip) && s.watcher_state == "running"
    })
    .await;
    h.chain.fail_look_ups(0);
    // The page is asked again after a gap (one page a round here: the round).
    h.clock.advance_secs(600);
    wait_for_a_transfer(&h).await;
    assert_eq!(
        h.store
            .transfers(Some(h.network), None, 10)
            .await
            .unwrap()
            .len(),
        1,
        "found once the look-ups answer"
    );
    running.stop().await.expect("a clean stop");
}

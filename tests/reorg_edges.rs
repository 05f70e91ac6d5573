//! Finality and reorg edge cases found in review, on both databases: a node
//! that is behind, a reorg between a batch and the finality check, a resolved
//! intent losing its money, and a crash after the first block is disconnected.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{Backend, Harness};
use paywatch::clock::Clock;
use paywatch::reconcile::{Exception, Status};
use paywatch::watcher::{self, WatcherConfig, WatcherDeps};
use paywatch_core::{
    Asset, BlockRef, BlockSource, CanonicalStream, ChainEvent, Network, SourceBlock, SourceError,
};
use paywatch_testkit::ScriptedSource;
use tokio::sync::{watch, Notify};

on_both_databases!(
    a_node_that_merely_lags_behind_the_cursor_orphans_nothing_and_reverses_no_credit,
    a_reorg_right_after_the_batch_is_applied_never_makes_the_stale_block_final,
    a_resolved_intent_whose_credited_payment_is_reorged_away_is_still_reversed,
    a_crash_after_disconnecting_the_first_ingested_block_loses_no_payment,
);

/// A node (or a load-balanced RPC backend) that is `lag` blocks behind the
/// real chain: same blocks, shorter.
struct LaggingSource {
    inner: ScriptedSource,
    cap: u64,
    confirmations: u64,
}

#[async_trait]
impl BlockSource for LaggingSource {
    fn network(&self) -> Network {
        self.inner.network()
    }
    async fn tip(&self) -> Result<BlockRef, SourceError> {
        Ok(self
            .inner
            .block(self.cap)
            .await?
            .expect("capped block")
            .block)
    }
    async fn final_height(&self) -> Result<u64, SourceError> {
        Ok((self.cap + 1).saturating_sub(self.confirmations))
    }
    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        if height > self.cap {
            return Ok(None);
        }
        self.inner.block(height).await
    }
}

/// A node that is merely behind (restart, failover to a lagging backend, an
/// Electrum server catching up) shows no block of its own: it must not orphan
/// valid, final blocks, let alone reverse a good credit.
async fn a_node_that_merely_lags_behind_the_cursor_orphans_nothing_and_reverses_no_credit(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "lag-1", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(4);
    h.sync().await;
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    assert_eq!(h.balance("acct-1").await, 10_000);

    // The watcher now talks to a node three blocks behind: the payment's
    // block (start + 1) is not there yet, but nothing was replaced.
    let cursor = h
        .store
        .load_cursor(h.network, h.max_depth + 1)
        .await
        .unwrap();
    let start = cursor.first().unwrap().height;
    let lagging = LaggingSource {
        inner: h.chain.source(h.watch.clone()),
        cap: h.start_height,
        confirmations: 2,
    };
    let mut stream = CanonicalStream::new(lagging, cursor, start, h.max_depth);
    let events = stream.next_batch(50).await.expect("stream");
    let disconnects = events
        .iter()
        .filter(|e| matches!(e, ChainEvent::Disconnected { .. }))
        .count();
    h.ingest.apply(h.network, &events).await.unwrap();
    let fh = stream.confirmed_final_height().await.unwrap().unwrap_or(0);
    h.store
        .record_chain_progress(h.network, h.start_height, fh, h.clock.now_ms())
        .await
        .unwrap();
    h.reconciler.run_until_idle().await.unwrap();

    let i = h.intent(intent.id).await;
    assert_eq!(
        (i.status, i.exception, h.balance("acct-1").await),
        (Status::Paid, None, 10_000),
        "a final, credited payment still on the chain is never reversed: {:?}",
        i.reason
    );
    assert_eq!(
        disconnects, 0,
        "a node that is behind is not a reorg: no block left the chain"
    );
}

/// The watcher applies a batch, then asks the node for its final height. If
/// the node reorganises in between, a bare height would name our stale block
/// as final and reconcile would credit money that was never final on the
/// node's chain; the stream confirms the block at that height first.
async fn a_reorg_right_after_the_batch_is_applied_never_makes_the_stale_block_final(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "race-1", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1); // block A, holding the payment, at start + 1

    // The watcher's step, as in watcher.rs: next_batch → ingest.apply ...
    let events = h.stream.next_batch(50).await.unwrap();
    h.ingest.apply(h.network, &events).await.unwrap();
    // ... the node switches to a branch without the payment, two blocks long ...
    h.chain.reorg(1);
    h.mine(2);
    // ... then the final height → record_chain_progress, and reconcile runs.
    assert_eq!(
        h.stream.source().final_height().await.unwrap(),
        h.start_height + 1,
        "the node calls height start+1 final"
    );
    let fh = h
        .stream
        .confirmed_final_height()
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(fh, 0, "but its block at start+1 is not the one we applied");
    h.store
        .record_chain_progress(h.network, h.chain.height(), fh, h.clock.now_ms())
        .await
        .unwrap();
    h.reconciler.run_until_idle().await.unwrap();

    let i = h.intent(intent.id).await;
    assert_eq!(
        (i.paid_at_ms, h.balance("acct-1").await),
        (None, 0),
        "credited from block A, which was never final on the node's chain: {:?} {:?}",
        i.status,
        i.reason
    );
}

/// A top-up that settled but went to review (wrong asset alongside, or a
/// duplicate) and was resolved by support must not keep its credit when a
/// reorg later removes the payment.
async fn a_resolved_intent_whose_credited_payment_is_reorged_away_is_still_reversed(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let intent = h.create("topup", "resolved-1", "USDT", "100").await;
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.pay(&intent.address, Asset::Usdc, paywatch_core::Amount(1)); // dust of another asset
    h.mine(2);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(
        (i.status, i.exception),
        (Status::NeedsReview, Some(Exception::WrongAsset))
    );
    assert_eq!(h.balance("acct-1").await, 10_000, "settled once");

    // Support closes the review (the operator surface does this write).
    h.store
        .execute_raw(&format!(
            "UPDATE intents SET status = 'resolved' WHERE id = {}",
            intent.id
        ))
        .await
        .unwrap();

    // A reorg after finality removes the payment for good.
    h.chain.reorg(3);
    h.mine(3);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(i.amount_final, paywatch_core::Amount(0), "payment gone");
    assert_eq!(
        h.balance("acct-1").await,
        0,
        "the credit for money a reorg removed is taken back (status {:?}, reversed_at {:?})",
        i.status,
        i.reversed_at_ms
    );
}

/// With one event per transaction (the default), a reorg that replaces the
/// very first block this database ingested commits its disconnects one by
/// one. A crash after the last leaves no active block; the restarted watcher
/// must resume at the stored start height, not at the node's tip, or the new
/// branch's payments below the tip are never read.
async fn a_crash_after_disconnecting_the_first_ingested_block_loses_no_payment(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    h.mine(1);
    // First start without start_height: the watcher begins at the tip.
    let first = h.chain.height();
    h.stream = CanonicalStream::new(
        h.chain.source(h.watch.clone()),
        Vec::new(),
        first,
        h.max_depth,
    );
    h.mine(2);
    h.sync().await;
    let intent = h.create("order", "first-block", "BTC", "100").await;

    // The node replaces everything this database has, and the payment lands
    // in the new branch's first block.
    h.chain.reorg(3);
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(5);
    let events = h.stream.next_batch(50).await.unwrap();
    let disconnects: Vec<ChainEvent> = events
        .iter()
        .filter(|e| matches!(e, ChainEvent::Disconnected { .. }))
        .cloned()
        .collect();
    assert_eq!(disconnects.len(), 3);
    // events_per_transaction = 1: one transaction each, then the process dies.
    for e in &disconnects {
        h.ingest
            .apply(h.network, std::slice::from_ref(e))
            .await
            .unwrap();
    }

    // The restarted daemon's watcher, as configured by default.
    let cfg = WatcherConfig {
        network: h.network,
        start_height: None,
        max_reorg_depth: h.max_depth,
        poll_interval: Duration::from_millis(20),
        events_per_transaction: 1,
        blocks_per_poll: 10,
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
    let task = tokio::spawn(watcher::run(
        cfg,
        h.chain.source(h.watch.clone()),
        deps,
        stop_rx,
    ));
    let tip = h.chain.height();
    for _ in 0..250 {
        let s = h.store.chain_status(h.network).await.unwrap().unwrap();
        if s.cursor_height == Some(tip) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    h.reconciler.run_until_idle().await.unwrap();

    let recorded = h
        .count(&format!(
            "SELECT COUNT(*) FROM transfers WHERE to_address = '{}' AND orphaned_at IS NULL",
            intent.address
        ))
        .await;
    assert_eq!(
        recorded, 1,
        "the payment in the new branch's first block is recorded after the restart"
    );
}

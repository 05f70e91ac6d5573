//! One task per network: canonical stream → ingest, with the one backoff
//! loop for every chain. Reorg handling is the stream's; this only applies
//! what it emits and reports health.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paywatch_core::{BlockSource, CanonicalStream, ChainEvent, Network, StreamError, WatchSet};
use tokio::sync::{watch, Notify};
use tracing::{error, info, warn, Instrument};

use crate::clock::Clock;
use crate::ingest::{Ingest, IngestError};
use crate::metrics::WatcherMetrics;
use crate::store::{ApplyOutcome, Store, StoreError};

mod backstop;
mod dormancy;
mod rescan;
mod stall;
mod unread;

pub use dormancy::Dormancy;

#[derive(Debug, Clone)]
pub struct WatcherConfig {
    pub network: Network,
    pub start_height: Option<u64>,
    pub max_reorg_depth: usize,
    pub poll_interval: Duration,
    pub events_per_transaction: usize,
    pub blocks_per_poll: usize,
    /// Where addresses may leave the live set; `None`: every issued
    /// address stays in it (and any left dormant before comes back).
    pub dormancy: Option<Dormancy>,
    /// How long after an intent ended the balance backstop still compares
    /// its address (Ethereum and Tron).
    pub backstop_after_end: Duration,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatcherError {
    #[error("{network} watcher halted: {source}")]
    Halted {
        network: Network,
        source: StreamError,
    },
}

/// Everything a watcher shares with the rest of the daemon.
#[derive(Debug, Clone)]
pub struct WatcherDeps {
    pub store: Store,
    pub ingest: Ingest,
    pub watch: Arc<WatchSet>,
    pub clock: Arc<dyn Clock>,
    /// Woken after every write, so reconcile runs promptly.
    pub progress: Arc<Notify>,
}

/// Issued addresses are re-read with an overlap, so an address committed
/// late by a concurrent transaction, or stamped by another instance whose
/// clock runs behind, is still picked up. Each poll looks back
/// [`RECENT_OVERLAP_MS`]; once a minute a sweep looks back this far. Five
/// minutes at every poll meant re-reading every address issued in the last
/// five minutes each poll: after a burst of creates, tens of thousands of
/// rows a second, which held a runtime thread for tens of milliseconds and
/// put that into the API's tail latency.
const WATCH_REFRESH_OVERLAP_MS: i64 = 5 * 60 * 1000;
/// What each poll looks back: far longer than an issuing transaction takes
/// to commit.
const RECENT_OVERLAP_MS: i64 = 5_000;
/// How often the long look back runs.
const SWEEP_EVERY_MS: i64 = 60_000;
/// How often the heights are sampled for the console's lag chart.
const SAMPLE_EVERY_MS: i64 = 60_000;
/// Addresses keyed into the watch set between two yields to the runtime.
const KEYS_PER_YIELD: usize = 512;
const MAX_BACKOFF: Duration = Duration::from_secs(60);

pub async fn run<S: BlockSource>(
    cfg: WatcherConfig,
    source: S,
    deps: WatcherDeps,
    shutdown: watch::Receiver<bool>,
) -> Result<(), WatcherError> {
    run_with_metrics(cfg, source, deps, Arc::default(), shutdown).await
}

/// [`run`], counting reorgs and source requests into `metrics`. A separate
/// entry rather than a [`WatcherDeps`] field: deps are built field by field
/// outside this crate too.
pub(crate) async fn run_with_metrics<S: BlockSource>(
    cfg: WatcherConfig,
    source: S,
    deps: WatcherDeps,
    metrics: Arc<WatcherMetrics>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), WatcherError> {
    let span = tracing::info_span!("watcher", network = %cfg.network);
    async move {
        let (network_of_cfg, now_of_deps) = (cfg.network, deps.clock.now_ms());
        let mut watcher = Watcher { cfg, deps, metrics, refreshed_at: None, swept_at: None, stall: stall::StallWatch::new(network_of_cfg, now_of_deps), backoff: Duration::ZERO, cursor_stale: false, sampled_at: None, sweep: dormancy::Sweep::default(), backstop: backstop::Backstop::default(), unread: unread::UnreadRecord::default() };
        let mut stream: Option<CanonicalStream<S>> = None;
        let new_head = source.head_signal();
        let mut source = Some(source);
        loop {
            if *shutdown.borrow() {
                info!("watcher stopped");
                return Ok(());
            }
            let stepped = watcher.step(&mut stream, &mut source).await;
            if stepped.is_ok() {
                watcher.metrics.record_step();
                watcher.sample_heights().await;
            }
            let wait = match stepped {
                Ok(Step::Busy) => Duration::ZERO,
                Ok(Step::Idle) => watcher.cfg.poll_interval,
                Err(Trouble::Transient(why)) => {
                    watcher.backoff = (watcher.backoff * 2).clamp(Duration::from_millis(250), MAX_BACKOFF);
                    warn!(error = %why, retry_in_ms = watcher.backoff.as_millis() as u64, "watcher degraded");
                    let _ = watcher.deps.store.record_watcher_trouble(watcher.cfg.network, "degraded", &why, watcher.now()).await;
                    watcher.backoff
                }
                Err(Trouble::Fenced(e)) => {
                    // Not degraded, and nothing to record: the chain's state
                    // is the new holder's to write.
                    warn!(error = %e, "a write was refused: another instance holds the watcher lease; stopping");
                    return Ok(());
                }
                Err(Trouble::Halt(e)) => {
                    let alert = match e {
                        StreamError::ReorgTooDeep { .. } => "deep_reorg",
                        _ => "source_fatal",
                    };
                    error!(alert, error = %e, "watcher halted; an operator must act");
                    let _ = watcher.deps.store.record_watcher_trouble(watcher.cfg.network, "halted", &e.to_string(), watcher.now()).await;
                    return Err(WatcherError::Halted { network: watcher.cfg.network, source: e });
                }
            };
            if !wait.is_zero() {
                let announced = async {
                    match &new_head {
                        Some(n) => n.notified().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.changed() => {}
                    // A new block cuts an idle wait short, never a backoff.
                    _ = announced, if watcher.backoff.is_zero() => {}
                }
            }
        }
    }
    .instrument(span)
    .await
}

enum Step {
    Busy,
    Idle,
}

/// One database transaction's share of a batch of chain events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub events: &'a [ChainEvent],
    /// A reorg, written whole: the batch's whole final height goes with it.
    pub progress: bool,
}

impl Chunk<'_> {
    /// The final height this transaction records: the node's (`reported`,
    /// already checked against the stream's blocks), but never past the
    /// highest block written so far, which the next transactions carry.
    pub fn final_height(&self, reported: u64) -> u64 {
        if self.progress {
            return reported;
        }
        let top = self
            .events
            .iter()
            .filter_map(|e| match e {
                ChainEvent::Connected { block, .. } => Some(block.height),
                _ => None,
            })
            .max();
        top.map_or(reported, |top| reported.min(top))
    }
}

/// How a batch is written: `per_transaction` events at a time, except that
/// a batch holding a reorg (disconnects, then the new branch's connects) is
/// written whole in one transaction, with the final height it implies, so
/// a reconcile running between two transactions never sees the old
/// branch's money gone and the new branch's not yet there, or the new
/// branch without its finality.
pub fn transactions_for(events: &[ChainEvent], per_transaction: usize) -> Vec<Chunk<'_>> {
    let reorg = events
        .iter()
        .any(|e| matches!(e, ChainEvent::Disconnected { .. }));
    if reorg {
        return vec![Chunk {
            events,
            progress: true,
        }];
    }
    events
        .chunks(per_transaction.max(1))
        .map(|events| Chunk {
            events,
            progress: false,
        })
        .collect()
}

enum Trouble {
    Transient(String),
    Halt(StreamError),
    /// A write was refused by the lease fence: another instance watches now.
    Fenced(StoreError),
}

impl From<StoreError> for Trouble {
    fn from(e: StoreError) -> Self {
        match e {
            e @ StoreError::LeaseLost { .. } => Trouble::Fenced(e),
            e => Trouble::Transient(format!("database: {e}")),
        }
    }
}

impl From<IngestError> for Trouble {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::Store(e) => Trouble::from(e),
            e => Trouble::Transient(format!("ingest: {e}")),
        }
    }
}

struct Watcher {
    cfg: WatcherConfig,
    deps: WatcherDeps,
    metrics: Arc<WatcherMetrics>,
    refreshed_at: Option<i64>,
    /// When the watch set last looked back [`WATCH_REFRESH_OVERLAP_MS`].
    swept_at: Option<i64>,
    stall: stall::StallWatch,
    backoff: Duration,
    /// The stream's cursor no longer matches the database's (a write failed
    /// after the stream moved on, or another worker moved it): reload it
    /// before anything else is emitted.
    cursor_stale: bool,
    /// When the heights were last sampled for the console's lag chart.
    sampled_at: Option<i64>,
    sweep: dormancy::Sweep,
    backstop: backstop::Backstop,
    unread: unread::UnreadRecord,
}

impl Watcher {
    fn now(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    /// Times one poll of the source. Only the source's own failures count as
    /// source errors: a too-deep or still-moving reorg is the chain's doing.
    fn observe_source(&self, started: Instant, error: Option<&StreamError>) {
        self.metrics.observe_source_request(started.elapsed());
        if matches!(error, Some(StreamError::Source(_))) {
            self.metrics.record_source_error();
        }
    }

    async fn step<S: BlockSource>(
        &mut self,
        stream: &mut Option<CanonicalStream<S>>,
        source: &mut Option<S>,
    ) -> Result<Step, Trouble> {
        let network = self.cfg.network;
        if stream.is_none() {
            let src = source
                .take()
                .expect("the source lives in the stream once built");
            match self.open_stream(src).await {
                Ok(s) => *stream = Some(s),
                Err((src, trouble)) => {
                    *source = Some(src);
                    return Err(trouble);
                }
            }
        }
        let s = stream.as_mut().expect("built above");
        if self.cursor_stale {
            let cursor = self
                .deps
                .store
                .load_cursor(network, self.cfg.max_reorg_depth + 1)
                .await?;
            s.reset_cursor(cursor);
            self.cursor_stale = false;
        }
        self.refresh_watch_set(s).await?;
        self.dormancy_step(s).await?;
        self.queue_missed_rescan(s).await?;
        self.resume_unread(s).await?;
        // Between two polls, so a rescan never holds the tip back by more
        // than one batch of blocks.
        let rescanning = self.rescan_step(s).await?;

        let started = Instant::now();
        let polled = s.next_batch(self.cfg.blocks_per_poll).await;
        self.observe_source(started, polled.as_ref().err());
        let events = match polled {
            Ok(events) => events,
            Err(e) if e.is_transient() => return Err(Trouble::Transient(e.to_string())),
            Err(e) => return Err(Trouble::Halt(e)),
        };
        self.record_unread(s).await?;
        let disconnects = events
            .iter()
            .filter(|e| matches!(e, ChainEvent::Disconnected { .. }))
            .count();
        if disconnects > 0 {
            self.metrics
                .record_reorg(u64::try_from(disconnects).unwrap_or(u64::MAX));
            warn!(
                alert = "reorg",
                depth = disconnects,
                "chain reorganised; orphaning disconnected blocks"
            );
        }
        // Read once, before anything is written: every transaction carries
        // the final height it makes, so a block's money never commits
        // without its finality and one reconcile pass decides it. A reorg
        // is written whole with the final height it implies.
        let final_height = match self.confirmed_final_height(s).await {
            Ok(height) => height,
            Err(trouble) => {
                // The stream already holds these events; nothing of them
                // was written: emit them again after a reload.
                self.cursor_stale |= !events.is_empty();
                return Err(trouble);
            }
        };
        let tip = s.last_tip().map_or(0, |t| t.height);
        for chunk in transactions_for(&events, self.cfg.events_per_transaction) {
            let progress = Some((tip, chunk.final_height(final_height)));
            let applied = self
                .deps
                .ingest
                .apply_with_progress(network, chunk.events, progress)
                .await;
            if applied.is_err() {
                // Nothing of this chunk was written; emit it again after a reload.
                self.cursor_stale = true;
            }
            if let ApplyOutcome::CursorMismatch { stored } = applied? {
                warn!(stored = ?stored, "the stored cursor moved under this watcher; reloading it");
                self.cursor_stale = true;
                return Ok(Step::Busy);
            }
            self.deps.progress.notify_one();
        }
        let now = self.now();
        let stalled = self
            .stall
            .observe(s.cursor_tip().map_or(0, |c| c.height), now);
        self.deps
            .store
            .record_chain_progress_in_state(
                network,
                tip,
                final_height,
                now,
                stalled.as_deref().map(|why| ("stalled", why)),
            )
            .await?;
        self.deps.progress.notify_one();
        if self.backoff > Duration::ZERO {
            info!("watcher recovered");
            self.backoff = Duration::ZERO;
        }
        if let Some(unread) = s.source().unread_blocks() {
            self.metrics.set_unread_blocks(unread);
        }
        self.metrics
            .set_push_fallback(s.source().push_fallback().is_some());
        let cursor = s.cursor_tip().map_or(0, |c| c.height);
        if events.is_empty() {
            self.follow_mempool(s).await?;
            self.backstop_step(s, final_height, rescanning).await;
            tracing::debug!(
                tip,
                cursor,
                lag = tip.saturating_sub(cursor),
                final_height,
                "caught up"
            );
            Ok(if rescanning { Step::Busy } else { Step::Idle })
        } else {
            info!(
                tip,
                cursor,
                lag = tip.saturating_sub(cursor),
                final_height,
                events = events.len(),
                "applied"
            );
            Ok(Step::Busy)
        }
    }

    /// The node's final height as far as it covers blocks this stream
    /// applied; zero when nothing can be confirmed this round (the store
    /// keeps the highest final height it was given, so zero changes nothing).
    async fn confirmed_final_height<S: BlockSource>(
        &self,
        s: &CanonicalStream<S>,
    ) -> Result<u64, Trouble> {
        let started = Instant::now();
        let confirmed = s.confirmed_final_height().await;
        self.observe_source(started, confirmed.as_ref().err());
        match confirmed {
            Ok(height) => Ok(height.unwrap_or(0)),
            Err(e) if e.is_transient() => Err(Trouble::Transient(e.to_string())),
            // A node that can never say what is final (a misconfigured
            // endpoint) halts the watcher, naming why: no payment could settle.
            Err(e) => Err(Trouble::Halt(e)),
        }
    }

    /// Records what waits unmined for watched addresses, once caught up. A
    /// snapshot taken at another best block than the cursor's is skipped: a
    /// block arriving mid-snapshot would make mined money look dropped.
    async fn follow_mempool<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
    ) -> Result<(), Trouble> {
        // Best effort: blocks are what credits rest on, so a mempool that
        // cannot be read this round neither degrades nor slows the watcher.
        let snapshot = match stream.source().unconfirmed().await {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return Ok(()),
            Err(e) => {
                self.metrics.record_source_error();
                warn!(error = %e, "mempool unreadable this round; blocks go on");
                return Ok(());
            }
        };
        if stream.cursor_tip().map(|c| c.hash.as_str()) != Some(snapshot.tip.as_str()) {
            tracing::debug!(tip = %snapshot.tip, "mempool snapshot from another best block; next poll");
            return Ok(());
        }
        let touched = self
            .deps
            .ingest
            .apply_unconfirmed(self.cfg.network, &snapshot.tip, &snapshot.transfers)
            .await?;
        if touched > 0 {
            info!(
                unconfirmed = snapshot.transfers.len(),
                addresses = touched,
                "mempool changed"
            );
            self.deps.progress.notify_one();
        }
        Ok(())
    }

    async fn open_stream<S: BlockSource>(
        &mut self,
        source: S,
    ) -> Result<CanonicalStream<S>, (S, Trouble)> {
        let network = self.cfg.network;
        let now = self.now();
        if let Err(e) = self.deps.store.ensure_chain_state(network, now).await {
            return Err((source, e.into()));
        }
        let cursor = match self
            .deps
            .store
            .load_cursor(network, self.cfg.max_reorg_depth + 1)
            .await
        {
            Ok(c) => c,
            Err(e) => return Err((source, e.into())),
        };
        // Where this database's history begins: stored with the first block
        // ever connected, so a restart after a reorg that disconnected every
        // block still resumes there, not at the node's tip.
        let stored_start = match self.deps.store.chain_status(network).await {
            Ok(status) => status.and_then(|s| s.start_height),
            Err(e) => return Err((source, e.into())),
        };
        // Past an accepted gap the chain starts over at its end.
        let resume = match self.deps.store.resume_height(network).await {
            Ok(h) => h,
            Err(e) => return Err((source, e.into())),
        };
        let start = match (resume, stored_start, cursor.first(), self.cfg.start_height) {
            (Some(h), ..) => h,
            (None, Some(h), _, _) => h,
            (None, None, Some(first), _) => first.height,
            (None, None, None, Some(h)) => h,
            (None, None, None, None) => match source.tip().await {
                Ok(t) => t.height,
                Err(e) => {
                    self.metrics.record_source_error();
                    return Err((source, Trouble::Transient(e.to_string())));
                }
            },
        };
        info!(start_height = start, cursor = ?cursor.last().map(|c| c.height), "watcher started");
        Ok(CanonicalStream::new(
            source,
            cursor,
            start,
            self.cfg.max_reorg_depth,
        ))
    }

    /// Once a minute, the stored heights as a sample for the console's lag
    /// chart. A failed write only leaves a gap in the chart.
    async fn sample_heights(&mut self) {
        let now = self.now();
        if self.sampled_at.is_some_and(|at| now - at < SAMPLE_EVERY_MS) {
            return;
        }
        match self
            .deps
            .store
            .record_chain_sample(self.cfg.network, now)
            .await
        {
            Ok(()) => self.sampled_at = Some(now),
            Err(e) => warn!(error = %e, "could not sample the chain's heights"),
        }
    }

    /// Reads addresses issued since the last look (by any instance) into the
    /// watch set. Runs before every poll, so the set is never older than one
    /// poll interval. An address first learned here was issued by another
    /// process, and a block fetched before this refresh may have paid it
    /// unseen: the blocks connected since it was issued are read again.
    async fn refresh_watch_set<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
    ) -> Result<(), Trouble> {
        let now = self.now();
        let first_look = self.refreshed_at.is_none();
        let (since, sweep) = match (self.refreshed_at, self.swept_at) {
            (Some(_), Some(swept)) if now - swept >= SWEEP_EVERY_MS => {
                (swept - WATCH_REFRESH_OVERLAP_MS, true)
            }
            (Some(refreshed), Some(_)) => (refreshed - RECENT_OVERLAP_MS, false),
            _ => (i64::MIN, true),
        };
        let mut issued = self
            .deps
            .store
            .live_addresses(self.cfg.network, since)
            .await?;
        // The twins of the other network's addresses, in this network's
        // spelling: money sent there on the wrong network is recorded too.
        if let Some(other) = crate::twin::twin_network(self.cfg.network) {
            let theirs = self.deps.store.live_addresses(other, since).await?;
            issued.extend(theirs.into_iter().filter_map(|(address, at)| {
                crate::twin::twin(other, &address).map(|(_, mine)| (mine, at))
            }));
        }
        // Where refunds go out on this network: the refund's transaction is
        // recorded like a payment, and checked against what is owed.
        issued.extend(
            self.deps
                .store
                .refund_destinations(self.cfg.network, since, now)
                .await?,
        );
        let mut learned: Vec<(String, i64)> = Vec::new();
        for chunk in issued.chunks(KEYS_PER_YIELD) {
            learned.extend(
                chunk
                    .iter()
                    .filter(|(address, _)| self.deps.watch.insert(address))
                    .cloned(),
            );
            // Keying is CPU work (a script or key hash per address): a long
            // look back yields between chunks rather than holding a runtime
            // thread that API requests are waiting on.
            tokio::task::yield_now().await;
        }
        if !first_look && !learned.is_empty() {
            self.rescan_for(stream, &learned).await?;
        }
        self.refreshed_at = Some(now);
        if sweep {
            self.swept_at = Some(now);
        }
        Ok(())
    }
}

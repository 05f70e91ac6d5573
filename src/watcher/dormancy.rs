//! A bounded watch set. An address whose intent ended (paid, expired,
//! resolved) and that saw no money for `dormant_after` is dormant: it
//! leaves the live set, and a sweep looks each dormant address up once per
//! `sweep_every`, spread evenly over it. Money found at one puts it back in
//! the live set, with a rescan of the blocks read without it, so the late
//! payment is recorded like any other and goes to review.
//!
//! Only a source that answers per address (Electrum) can look an address
//! up; one that reads whole blocks must hold every address it is to see,
//! so on such a source nothing is dormant, and addresses a previous source
//! left dormant are put back, with a rescan, before its first block.

use std::time::Duration;

use paywatch_core::{Activity, BlockSource, CanonicalStream, Probe};
use tracing::{error, info, warn};

use super::{Trouble, Watcher};
use crate::store::RescanOutcome;

/// Who asked, for the rescans the sweep queues.
const SWEEP_BY: &str =
    "paywatch (dormant addresses: money found, or a source that cannot look them up)";

/// The most addresses one demotion marks; the next step marks more.
const DEMOTE_LIMIT: i64 = 10_000;
/// How often ended addresses are looked for, at most.
const DEMOTE_EVERY_MS: i64 = 3_600_000;

/// When addresses go dormant and how long a sweep round takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dormancy {
    pub dormant_after: Duration,
    pub sweep_every: Duration,
    /// Addresses looked up per request.
    pub page: usize,
}

/// The sweep's progress, kept by the watcher between steps.
#[derive(Debug, Default)]
pub(super) struct Sweep {
    /// Nothing dormant is left for a source that cannot look up.
    settled: bool,
    demoted_at: Option<i64>,
    /// More may be ready to mark: the last demotion hit its limit.
    demote_more: bool,
    round_started_at: Option<i64>,
    round: Option<Round>,
}

#[derive(Debug)]
struct Round {
    /// The last id looked up.
    after: i64,
    next_page_at: i64,
    page_gap_ms: i64,
}

impl Watcher {
    pub(super) async fn dormancy_step<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
    ) -> Result<(), Trouble> {
        let dormancy = match self.cfg.dormancy {
            Some(d) if stream.source().looks_up_addresses() => d,
            _ => return self.wake_all(stream).await,
        };
        let now = self.now();
        let quiet_ms = millis(dormancy.dormant_after);
        let sweep_ms = millis(dormancy.sweep_every).max(1);
        let demote_due = self.sweep.demote_more
            || self
                .sweep
                .demoted_at
                .is_none_or(|at| now - at >= sweep_ms.min(DEMOTE_EVERY_MS));
        if demote_due {
            self.demote(stream, now - quiet_ms, now).await?;
        }
        if self.sweep.round.is_none() {
            if self
                .sweep
                .round_started_at
                .is_some_and(|at| now - at < sweep_ms)
            {
                return Ok(());
            }
            self.start_round(dormancy, sweep_ms, now).await?;
        }
        self.sweep_page(stream, dormancy, now).await
    }

    /// Marks the addresses that went quiet before `quiet_since` dormant and
    /// takes them out of the live set.
    async fn demote<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
        quiet_since: i64,
        now: i64,
    ) -> Result<(), Trouble> {
        // A reorg may replace any block above this: the sweep looks again
        // at what lies above it, so no such replacement goes unseen.
        let depth = u64::try_from(self.cfg.max_reorg_depth).unwrap_or(u64::MAX);
        let watched_to = stream
            .cursor_tip()
            .map_or(0, |c| c.height.saturating_sub(depth.saturating_add(1)));
        let marked = self
            .deps
            .store
            .mark_dormant(self.cfg.network, quiet_since, watched_to, now, DEMOTE_LIMIT)
            .await?;
        self.sweep.demoted_at = Some(now);
        self.sweep.demote_more = i64::try_from(marked.len()).unwrap_or(i64::MAX) >= DEMOTE_LIMIT;
        if !marked.is_empty() {
            let removed = self.deps.watch.remove(marked.iter().map(String::as_str));
            info!(
                dormant = marked.len(),
                removed,
                watched_to,
                live = self.deps.watch.len(),
                "addresses whose intents ended went dormant; the sweep looks them up from now on"
            );
        }
        Ok(())
    }

    async fn start_round(
        &mut self,
        dormancy: Dormancy,
        sweep_ms: i64,
        now: i64,
    ) -> Result<(), Trouble> {
        let count = self.deps.store.dormant_count(self.cfg.network).await?;
        self.metrics
            .set_dormant_addresses(u64::try_from(count).unwrap_or(0));
        let page = i64::try_from(dormancy.page.max(1)).unwrap_or(i64::MAX);
        let pages = (count + page - 1) / page;
        self.sweep.round_started_at = Some(now);
        self.sweep.round = (count > 0).then(|| Round {
            after: 0,
            next_page_at: now,
            page_gap_ms: sweep_ms / pages.max(1),
        });
        if count > 0 {
            info!(
                dormant = count,
                pages,
                every_secs = dormancy.sweep_every.as_secs(),
                "sweep of dormant addresses started"
            );
        }
        Ok(())
    }

    /// Looks the next page of dormant addresses up, when it is due.
    async fn sweep_page<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
        dormancy: Dormancy,
        now: i64,
    ) -> Result<(), Trouble> {
        let Some(round) = self.sweep.round.as_ref() else {
            return Ok(());
        };
        if now < round.next_page_at {
            return Ok(());
        }
        let network = self.cfg.network;
        let limit = i64::try_from(dormancy.page.max(1)).unwrap_or(i64::MAX);
        let page = self
            .deps
            .store
            .dormant_page(network, round.after, limit)
            .await?;
        let probes: Vec<Probe> = page.iter().map(|(_, p)| p.clone()).collect();
        let found = match stream.source().activity_after(&probes).await {
            Ok(found) => found,
            Err(e) => {
                // The sweep never holds the chain back: blocks are read on,
                // and this page is asked again after the next gap.
                self.metrics.record_source_error();
                warn!(error = %e, "looking dormant addresses up failed; the page is asked again");
                if let Some(round) = self.sweep.round.as_mut() {
                    round.next_page_at = now + round.page_gap_ms.max(1_000);
                }
                return Ok(());
            }
        };
        let active: Vec<(String, Activity)> = probes
            .into_iter()
            .zip(found)
            .filter(|(_, a)| *a != Activity::Quiet)
            .map(|(p, a)| (p.address, a))
            .collect();
        // One rescan, from the lowest block any of them was paid in, covers
        // them all; unconfirmed money needs none.
        let rescan_from = active
            .iter()
            .filter_map(|(_, a)| match a {
                Activity::InBlock(h) => Some(*h),
                _ => None,
            })
            .min();
        // Otherwise they stay dormant, and the next round finds them again.
        if !active.is_empty() && self.rescan_queued(stream, rescan_from).await? {
            let woken: Vec<String> = active.into_iter().map(|(a, _)| a).collect();
            // Watched from the next block read; the rescan queued above
            // reads the ones before with them watched.
            self.deps.watch.extend(woken.iter().map(String::as_str));
            self.deps.store.wake_addresses(network, &woken, now).await?;
            self.metrics
                .record_dormant_woken(u64::try_from(woken.len()).unwrap_or(0));
            warn!(addresses = ?woken, "the sweep found money at dormant addresses; they are watched again");
        }
        let round = self.sweep.round.as_mut().expect("checked above");
        match page.last() {
            Some((last, _)) if page.len() >= dormancy.page.max(1) => {
                round.after = *last;
                round.next_page_at = now + round.page_gap_ms;
            }
            _ => self.sweep.round = None,
        }
        Ok(())
    }

    /// Whether the blocks from `from` up are sure to be read again with a
    /// woken address watched: a rescan from there is queued or pending, or
    /// nothing needs one (the money is unconfirmed, or above every block
    /// read yet).
    async fn rescan_queued<S: BlockSource>(
        &self,
        stream: &CanonicalStream<S>,
        from: Option<u64>,
    ) -> Result<bool, Trouble> {
        let Some(from) = from else {
            return Ok(true);
        };
        if stream.cursor_tip().is_none_or(|c| from > c.height) {
            return Ok(true);
        }
        // Below where this network's watching started nothing was read, with
        // or without the address: the rescan starts there at the lowest.
        let started = self
            .deps
            .store
            .chain_status(self.cfg.network)
            .await?
            .and_then(|s| s.start_height)
            .unwrap_or(0);
        let from = from.max(started);
        let outcome = self
            .deps
            .store
            .request_rescan(self.cfg.network, from, SWEEP_BY, self.now())
            .await?;
        match &outcome {
            RescanOutcome::Queued(r) => {
                info!(
                    rescan = r.id,
                    from_height = from,
                    "rescan queued for a dormant address"
                );
            }
            RescanOutcome::Refused(why) => {
                error!(alert = "dormant_payment_unread", from_height = from, error = %why,
                    "money at a dormant address lies in blocks that cannot be read again; \
                     it is watched again from now on, and the earlier payment needs an operator");
            }
            RescanOutcome::Pending(_) => {}
        }
        Ok(super::rescan::settles(&outcome, from))
    }

    /// On a source that cannot look addresses up, every dormant address
    /// comes back into the live set, once, and the blocks read without
    /// them are read again.
    async fn wake_all<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
    ) -> Result<(), Trouble> {
        if self.sweep.settled {
            return Ok(());
        }
        let network = self.cfg.network;
        let Some(watched_to) = self.deps.store.dormant_floor(network).await? else {
            self.sweep.settled = true;
            return Ok(());
        };
        let from = watched_to + 1;
        if !self.rescan_queued(stream, Some(from)).await? {
            // Another rescan is under way: once it ends, this one is queued.
            return Ok(());
        }
        let woken = self
            .deps
            .store
            .wake_all_dormant(network, self.now())
            .await?;
        self.deps.watch.extend(woken.iter().map(String::as_str));
        warn!(
            addresses = woken.len(),
            from_height = from,
            "dormant addresses are watched again, and the blocks read without them read again: \
             this source cannot look them up"
        );
        self.sweep.settled = true;
        Ok(())
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

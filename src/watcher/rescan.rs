//! Reading connected blocks again: for addresses the watcher learned of
//! late, and for operators' rescan requests. Only a block the node still
//! has at the hash we hold is read again, through ingest's backfill, which
//! leaves what was recorded alone; any other block is a reorg, and that is
//! the canonical stream's to follow.

use std::collections::HashSet;

use paywatch_core::{BlockRef, BlockSource, CanonicalStream, Transfer};
use tracing::{info, warn};

use super::{Trouble, Watcher, WATCH_REFRESH_OVERLAP_MS};
use crate::store::{RescanOutcome, RescanProgress};

/// Who asked, for a rescan the source asked for.
const MISSED_BY: &str = "paywatch (the source learned late of a transfer in a block already read)";

/// The most blocks one rescan for late-learned addresses reads.
const RESCAN_LIMIT: i64 = 10_000;

/// What re-reading stored blocks did.
#[derive(Debug, Default)]
struct Tally {
    /// Blocks read: the first ones of those asked for.
    blocks: usize,
    /// Transfers the node showed in them.
    seen: usize,
    /// Of those, the ones not recorded before.
    added: u64,
}

/// Whether asking for a rescan from `from` settled the matter: one is
/// queued, or a pending one will still read `from` with the watch set as it
/// is now, or it was refused (blocks that cannot be read again; the caller
/// says so). A pending rescan that does not cover it: ask again later.
pub(super) fn settles(outcome: &RescanOutcome, from: u64) -> bool {
    match outcome {
        RescanOutcome::Queued(_) | RescanOutcome::Refused(_) => true,
        RescanOutcome::Pending(r) => match (r.started_at_ms, r.next_height, r.to_height) {
            (None, _, _) => r.from_height <= from,
            (Some(_), next, Some(to)) => next.unwrap_or(r.from_height) <= from && from <= to,
            (Some(_), _, None) => false,
        },
    }
}

impl Watcher {
    /// Re-reads `blocks` (active, ascending, as stored) from the node and
    /// records the transfers `keep` accepts. Stops at the first block the
    /// node or the stream's cursor holds at another hash, and says why.
    async fn reread<S: BlockSource>(
        &self,
        stream: &CanonicalStream<S>,
        blocks: &[BlockRef],
        keep: impl Fn(&Transfer) -> bool,
        tally: &mut Tally,
    ) -> Result<Option<String>, Trouble> {
        let network = self.cfg.network;
        for ours in blocks {
            if let Some(held) = stream.remembered(ours.height) {
                if held.hash != ours.hash {
                    return Ok(Some(format!(
                        "block {} is {} in the database but {} in the watcher's cursor: \
                         another worker moved the chain; nothing from there on was read again",
                        ours.height, ours.hash, held.hash
                    )));
                }
            }
            let theirs = stream.source().block(ours.height).await.map_err(|e| {
                self.metrics.record_source_error();
                Trouble::Transient(e.to_string())
            })?;
            let Some(theirs) = theirs else {
                return Ok(Some(format!(
                    "the node has no block at height {} (pruned, or behind this watcher); \
                     nothing from there on was read again",
                    ours.height
                )));
            };
            if theirs.block.hash != ours.hash {
                return Ok(Some(format!(
                    "block {} is {} here but {} on the node: the chain reorganised, and the \
                     watcher follows that as any reorg; nothing from there on was read again",
                    ours.height, ours.hash, theirs.block.hash
                )));
            }
            let transfers: Vec<Transfer> =
                theirs.transfers.into_iter().filter(|t| keep(t)).collect();
            let added = self
                .deps
                .ingest
                .backfill(network, ours, theirs.timestamp, &transfers)
                .await?;
            tally.blocks += 1;
            tally.seen += transfers.len();
            tally.added += added;
            if !transfers.is_empty() {
                self.deps.progress.notify_one();
            }
        }
        Ok(None)
    }

    /// An address first learned after some blocks were read: the blocks
    /// connected since it was issued are read again, for it alone.
    pub(super) async fn rescan_for<S: BlockSource>(
        &self,
        stream: &CanonicalStream<S>,
        learned: &[(String, i64)],
    ) -> Result<(), Trouble> {
        let network = self.cfg.network;
        let since = learned.iter().map(|(_, at)| *at).min().unwrap_or(0) - WATCH_REFRESH_OVERLAP_MS;
        let addresses: HashSet<String> = learned
            .iter()
            .map(|(a, _)| network.normalize_address(a).into_owned())
            .collect();
        let blocks = self
            .deps
            .store
            .blocks_connected_since(network, since, RESCAN_LIMIT)
            .await?;
        let mut tally = Tally::default();
        let stopped = self
            .reread(
                stream,
                &blocks,
                |t| addresses.contains(network.normalize_address(&t.to).as_ref()),
                &mut tally,
            )
            .await?;
        info!(
            addresses = addresses.len(),
            blocks = tally.blocks,
            found = tally.seen,
            stopped = stopped.as_deref(),
            "rescanned for addresses issued elsewhere"
        );
        Ok(())
    }

    /// A block the source handed out, and stored since, that it now knows
    /// lacked a transfer (an Electrum server's news came after it was read):
    /// a rescan from there is queued as an operator's would be, so it
    /// survives a restart. While another rescan that does not cover it is
    /// pending, the source keeps the height and this asks again next poll.
    pub(super) async fn queue_missed_rescan<S: BlockSource>(
        &self,
        stream: &CanonicalStream<S>,
    ) -> Result<(), Trouble> {
        let source = stream.source();
        let Some(from) = source.missed_from() else {
            return Ok(());
        };
        let network = self.cfg.network;
        let outcome = self
            .deps
            .store
            .request_rescan(network, from, MISSED_BY, self.now())
            .await?;
        match &outcome {
            RescanOutcome::Queued(r) => warn!(
                rescan = r.id,
                from_height = from,
                "the source learned of a transfer in a block already read; it is read again"
            ),
            RescanOutcome::Refused(why) => warn!(from_height = from, error = %why,
                "the source learned of a transfer in a block that cannot be read again"),
            RescanOutcome::Pending(_) => {}
        }
        if settles(&outcome, from) {
            source.missed_queued(from);
        }
        Ok(())
    }

    /// Carries the network's pending rescan request on by at most
    /// `blocks_per_poll` blocks, so the tip is followed meanwhile. True
    /// while it is unfinished: the watcher comes straight back for more.
    pub(super) async fn rescan_step<S: BlockSource>(
        &self,
        stream: &CanonicalStream<S>,
    ) -> Result<bool, Trouble> {
        let network = self.cfg.network;
        let store = &self.deps.store;
        let Some(mut request) = store.pending_rescan(network).await? else {
            return Ok(false);
        };
        if request.started_at_ms.is_none() {
            // Blocks above the cursor are read from now on with the watch set
            // as it is, so the rescan ends here.
            let to = stream.cursor_tip().map_or(0, |c| c.height);
            request = store.start_rescan(request.id, to, self.now()).await?;
            info!(
                rescan = request.id,
                from_height = request.from_height,
                to_height = to,
                requested_by = %request.requested_by,
                "rescan started"
            );
        }
        let next = request.next_height.unwrap_or(request.from_height);
        let to = request.to_height.unwrap_or(0);
        let limit = self.cfg.blocks_per_poll.max(1);
        let blocks = if next > to {
            Vec::new()
        } else {
            store
                .blocks_between(network, next, to, i64::try_from(limit).unwrap_or(i64::MAX))
                .await?
        };
        let mut tally = Tally::default();
        let read = self.reread(stream, &blocks, |_| true, &mut tally).await;
        if let Some(last) = tally.blocks.checked_sub(1).map(|i| &blocks[i]) {
            // Recorded even when a later block failed: a retry starts after it.
            store
                .advance_rescan(
                    request.id,
                    RescanProgress {
                        next_height: last.height + 1,
                        blocks_read: tally.blocks as u64,
                        transfers_seen: tally.seen as u64,
                        transfers_added: tally.added,
                    },
                )
                .await?;
        }
        let stopped = read?;
        let blocks_read = request.blocks_read + tally.blocks as u64;
        let transfers_seen = request.transfers_seen + tally.seen as u64;
        let transfers_added = request.transfers_added + tally.added;
        if let Some(why) = stopped {
            store
                .finish_rescan(request.id, Some(&why), self.now())
                .await?;
            warn!(
                rescan = request.id,
                error = %why,
                blocks_read,
                transfers_seen,
                transfers_added,
                "rescan stopped short"
            );
            return Ok(false);
        }
        let done = blocks.len() < limit || blocks.last().is_some_and(|b| b.height >= to);
        if !done {
            return Ok(true);
        }
        store.finish_rescan(request.id, None, self.now()).await?;
        info!(
            rescan = request.id,
            blocks_read, transfers_seen, transfers_added, "rescan finished"
        );
        Ok(false)
    }
}

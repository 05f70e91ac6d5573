//! Blocks a source handed out without every transfer in them (an Ethereum
//! block its node could not trace) are read again by the source, which
//! keeps that wait in memory. The watcher keeps its lowest height in the
//! store, written before the block is, and a watcher starting (after a
//! crash, a restart, or on another instance that took the lease) queues a
//! rescan from there: ETH sent by contracts is never forgotten.

use paywatch_core::{BlockSource, CanonicalStream};
use tracing::{info, warn};

use super::rescan::settles;
use super::{Trouble, Watcher};
use crate::store::RescanOutcome;

/// Who asked, for the rescan a starting watcher queues.
const UNREAD_BY: &str =
    "paywatch (a block read without every transfer in it was still read again when the watcher last stopped)";

/// What the store holds of the source's wait, as this watcher knows it.
#[derive(Debug, Default)]
pub(super) struct UnreadRecord {
    loaded: bool,
    /// The height the store holds.
    recorded: Option<u64>,
    /// Read from the store at start, kept until a rescan covering it is queued.
    restart_from: Option<u64>,
}

impl Watcher {
    /// On the first step, a height the store kept from the last watcher is
    /// read again by a rescan; until one covering it is queued, it stays.
    pub(super) async fn resume_unread<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
    ) -> Result<(), Trouble> {
        let network = self.cfg.network;
        if !self.unread.loaded {
            let stored = self.deps.store.unread_from(network).await?;
            let cursor = stream.cursor_tip().map(|c| c.height);
            self.unread = UnreadRecord {
                loaded: true,
                recorded: stored,
                // A height above the cursor was never stored: it is read anew.
                restart_from: stored.filter(|h| cursor.is_some_and(|c| *h <= c)),
            };
        }
        let Some(from) = self.unread.restart_from else {
            return Ok(());
        };
        let outcome = self
            .deps
            .store
            .request_rescan(network, from, UNREAD_BY, self.now())
            .await?;
        match &outcome {
            RescanOutcome::Queued(r) => info!(
                rescan = r.id,
                from_height = from,
                "a block was still read again for its untraced transfers when the watcher \
                 last stopped; it is read again from there"
            ),
            RescanOutcome::Refused(why) => warn!(from_height = from, error = %why,
                "a block still read again when the watcher last stopped cannot be read again"),
            RescanOutcome::Pending(_) => {}
        }
        if settles(&outcome, from) {
            self.unread.restart_from = None;
        }
        Ok(())
    }

    /// Writes the lowest height still read again, before the blocks just
    /// polled are: a block the source could not read whole is recorded as
    /// such no later than itself.
    pub(super) async fn record_unread<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
    ) -> Result<(), Trouble> {
        let source = stream
            .source()
            .unread_blocks()
            .and_then(|u| u.lowest)
            .into_iter();
        let want = source.chain(self.unread.restart_from).min();
        if self.unread.loaded && want != self.unread.recorded {
            self.deps
                .store
                .record_unread_from(self.cfg.network, want)
                .await?;
            self.unread.recorded = want;
        }
        Ok(())
    }
}

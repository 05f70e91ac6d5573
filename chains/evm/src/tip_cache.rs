//! What an idle poll need not ask again. Mainnet makes a block every 12 s
//! and the watcher polls every second, so eleven polls in twelve find the
//! chain where it was: they ask `eth_blockNumber`, and the finalized height
//! and the block checked for finality come from here while that number has
//! not moved. The tip's header is read again every [`TIP_FRESH`] even so:
//! a block replaced at the same height (a one-block reorg at the tip, which
//! no block number shows) is seen within that, without waiting for the
//! next block.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use paywatch_core::BlockRef;

/// How long a tip header read stands for a tip whose number has not moved.
pub(crate) const TIP_FRESH: Duration = Duration::from_secs(3);

#[derive(Debug, Default)]
pub(crate) struct TipCache {
    inner: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// The tip as last read, and when.
    tip: Option<(BlockRef, Instant)>,
    /// The finalized height, and the tip height it was read at.
    finalized: Option<(u64, u64)>,
    /// A block at or below the finalized height, as the node had it: a
    /// finalized block never changes.
    final_block: Option<BlockRef>,
}

impl TipCache {
    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tip as last read, when it is at `height` and was read less than
    /// [`TIP_FRESH`] ago.
    pub(crate) fn tip_at(&self, height: u64) -> Option<BlockRef> {
        self.seen()
            .tip
            .clone()
            .filter(|(t, at)| t.height == height && at.elapsed() < TIP_FRESH)
            .map(|(t, _)| t)
    }

    pub(crate) fn set_tip(&self, tip: &BlockRef) {
        self.seen().tip = Some((tip.clone(), Instant::now()));
    }

    /// The finalized height as read while the tip was at `tip_height`.
    pub(crate) fn finalized_at(&self, tip_height: u64) -> Option<u64> {
        self.seen()
            .finalized
            .filter(|(at, _)| *at == tip_height)
            .map(|(_, f)| f)
    }

    pub(crate) fn set_finalized(&self, tip_height: u64, finalized: u64) {
        self.seen().finalized = Some((tip_height, finalized));
    }

    /// The block at `height` as read before, when it is final.
    pub(crate) fn final_block(&self, height: u64) -> Option<BlockRef> {
        let seen = self.seen();
        let finalized = seen.finalized.map(|(_, f)| f)?;
        seen.final_block
            .clone()
            .filter(|b| b.height == height && height <= finalized)
    }

    /// Keeps `block` when it is at or below the finalized height.
    pub(crate) fn set_final_block(&self, block: &BlockRef) {
        let mut seen = self.seen();
        if seen.finalized.is_some_and(|(_, f)| block.height <= f) {
            seen.final_block = Some(block.clone());
        }
    }
}

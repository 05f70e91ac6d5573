use async_trait::async_trait;

use crate::{BlockRef, Network, SourceBlock, Transfer};

/// A chain as one watcher sees it. Chain crates implement this and nothing
/// about reorgs: the canonical stream is the only place that decides.
#[async_trait]
pub trait BlockSource: Send + Sync {
    fn network(&self) -> Network;

    /// The node's current best block.
    async fn tip(&self) -> Result<BlockRef, SourceError>;

    /// The highest height that is final under the network's policy
    /// (N confirmations, Ethereum `finalized`, Tron solidified, Solana `finalized`).
    async fn final_height(&self) -> Result<u64, SourceError>;

    /// The block at `height` on the node's current best chain, with its
    /// transfers to watched addresses; `None` when the chain is shorter.
    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError>;

    /// Only the place of the block at `height` on the node's best chain.
    /// Sources with a cheap header call override this.
    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, SourceError> {
        Ok(self.block(height).await?.map(|b| b.block))
    }

    /// Transfers to watched addresses that the node holds unconfirmed (a
    /// mempool). `None` for sources without one; every call gives the whole
    /// current set, so what is missing from it has left unmined.
    async fn unconfirmed(&self) -> Result<Option<Unconfirmed>, SourceError> {
        Ok(None)
    }

    /// Notified when the node announces a new block (a websocket `newHeads`),
    /// so an idle watcher looks at once instead of at its next poll. Only a
    /// wake-up: what the block holds is always fetched the usual way.
    fn head_signal(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        None
    }

    /// The lowest height of a block already handed out that the source has
    /// since learned lacked a transfer to a watched address, with the same
    /// hash: not a reorg, news that came late (an Electrum server tells of
    /// an address's new history apart from the block). The watcher queues a
    /// rescan from there, then calls [`BlockSource::missed_queued`]. A
    /// source that reads whole blocks never misses one.
    fn missed_from(&self) -> Option<u64> {
        None
    }

    /// The rescan from `from` is queued: forget the heights it covers.
    fn missed_queued(&self, _from: u64) {}

    /// Whether [`BlockSource::activity_after`] works: the backend answers
    /// per address (an Electrum server), so an address can leave the watch
    /// set and still be looked up now and then. A source that reads whole
    /// blocks cannot: an address it does not hold is an address it misses.
    fn looks_up_addresses(&self) -> bool {
        false
    }

    /// For each of `probes`, whether its address has a transaction the
    /// watcher has not read: in a block above `watched_to`, or unconfirmed.
    /// One answer per probe, in order.
    async fn activity_after(&self, _probes: &[Probe]) -> Result<Vec<Activity>, SourceError> {
        Err(SourceError::Fatal(format!(
            "the {} source cannot look addresses up",
            self.network()
        )))
    }
}

/// An address out of the watch set, read in blocks up to `watched_to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub address: String,
    pub watched_to: u64,
}

/// What a look-up found at a [`Probe`]'s address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Nothing since `watched_to`.
    Quiet,
    /// A transaction in a block above `watched_to`: the lowest such height.
    InBlock(u64),
    /// Only unconfirmed transactions since.
    Unconfirmed,
}

/// A mempool snapshot, taken while the node's best block was `tip`: it is
/// only complete beside a cursor at that same block, since a block arriving
/// mid-snapshot moves transactions out of the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unconfirmed {
    pub tip: String,
    pub transfers: Vec<Transfer>,
}

/// Whether retrying can help tells the one backoff loop what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The node is unreachable, slow, rate-limited or answered something that
    /// may be right on the next try. Nothing from the answer is used.
    #[error("transient source error: {0}")]
    Transient(String),
    /// Misconfiguration or an answer that will never become valid.
    #[error("fatal source error: {0}")]
    Fatal(String),
}

impl SourceError {
    pub fn is_transient(&self) -> bool {
        matches!(self, SourceError::Transient(_))
    }
}

#[async_trait]
impl<T: BlockSource + ?Sized> BlockSource for std::sync::Arc<T> {
    fn network(&self) -> Network {
        (**self).network()
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        (**self).tip().await
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        (**self).final_height().await
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        (**self).block(height).await
    }

    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, SourceError> {
        (**self).block_ref(height).await
    }

    async fn unconfirmed(&self) -> Result<Option<Unconfirmed>, SourceError> {
        (**self).unconfirmed().await
    }

    fn head_signal(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        (**self).head_signal()
    }

    fn missed_from(&self) -> Option<u64> {
        (**self).missed_from()
    }

    fn missed_queued(&self, from: u64) {
        (**self).missed_queued(from)
    }

    fn looks_up_addresses(&self) -> bool {
        (**self).looks_up_addresses()
    }

    async fn activity_after(&self, probes: &[Probe]) -> Result<Vec<Activity>, SourceError> {
        (**self).activity_after(probes).await
    }
}

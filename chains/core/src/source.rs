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

    /// Whether money may reach an address without a transfer this source
    /// reports (ETH sent by a contract without traces, TRX by a contract on
    /// a node that keeps no internal transactions), and how its balances
    /// read: the watcher then compares the node's balances with the money
    /// recorded (the balance backstop). `None`: every coin is seen.
    fn balance_backstop(&self) -> Option<BalanceReads> {
        None
    }

    /// The native coin held by each of `addresses` (as issued), in order,
    /// as [`BlockSource::balance_backstop`] says: at `at_height`, a final
    /// height, or at the node's latest final state. `None`: cannot tell.
    async fn native_balances(
        &self,
        _addresses: &[String],
        _at_height: u64,
    ) -> Result<Option<Vec<NativeBalance>>, SourceError> {
        Ok(None)
    }

    /// Blocks handed out without every transfer in them, which the source
    /// is still reading again, and how many it gave up on since it started
    /// (an Ethereum node that cannot trace a block: its ETH sent by
    /// contracts). `None`: the source reads whole blocks.
    fn unread_blocks(&self) -> Option<UnreadBlocks> {
        None
    }

    /// Why the node's push ([`head_signal`](Self::head_signal)) is not
    /// heard and polling stands in for it; `None` while it is, before it
    /// was first tried, or for a source without one.
    fn push_fallback(&self) -> Option<String> {
        None
    }
}

/// What [`BlockSource::unread_blocks`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnreadBlocks {
    pub waiting: u64,
    pub given_up: u64,
    /// The lowest height still read again (waiting, or read again with
    /// news not yet queued as a rescan): where a restart must read from,
    /// as the source keeps the wait in memory.
    pub lowest: Option<u64>,
}

/// Which state a source's balances are read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalanceReads {
    /// Exactly at the height asked (Ethereum's `eth_getBalance` at a block).
    AtHeight,
    /// At the node's latest final state, at or above the height asked
    /// (java-tron keeps no balance by height; its solidity service answers
    /// the solidified state).
    LatestFinal,
}

/// An address's native coin as its node holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeBalance {
    /// Base units (wei, sun).
    pub balance: u128,
    /// The address has spent from itself (a nonce above zero, on Tron a
    /// signed transaction's mark): its balance no longer adds up what it
    /// received, so it cannot be compared.
    pub has_sent: bool,
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

    fn balance_backstop(&self) -> Option<BalanceReads> {
        (**self).balance_backstop()
    }

    async fn native_balances(
        &self,
        addresses: &[String],
        at_height: u64,
    ) -> Result<Option<Vec<NativeBalance>>, SourceError> {
        (**self).native_balances(addresses, at_height).await
    }

    fn unread_blocks(&self) -> Option<UnreadBlocks> {
        (**self).unread_blocks()
    }

    fn push_fallback(&self) -> Option<String> {
        (**self).push_fallback()
    }
}

//! Read-ahead for [`BlockSource`](crate::BlockSource)s that fetch blocks in
//! ranges: while the watcher writes one block, the next ranges are already
//! on their way.
//!
//! A chain crate says what one block's answers are ([`AtHeight`]) and how to
//! fetch a range of them ([`FetchRange`]); [`ReadAhead`] decides what to ask
//! for and when, and hands the blocks out one height at a time.

use std::collections::VecDeque;
use std::future::Future;

use tokio::task::JoinHandle;

use crate::SourceError;

/// What a source fetched for one block: it knows the height it is for.
pub trait AtHeight {
    fn height(&self) -> u64;
}

/// How a [`ReadAhead`] asks a node for blocks.
pub trait FetchRange<T> {
    /// The blocks at heights `from..from + count`, ascending and starting at
    /// `from`, as far as the node has them: a short answer (or none) means
    /// the chain ends there. `count` is at least one.
    ///
    /// The future is spawned to run while the watcher works, so it must own
    /// what it needs (an `Arc` of the client, say).
    fn fetch_range(
        &self,
        from: u64,
        count: usize,
    ) -> impl Future<Output = Result<Vec<T>, SourceError>> + Send + 'static;

    /// How many blocks a range starting at `from` should hold: the batch
    /// size, but never past the node's tip as last seen. Zero stops reading
    /// ahead at `from`; a block asked for directly is still fetched.
    fn batch_len(&self, from: u64) -> usize;
}

type Pending<T> = (u64, JoinHandle<Result<Vec<T>, SourceError>>);

/// Blocks fetched ahead of the watcher, for one source.
///
/// The watcher asks for heights one at a time through [`fetched`]: mostly
/// upwards and in order, downwards during a reorg walk. Upwards, each ask is
/// served from what was read ahead, and up to `batches_in_flight` range
/// fetches are kept running past it. Anything unexpected (a downward ask, a
/// height nobody read ahead, an error) drops what was read ahead, so nothing
/// fetched before the chain moved is handed out after.
///
/// It holds no lock of its own: a source keeps it behind a
/// `tokio::sync::Mutex` and holds that across [`fetched`].
///
/// [`fetched`]: ReadAhead::fetched
#[derive(Debug)]
pub struct ReadAhead<T> {
    /// Fetched blocks, ascending and contiguous, not yet served.
    ready: VecDeque<T>,
    /// Range fetches under way, each with the height it starts at, ascending.
    pending: VecDeque<Pending<T>>,
    /// One past the last height asked for, ready or pending.
    requested_to: u64,
    /// The height served last, to tell a reorg walk's downward asks apart.
    last_served: Option<u64>,
    batches_in_flight: usize,
}

impl<T> ReadAhead<T> {
    /// Keeps up to `batches_in_flight` range fetches running ahead (at
    /// least one).
    pub fn new(batches_in_flight: usize) -> Self {
        ReadAhead {
            ready: VecDeque::new(),
            pending: VecDeque::new(),
            requested_to: 0,
            last_served: None,
            batches_in_flight: batches_in_flight.max(1),
        }
    }

    /// Drops everything read ahead and aborts the fetches under way: for
    /// when the chain may have moved, or an answer was unusable and nothing
    /// fetched with it is trusted either.
    pub fn clear(&mut self) {
        self.ready.clear();
        self.last_served = None;
        for (_, h) in self.pending.drain(..) {
            h.abort();
        }
    }
}

impl<T: AtHeight + Send + 'static> ReadAhead<T> {
    /// The block at `height` as fetched, from read-ahead when it is there;
    /// `None` when the node has no block there.
    ///
    /// - At or below the height served last (a reorg walk asks downwards):
    ///   everything read ahead is dropped and just this one block fetched.
    /// - Otherwise the block comes from what is ready, from the pending
    ///   range starting at `height`, or, when nothing read ahead starts
    ///   there, from a range fetched now (after dropping the rest).
    ///
    /// Then ranges past it are spawned until `batches_in_flight` are under
    /// way, each of [`FetchRange::batch_len`] blocks, stopping where that is
    /// zero. A failed fetch drops everything read ahead.
    pub async fn fetched<F: FetchRange<T>>(
        &mut self,
        height: u64,
        source: &F,
    ) -> Result<Option<T>, SourceError> {
        // A reorg walk asks downwards: one block each, nothing read ahead.
        if self.last_served.is_some_and(|last| height <= last) {
            self.clear();
            let block = source.fetch_range(height, 1).await?.into_iter().next();
            // The walk's next, lower ask is one block too, not a batch.
            self.last_served = block.as_ref().map(|_| height);
            return Ok(block);
        }
        if self.ready.front().is_none_or(|f| f.height() != height) {
            self.ready.clear();
            match self.pending.pop_front() {
                Some((from, handle)) if from == height => {
                    let fetched = handle
                        .await
                        .map_err(|e| SourceError::Transient(format!("read-ahead task: {e}")))?;
                    match fetched {
                        Ok(f) => self.ready.extend(f),
                        Err(e) => {
                            self.clear();
                            return Err(e);
                        }
                    }
                }
                other => {
                    if let Some((_, h)) = other {
                        h.abort();
                    }
                    self.clear();
                    // Asked for directly, the block is fetched even when the
                    // tip as last seen is below it: it may be stale.
                    let count = source.batch_len(height).max(1);
                    self.requested_to = height + count as u64;
                    let fetched = source.fetch_range(height, count).await?;
                    self.ready.extend(fetched);
                }
            }
        }
        let Some(f) = self.ready.pop_front() else {
            self.clear();
            return Ok(None);
        };
        self.last_served = Some(height);
        // A short answer means the chain ended there: what was asked beyond
        // it would not line up.
        if self.ready.is_empty() && self.pending.is_empty() {
            self.requested_to = height + 1;
        }
        while self.pending.len() < self.batches_in_flight {
            let next = self.requested_to.max(height + 1);
            let count = source.batch_len(next);
            if count == 0 {
                break;
            }
            self.requested_to = next + count as u64;
            let handle = tokio::spawn(source.fetch_range(next, count));
            self.pending.push_back((next, handle));
        }
        Ok(Some(f))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Debug, PartialEq, Eq)]
    struct Block(u64);

    impl AtHeight for Block {
        fn height(&self) -> u64 {
            self.0
        }
    }

    /// A node whose chain holds heights `0..len`, whose tip as last seen is
    /// `tip`, and which fails ranges starting at a height in `failing`.
    /// Answers are decided when a range is asked for, so spawned fetches are
    /// deterministic.
    #[derive(Debug)]
    struct Node {
        len: AtomicU64,
        tip: AtomicU64,
        batch: usize,
        failing: Mutex<HashSet<u64>>,
        calls: Mutex<Vec<(u64, usize)>>,
    }

    impl Node {
        fn new(len: u64, tip: u64, batch: usize) -> Arc<Node> {
            Arc::new(Node {
                len: AtomicU64::new(len),
                tip: AtomicU64::new(tip),
                batch,
                failing: Mutex::new(HashSet::new()),
                calls: Mutex::new(Vec::new()),
            })
        }

        /// The ranges asked for since the last look.
        fn calls(&self) -> Vec<(u64, usize)> {
            std::mem::take(&mut *self.calls.lock().unwrap())
        }
    }

    impl FetchRange<Block> for Arc<Node> {
        fn fetch_range(
            &self,
            from: u64,
            count: usize,
        ) -> impl Future<Output = Result<Vec<Block>, SourceError>> + Send + 'static {
            self.calls.lock().unwrap().push((from, count));
            let answer = if self.failing.lock().unwrap().contains(&from) {
                Err(SourceError::Transient(format!("range from {from}")))
            } else {
                let end = (from + count as u64).min(self.len.load(Ordering::Relaxed));
                Ok((from..end).map(Block).collect())
            };
            async move { answer }
        }

        fn batch_len(&self, from: u64) -> usize {
            let tip = self.tip.load(Ordering::Relaxed);
            let room = (tip + 1).saturating_sub(from) as usize;
            room.min(self.batch)
        }
    }

    async fn serve(ahead: &mut ReadAhead<Block>, node: &Arc<Node>, heights: std::ops::Range<u64>) {
        for h in heights {
            assert_eq!(
                ahead.fetched(h, node).await,
                Ok(Some(Block(h))),
                "height {h}"
            );
        }
    }

    #[tokio::test]
    async fn serves_in_order_each_height_asked_once() {
        let node = Node::new(20, 19, 4);
        let mut ahead = ReadAhead::new(2);
        serve(&mut ahead, &node, 0..20).await;
        assert_eq!(node.calls(), [(0, 4), (4, 4), (8, 4), (12, 4), (16, 4)]);
        // Past the tip: asked for directly, one block, and there is none.
        assert_eq!(ahead.fetched(20, &node).await, Ok(None));
        assert_eq!(node.calls(), [(20, 1)]);
    }

    #[tokio::test]
    async fn the_pending_batch_starting_at_the_height_is_used() {
        let node = Node::new(100, 99, 4);
        let mut ahead = ReadAhead::new(2);
        serve(&mut ahead, &node, 0..1).await;
        assert_eq!(node.calls(), [(0, 4), (4, 4), (8, 4)]);
        serve(&mut ahead, &node, 1..4).await;
        assert_eq!(node.calls(), []);
        serve(&mut ahead, &node, 4..5).await;
        assert_eq!(node.calls(), [(12, 4)], "4.. came from the pending batch");
    }

    #[tokio::test]
    async fn a_height_nobody_read_ahead_drops_the_rest() {
        let node = Node::new(100, 99, 4);
        let mut ahead = ReadAhead::new(2);
        serve(&mut ahead, &node, 0..2).await;
        node.calls();
        serve(&mut ahead, &node, 6..7).await;
        assert_eq!(node.calls(), [(6, 4), (10, 4), (14, 4)]);
    }

    #[tokio::test]
    async fn a_downward_ask_fetches_one_block_and_clears() {
        let node = Node::new(100, 99, 4);
        let mut ahead = ReadAhead::new(2);
        serve(&mut ahead, &node, 0..3).await;
        node.calls();
        serve(&mut ahead, &node, 1..2).await;
        assert_eq!(node.calls(), [(1, 1)]);
        // Nothing read ahead survived: upwards again starts afresh.
        serve(&mut ahead, &node, 2..3).await;
        assert_eq!(node.calls(), [(2, 4), (6, 4), (10, 4)]);
        // The height served last, asked again, counts as downward too.
        serve(&mut ahead, &node, 2..3).await;
        assert_eq!(node.calls(), [(2, 1)]);
    }

    #[tokio::test]
    async fn a_failed_read_ahead_clears_everything() {
        let node = Node::new(100, 99, 4);
        node.failing.lock().unwrap().insert(4);
        let mut ahead = ReadAhead::new(2);
        serve(&mut ahead, &node, 0..4).await;
        node.calls();
        assert!(ahead.fetched(4, &node).await.is_err());
        node.failing.lock().unwrap().clear();
        // The batch at 8 was dropped, and 3 is no longer "served last".
        serve(&mut ahead, &node, 3..4).await;
        assert_eq!(node.calls(), [(3, 4), (7, 4), (11, 4)]);
    }

    #[tokio::test]
    async fn a_failed_direct_fetch_leaves_nothing_behind() {
        let node = Node::new(100, 99, 4);
        node.failing.lock().unwrap().insert(0);
        let mut ahead = ReadAhead::new(2);
        assert!(ahead.fetched(0, &node).await.is_err());
        assert_eq!(node.calls(), [(0, 4)]);
        node.failing.lock().unwrap().clear();
        serve(&mut ahead, &node, 0..1).await;
        assert_eq!(node.calls(), [(0, 4), (4, 4), (8, 4)]);
    }

    #[tokio::test]
    async fn clear_drops_what_was_read_ahead() {
        let node = Node::new(100, 99, 4);
        let mut ahead = ReadAhead::new(2);
        serve(&mut ahead, &node, 0..2).await;
        node.calls();
        ahead.clear();
        serve(&mut ahead, &node, 2..3).await;
        assert_eq!(node.calls(), [(2, 4), (6, 4), (10, 4)]);
    }

    #[tokio::test]
    async fn never_reads_ahead_past_the_tip() {
        let node = Node::new(100, 5, 4);
        let mut ahead = ReadAhead::new(3);
        serve(&mut ahead, &node, 0..6).await;
        assert_eq!(node.calls(), [(0, 4), (4, 2)]);
        node.tip.store(20, Ordering::Relaxed);
        serve(&mut ahead, &node, 6..7).await;
        assert_eq!(node.calls(), [(6, 4), (10, 4), (14, 4), (18, 3)]);
    }

    #[tokio::test]
    async fn a_short_answer_ends_the_chain() {
        // The node has 0..=4 although its tip says 9.
        let node = Node::new(5, 9, 4);
        let mut ahead = ReadAhead::new(1);
        serve(&mut ahead, &node, 0..5).await;
        // 4.. came back short: the next range starts right after it, not
        // at 8 where the short one was asked to end.
        assert_eq!(node.calls(), [(0, 4), (4, 4), (5, 4)]);
        assert_eq!(ahead.fetched(5, &node).await, Ok(None));
        assert_eq!(node.calls(), []);
        // The chain grows: asked again, 5 is fetched afresh.
        node.len.store(10, Ordering::Relaxed);
        serve(&mut ahead, &node, 5..6).await;
        assert_eq!(node.calls(), [(5, 4), (9, 1)]);
    }
}

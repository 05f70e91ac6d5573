use std::collections::VecDeque;

use crate::{BlockRef, BlockSource, ChainEvent, SourceBlock, SourceError};

/// How many times a reorg walk starts over when the chain moves under it
/// before the stream gives up for this round (the watcher retries later).
const WALK_ATTEMPTS: usize = 5;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The fork point lies below what the cursor remembers. Resyncing silently
    /// could leave credits standing on a vanished chain, so the watcher stops.
    #[error(
        "reorg deeper than {max_depth} blocks: the chain no longer contains our block {cursor_tip} \
         nor any of the {remembered} blocks below it; the watcher stops for an operator"
    )]
    ReorgTooDeep {
        max_depth: usize,
        cursor_tip: BlockRef,
        remembered: usize,
    },
    /// The node kept changing its chain while the stream looked for the fork.
    #[error("the chain kept moving during a reorg walk at height {height}; will retry")]
    Unsettled { height: u64 },
}

impl StreamError {
    pub fn is_transient(&self) -> bool {
        match self {
            StreamError::Source(e) => e.is_transient(),
            StreamError::Unsettled { .. } => true,
            StreamError::ReorgTooDeep { .. } => false,
        }
    }
}

/// Turns a [`BlockSource`] and a persisted cursor into the one ordered
/// sequence of connects and disconnects that describes the best chain.
///
/// Every network uses this; no chain crate has reorg logic of its own.
/// Applying the emitted events, in order, to the chain the cursor started
/// from yields exactly the source's chain.
#[must_use = "a stream does nothing until polled"]
#[derive(Debug)]
pub struct CanonicalStream<S> {
    source: S,
    /// The last blocks connected, ascending and contiguous.
    cursor: VecDeque<BlockRef>,
    start_height: u64,
    max_depth: usize,
    last_tip: Option<BlockRef>,
}

impl<S: BlockSource> CanonicalStream<S> {
    /// `cursor` is the tail of the chain already applied, ascending; empty on
    /// first start, when the stream begins at `start_height`.
    pub fn new(source: S, cursor: Vec<BlockRef>, start_height: u64, max_depth: usize) -> Self {
        let mut stream = CanonicalStream {
            source,
            cursor: VecDeque::new(),
            start_height,
            max_depth,
            last_tip: None,
        };
        stream.reset_cursor(cursor);
        stream
    }

    /// Replaces the in-memory cursor with the persisted one, after a failed write.
    pub fn reset_cursor(&mut self, cursor: Vec<BlockRef>) {
        self.cursor = cursor.into();
        self.trim();
    }

    pub fn cursor_tip(&self) -> Option<&BlockRef> {
        self.cursor.back()
    }

    /// The node's final height, as far as it covers blocks this stream
    /// applied and the node still has. A height alone could name a block the
    /// node replaced right after the last batch; `None` when nothing can be
    /// confirmed this round.
    pub async fn confirmed_final_height(&self) -> Result<Option<u64>, StreamError> {
        let reported = self.source.final_height().await?;
        let Some(cursor) = self.cursor.back() else {
            return Ok(None);
        };
        let candidate = reported.min(cursor.height);
        let Some(ours) = self.remembered(candidate) else {
            // Below everything remembered: deeper than any reorg we follow.
            return Ok(Some(candidate));
        };
        let theirs = self.source.block_ref(candidate).await?;
        Ok(theirs
            .is_some_and(|b| b.hash == ours.hash)
            .then_some(candidate))
    }

    /// The applied block at `height`, if the cursor still remembers it.
    pub fn remembered(&self, height: u64) -> Option<&BlockRef> {
        let first = self.cursor.front()?.height;
        self.cursor
            .get(usize::try_from(height.checked_sub(first)?).ok()?)
    }

    pub fn last_tip(&self) -> Option<&BlockRef> {
        self.last_tip.as_ref()
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// Emits up to `max_blocks` connects (plus any disconnects a reorg needs)
    /// towards the source's tip. An empty batch means the stream is caught up.
    pub async fn next_batch(&mut self, max_blocks: usize) -> Result<Vec<ChainEvent>, StreamError> {
        let tip = self.source.tip().await?;
        self.last_tip = Some(tip.clone());
        let mut events = Vec::new();

        if let Some(last) = self.cursor.back() {
            if last.hash == tip.hash {
                return Ok(events);
            }
            // A lower tip is not a reorg. A node behind us (restarted, or a
            // lagging backend behind a load balancer) may still sit on a
            // branch the network orphaned: following it back would
            // disconnect final blocks, reverse their credits, and credit
            // them again once a caught-up backend answers. Wait for it.
            if last.height > tip.height {
                return Ok(events);
            }
            if last.height == tip.height {
                self.reorg(&mut events).await?;
                return Ok(events);
            }
        }

        match self.advance(&tip, max_blocks, &mut events).await {
            Ok(()) => Ok(events),
            // The cursor already holds the blocks in `events`: hand them over
            // rather than lose them, and meet the error again on the next call.
            Err(_) if !events.is_empty() => Ok(events),
            Err(e) => Err(e),
        }
    }

    /// Connects blocks towards `tip`, following a reorg if one shows up.
    async fn advance(
        &mut self,
        tip: &BlockRef,
        max_blocks: usize,
        events: &mut Vec<ChainEvent>,
    ) -> Result<(), StreamError> {
        while events.len() < max_blocks {
            let next_height = self
                .cursor
                .back()
                .map_or(self.start_height, |b| b.height + 1);
            if next_height > tip.height {
                break;
            }
            let Some(block) = self.source.block(next_height).await? else {
                break;
            };
            match self.cursor.back() {
                Some(last) if block.block.parent != last.hash => {
                    self.reorg(events).await?;
                    break;
                }
                _ => self.connect(block, events),
            }
        }
        Ok(())
    }

    /// Walks back to the highest remembered block the source still has, then
    /// emits disconnects (highest first) and the new branch's connects.
    async fn reorg(&mut self, events: &mut Vec<ChainEvent>) -> Result<(), StreamError> {
        'attempts: for _ in 0..WALK_ATTEMPTS {
            let mut branch: Vec<SourceBlock> = Vec::new();
            let mut agreement: Option<usize> = None;
            let mut reaches_our_tip = false;
            let top = self.cursor.len().saturating_sub(1);
            for i in (0..self.cursor.len()).rev() {
                let ours = &self.cursor[i];
                match self.source.block(ours.height).await? {
                    Some(theirs) if theirs.block.hash == ours.hash => {
                        agreement = Some(i);
                        break;
                    }
                    Some(theirs) => {
                        reaches_our_tip |= i == top;
                        branch.push(theirs);
                    }
                    None => {}
                }
            }
            // The node lacks some of our upper blocks but shows no block of
            // its own: it is behind, and nothing of ours is disproved. Only
            // a different block at a height we hold is a reorg.
            if branch.is_empty() {
                return Ok(());
            }
            // A branch is followed only once it is at least as long as ours:
            // one that is shorter is a node behind us on a stale branch (or
            // a load balancer that just switched to one). Checked before the
            // depth, so a backend far behind is waited for, not a halt.
            if !reaches_our_tip {
                return Ok(());
            }
            let keep = agreement.map_or(0, |i| i + 1);
            let depth = self.cursor.len() - keep;
            let holds_whole_history = self
                .cursor
                .front()
                .is_some_and(|b| b.height == self.start_height);
            if depth > self.max_depth || (agreement.is_none() && !holds_whole_history) {
                return Err(StreamError::ReorgTooDeep {
                    max_depth: self.max_depth,
                    cursor_tip: self.cursor.back().cloned().expect("a reorg needs a cursor"),
                    remembered: self.cursor.len(),
                });
            }

            branch.reverse();
            let fork = agreement.map(|i| &self.cursor[i]);
            if !links_up(fork, self.start_height, &branch) {
                continue;
            }

            // A cursor restored shorter than max_depth + 1 blocks would make
            // the next small reorg look too deep. Refill the memory from
            // below while the source still has our blocks.
            let mut below = Vec::new();
            let mut lowest = self.cursor.front().filter(|_| keep > 0).cloned();
            while let Some(low) = lowest.take() {
                if keep + branch.len() + below.len() > self.max_depth
                    || low.height <= self.start_height
                {
                    break;
                }
                match self.source.block(low.height - 1).await? {
                    Some(b) if b.block.hash == low.parent => {
                        below.push(b.block.clone());
                        lowest = Some(b.block);
                    }
                    _ => continue 'attempts,
                }
            }

            while self.cursor.len() > keep {
                let block = self.cursor.pop_back().expect("len checked");
                events.push(ChainEvent::Disconnected { block });
            }
            for block in below {
                self.cursor.push_front(block);
            }
            for block in branch {
                self.connect(block, events);
            }
            return Ok(());
        }
        Err(StreamError::Unsettled {
            height: self.cursor.back().map_or(self.start_height, |b| b.height),
        })
    }

    fn connect(&mut self, block: SourceBlock, events: &mut Vec<ChainEvent>) {
        self.cursor.push_back(block.block.clone());
        self.trim();
        events.push(block.into());
    }

    /// One block more than the deepest reorg we follow, so the fork point of
    /// the deepest allowed reorg is still remembered.
    fn trim(&mut self) {
        while self.cursor.len() > self.max_depth + 1 {
            self.cursor.pop_front();
        }
    }
}

/// Whether `branch` (ascending) is one contiguous chain growing from `fork`,
/// or from `start_height` when the fork is below everything remembered.
fn links_up(fork: Option<&BlockRef>, start_height: u64, branch: &[SourceBlock]) -> bool {
    let first_height = fork.map_or(start_height, |b| b.height + 1);
    let mut parent = fork.map(|b| b.hash.as_str());
    for (expected_height, b) in (first_height..).zip(branch) {
        if b.block.height != expected_height || parent.is_some_and(|p| b.block.parent != p) {
            return false;
        }
        parent = Some(&b.block.hash);
    }
    true
}

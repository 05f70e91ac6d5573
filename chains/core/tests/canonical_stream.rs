//! Specification tests for [`CanonicalStream`] against a [`ScriptedChain`].
//!
//! Every test keeps a *replica*: the chain as a consumer that applies the
//! emitted events in order sees it. The stream's promise is that the replica
//! ends up equal to the source's chain, whatever the chain did in between,
//! and that it never disconnects more than a reorg dropped.
//!
//! One exception is deliberate: a node whose chain is shorter than the
//! replica is *behind* us -- it restarted, or a load balancer sent us to a
//! lagging backend, maybe one still on a branch the network orphaned. The
//! stream waits for it: it emits nothing and keeps its cursor, because
//! following it back would disconnect blocks nobody disproved and reverse
//! final credits, only to credit them again at the next answer. A lower tip
//! is not a reorg: once the node's branch is at least as long as the
//! replica, the stream follows it. So a chain that got shorter is followed
//! once it grows back to our height.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use paywatch_core::{
    Asset, AssetId, BlockRef, BlockSource, CanonicalStream, ChainEvent, Network, SourceBlock,
    SourceError, StreamError, Transfer,
};
use paywatch_testkit::{ScriptedChain, ScriptedSource};
use proptest::prelude::*;
use proptest::sample::Index;

const ADDRESSES: [&str; 3] = ["addr-alice", "addr-bob", "addr-carol"];

/// Bound on `next_batch` calls per catch-up, so a stream that never settles
/// fails the test instead of hanging it.
const MAX_POLLS: usize = 2_000;

/// Bound on blocks mined to get a stream that waits for a node behind it going.
const MAX_GROWTHS: usize = 50;

// ---------------------------------------------------------------------------
// The replica: what a consumer applying the events holds.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct Replica {
    start_height: u64,
    blocks: Vec<BlockRef>,
    /// Timestamp and transfers of every block in `blocks`, keyed by hash.
    contents: HashMap<String, (i64, Vec<Transfer>)>,
}

impl Replica {
    fn empty(start_height: u64) -> Replica {
        Replica {
            start_height,
            blocks: Vec::new(),
            contents: HashMap::new(),
        }
    }

    fn top(&self) -> Option<&BlockRef> {
        self.blocks.last()
    }

    /// The cursor a consumer persists: its last `max_depth + 1` blocks.
    fn persisted_cursor(&self, max_depth: usize) -> Vec<BlockRef> {
        let from = self.blocks.len().saturating_sub(max_depth + 1);
        self.blocks[from..].to_vec()
    }

    fn push(&mut self, block: SourceBlock) {
        self.contents
            .insert(block.block.hash.clone(), (block.timestamp, block.transfers));
        self.blocks.push(block.block);
    }

    /// Applies one event, checking that it makes sense where it lands.
    fn apply(&mut self, event: &ChainEvent) {
        match event {
            ChainEvent::Connected {
                block,
                timestamp,
                transfers,
            } => {
                match self.blocks.last() {
                    Some(top) => {
                        assert_eq!(
                            block.parent, top.hash,
                            "connected {block} does not build on the replica's top {top}"
                        );
                        assert_eq!(
                            block.height,
                            top.height + 1,
                            "connected {block} skips a height"
                        );
                    }
                    None => assert_eq!(
                        block.height, self.start_height,
                        "the first block connected to an empty replica is not at the start height"
                    ),
                }
                let previous = self
                    .contents
                    .insert(block.hash.clone(), (*timestamp, transfers.clone()));
                assert!(previous.is_none(), "{block} connected twice");
                self.blocks.push(block.clone());
            }
            ChainEvent::Disconnected { block } => {
                let top = self
                    .blocks
                    .pop()
                    .unwrap_or_else(|| panic!("disconnected {block} from an empty replica"));
                assert_eq!(
                    &top, block,
                    "disconnected a block that is not the replica's top"
                );
                self.contents.remove(&block.hash);
            }
            other => panic!("unexpected event {other:?}"),
        }
    }

    /// How many blocks the replica and `chain` share from the start height.
    fn common_len(&self, chain: &Replica) -> usize {
        self.blocks
            .iter()
            .zip(&chain.blocks)
            .take_while(|(ours, theirs)| ours == theirs)
            .count()
    }

    /// How many of the replica's blocks the chain no longer has: the depth of
    /// the reorg the stream has to follow to get from the replica to `chain`.
    fn stale_depth(&self, chain: &Replica) -> usize {
        self.blocks.len() - self.common_len(chain)
    }
}

/// Whether the node's chain, from the replica's start height, is shorter
/// than the replica: a prefix of it (the node lacks our upper blocks) or a
/// shorter branch. Either way the stream waits. Reads the chain directly,
/// not through a source, so it neither meets a scripted failure nor runs a
/// meddling hook.
fn node_is_behind(replica: &Replica, chain: &ScriptedChain) -> bool {
    let theirs = chain
        .blocks()
        .into_iter()
        .filter(|b| b.height >= replica.start_height)
        .count();
    theirs < replica.blocks.len()
}

/// The node is behind the replica, which keeps every block it had.
#[track_caller]
fn assert_node_is_behind(replica: &Replica, chain: &ScriptedChain) {
    assert!(
        node_is_behind(replica, chain),
        "expected the node's chain (tip {}) to be shorter than the replica (top {:?})",
        chain.tip(),
        replica.top()
    );
}

/// The stream still remembers exactly the replica's upper blocks: what a
/// consumer persisted, so a wait that keeps the cursor keeps all of it.
#[track_caller]
fn assert_cursor_is_the_replica<S: BlockSource>(
    stream: &CanonicalStream<S>,
    replica: &Replica,
    max_depth: usize,
) {
    assert_eq!(stream.cursor_tip(), replica.top(), "cursor tip moved");
    for ours in replica.persisted_cursor(max_depth) {
        assert_eq!(
            stream.remembered(ours.height),
            Some(&ours),
            "the cursor lost or changed the block at height {}",
            ours.height
        );
    }
}

/// The chain from `start_height` up, with every transfer, as the node has it now.
async fn chain_view(chain: &ScriptedChain, start_height: u64) -> Replica {
    let source = chain.unfiltered_source();
    let mut view = Replica::empty(start_height);
    for block in chain.blocks() {
        if block.height < start_height {
            continue;
        }
        let fetched = source
            .block(block.height)
            .await
            .expect("the scripted node answers")
            .expect("the scripted node has its own block");
        assert_eq!(fetched.block, block);
        view.push(fetched);
    }
    view
}

fn connects(batch: &[ChainEvent]) -> usize {
    batch
        .iter()
        .filter(|e| matches!(e, ChainEvent::Connected { .. }))
        .count()
}

/// Polls until the stream reports an empty batch, applying every event and
/// retrying transient errors. Returns the transient errors it met; panics on
/// a fatal one.
///
/// The stream is done when it is at the tip it saw, or when it waits for a
/// node that is behind the replica (and the node has not moved since the
/// stream looked). Callers check which: most expect `replica` to be the chain.
async fn catch_up<S: BlockSource>(
    chain: &ScriptedChain,
    stream: &mut CanonicalStream<S>,
    replica: &mut Replica,
    mut max_blocks: impl FnMut() -> usize,
) -> Vec<StreamError> {
    let mut transient = Vec::new();
    for _ in 0..MAX_POLLS {
        match stream.next_batch(max_blocks()).await {
            Ok(batch) if batch.is_empty() => {
                if at_the_tip_it_saw(stream, replica.start_height) {
                    return transient;
                }
                let waits = stream.last_tip() == Some(&chain.tip());
                if waits && node_is_behind(replica, chain) {
                    assert_eq!(
                        stream.cursor_tip(),
                        replica.top(),
                        "a wait moved the cursor"
                    );
                    return transient;
                }
                // The node moved between the stream's tip() and block()
                // calls, so this round found nothing to do although the stream
                // is not at the tip; a consumer simply polls again.
            }
            Ok(batch) => {
                for event in &batch {
                    replica.apply(event);
                }
                assert_eq!(
                    stream.cursor_tip(),
                    replica.top(),
                    "cursor and replica disagree"
                );
            }
            Err(e) if e.is_transient() => {
                assert_eq!(
                    stream.cursor_tip(),
                    replica.top(),
                    "a failed batch moved the cursor: {e}"
                );
                transient.push(e);
            }
            Err(e) => panic!("fatal stream error while catching up: {e}"),
        }
    }
    panic!("the stream did not catch up within {MAX_POLLS} polls");
}

/// Whether the cursor ends at the tip the last `next_batch` read (or, with
/// nothing connected yet, that tip is still below the start height).
fn at_the_tip_it_saw<S: BlockSource>(stream: &CanonicalStream<S>, start_height: u64) -> bool {
    let tip = stream.last_tip().expect("polled at least once");
    match stream.cursor_tip() {
        Some(ours) => ours == tip,
        None => tip.height < start_height,
    }
}

/// Proptest cases: `default`, or `PROPTEST_CASES` when set (an explicit
/// `cases` in a config otherwise overrides the environment).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime")
}

fn chain_with(base_height: u64, blocks: usize) -> ScriptedChain {
    let chain = ScriptedChain::new(Network::Ethereum, base_height);
    for i in 0..blocks {
        chain.pay(
            ADDRESSES[i % ADDRESSES.len()],
            AssetId::Known(Asset::Usdt),
            1_000 + i as u128,
        );
        chain.mine();
    }
    chain
}

/// A stream over `chain` from `start_height` with an empty cursor, caught up.
async fn caught_up_stream(
    chain: &ScriptedChain,
    start_height: u64,
    max_depth: usize,
) -> (CanonicalStream<ScriptedSource>, Replica) {
    let mut stream = CanonicalStream::new(
        chain.unfiltered_source(),
        Vec::new(),
        start_height,
        max_depth,
    );
    let mut replica = Replica::empty(start_height);
    let errors = catch_up(chain, &mut stream, &mut replica, || 4).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, chain_view(chain, start_height).await);
    (stream, replica)
}

fn expect_too_deep(
    result: Result<Vec<ChainEvent>, StreamError>,
    max_depth: usize,
    cursor_tip: &BlockRef,
) {
    let error = result.expect_err("expected ReorgTooDeep");
    assert!(!error.is_transient(), "ReorgTooDeep must stop the watcher");
    match error {
        StreamError::ReorgTooDeep {
            max_depth: reported,
            cursor_tip: tip,
            remembered,
        } => {
            assert_eq!(reported, max_depth);
            assert_eq!(&tip, cursor_tip);
            assert!(
                (1..=max_depth + 1).contains(&remembered),
                "remembered {remembered}"
            );
        }
        other => panic!("expected ReorgTooDeep, got {other}"),
    }
}

// ---------------------------------------------------------------------------
// A node that changes or fails while the stream talks to it.
// ---------------------------------------------------------------------------

type Hook = Box<dyn FnMut(usize, &ScriptedChain) + Send>;

/// A [`ScriptedSource`] that runs a hook before answering each `block()` call
/// (numbered from 1), so a test can reorg, mine or fail the node at exactly
/// the moment the stream is in the middle of something.
struct MeddlingSource {
    inner: ScriptedSource,
    chain: ScriptedChain,
    block_calls: AtomicUsize,
    hook: Mutex<Hook>,
}

impl MeddlingSource {
    fn new(
        chain: &ScriptedChain,
        hook: impl FnMut(usize, &ScriptedChain) + Send + 'static,
    ) -> MeddlingSource {
        MeddlingSource {
            inner: chain.unfiltered_source(),
            chain: chain.clone(),
            block_calls: AtomicUsize::new(0),
            hook: Mutex::new(Box::new(hook)),
        }
    }

    fn block_calls(&self) -> usize {
        self.block_calls.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for MeddlingSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeddlingSource")
            .field("block_calls", &self.block_calls())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl BlockSource for MeddlingSource {
    fn network(&self) -> Network {
        self.inner.network()
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        self.inner.tip().await
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        self.inner.final_height().await
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        let call = self.block_calls.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let mut hook = self.hook.lock().unwrap_or_else(|p| p.into_inner());
            hook(call, &self.chain);
        }
        self.inner.block(height).await
    }
}

fn reorg_and_mine(chain: &ScriptedChain, depth: usize, mine: usize) {
    chain.reorg(depth);
    for _ in 0..mine {
        chain.pay(ADDRESSES[0], AssetId::Known(Asset::Eth), 7);
        chain.mine();
    }
}

/// Catches up; while that leaves the stream waiting for a node that is behind
/// (a truncation or a shorter branch, here or by a meddling hook), checks the
/// replica kept its blocks, mines one block on the shorter chain and catches
/// up again.
/// Returns the transient errors met and how many blocks it had to mine; the
/// caller asserts the replica is then exactly the chain.
async fn converge<S: BlockSource>(
    chain: &ScriptedChain,
    stream: &mut CanonicalStream<S>,
    replica: &mut Replica,
    mut max_blocks: impl FnMut() -> usize,
) -> (Vec<StreamError>, usize) {
    let mut errors = catch_up(chain, stream, replica, &mut max_blocks).await;
    let mut grown = 0;
    while node_is_behind(replica, chain) {
        assert!(
            grown < MAX_GROWTHS,
            "the stream never followed the growing chain"
        );
        assert_eq!(stream.cursor_tip(), replica.top());
        chain.mine();
        grown += 1;
        errors.extend(catch_up(chain, stream, replica, &mut max_blocks).await);
    }
    (errors, grown)
}

// ---------------------------------------------------------------------------
// 1. The property: any sequence of chain changes is followed exactly.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Pay {
    to: usize,
    asset: usize,
    amount: u128,
    failed: bool,
}

/// One block's worth of payments.
type BlockPlan = Vec<Pay>;

#[derive(Debug, Clone)]
enum Op {
    Extend(Vec<BlockPlan>),
    /// Depth is taken modulo `max_depth + 1`.
    Reorg {
        depth: usize,
        branch: Vec<BlockPlan>,
    },
    ReorgKeepingTransactions {
        depth: usize,
        branch: Vec<BlockPlan>,
    },
    /// The consumer restarts: a new stream from the persisted cursor.
    Restart,
}

#[derive(Debug, Clone)]
enum Start {
    /// Empty cursor, start at the chain's first block.
    Genesis,
    /// Empty cursor, start somewhere above the first block (maybe above the tip).
    EmptyAt(Index),
    /// A persisted cursor: the replica already holds `from..=to` of the chain.
    Cursor {
        from: Index,
        to: Index,
        pass_whole_replica: bool,
    },
}

#[derive(Debug, Clone)]
struct Scenario {
    max_depth: usize,
    base_height: u64,
    initial: Vec<BlockPlan>,
    start: Start,
    /// Each operation, and whether the stream catches up right after it.
    steps: Vec<(Op, bool)>,
    /// `max_blocks` of successive `next_batch` calls, cycled.
    max_blocks: Vec<usize>,
}

fn pay_strategy() -> impl Strategy<Value = Pay> {
    (
        0..ADDRESSES.len(),
        0..3usize,
        1u128..1_000_000_000_000_000_000,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(to, asset, amount, failed)| Pay {
            to,
            asset,
            amount,
            failed,
        })
}

fn blocks_strategy(max_blocks: usize) -> impl Strategy<Value = Vec<BlockPlan>> {
    prop::collection::vec(prop::collection::vec(pay_strategy(), 0..3), 0..=max_blocks)
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec(prop::collection::vec(pay_strategy(), 0..3), 1..=5)
            .prop_map(Op::Extend),
        3 => (0..8usize, blocks_strategy(6)).prop_map(|(depth, branch)| Op::Reorg { depth, branch }),
        2 => (0..8usize, blocks_strategy(6))
            .prop_map(|(depth, branch)| Op::ReorgKeepingTransactions { depth, branch }),
        1 => Just(Op::Restart),
    ]
}

fn start_strategy() -> impl Strategy<Value = Start> {
    prop_oneof![
        Just(Start::Genesis),
        any::<Index>().prop_map(Start::EmptyAt),
        (any::<Index>(), any::<Index>(), any::<bool>()).prop_map(|(from, to, whole)| {
            Start::Cursor {
                from,
                to,
                pass_whole_replica: whole,
            }
        }),
    ]
}

fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    (
        1usize..=5,
        0u64..1_000,
        blocks_strategy(12),
        start_strategy(),
        prop::collection::vec((op_strategy(), prop::bool::weighted(0.7)), 0..25),
        prop::collection::vec(1usize..=4, 1..8),
    )
        .prop_map(
            |(max_depth, base_height, initial, start, steps, max_blocks)| Scenario {
                max_depth,
                base_height,
                initial,
                start,
                steps,
                max_blocks,
            },
        )
}

fn mine_plans(chain: &ScriptedChain, plans: &[BlockPlan]) {
    for plan in plans {
        for pay in plan {
            let asset = match pay.asset {
                0 => AssetId::Known(Asset::Usdt),
                1 => AssetId::Known(Asset::Eth),
                _ => AssetId::Token {
                    contract: "0xnot-a-configured-token".to_owned(),
                },
            };
            if pay.failed {
                chain.pay_failed(ADDRESSES[pay.to], asset, pay.amount);
            } else {
                chain.pay(ADDRESSES[pay.to], asset, pay.amount);
            }
        }
        chain.mine();
    }
}

/// What a catch-up with a static chain ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CaughtUp {
    /// The replica is exactly the chain (after following, or after an
    /// operator resynced it from a reorg deeper than max_depth).
    OnTheChain,
    /// The chain is shorter than the replica (a prefix of it, or a shorter
    /// branch, forked within the window or below it): the node is behind,
    /// the stream waits and the replica keeps its blocks. Once the chain is
    /// as long as the replica the fork is followed, or found too deep.
    WaitingForTheNode,
}

/// Catches the stream up with a chain that does not change meanwhile and
/// checks everything the stream promises about that catch-up.
async fn catch_up_checked(
    chain: &ScriptedChain,
    stream: &mut CanonicalStream<ScriptedSource>,
    replica: &mut Replica,
    max_depth: usize,
    sizes: &mut impl Iterator<Item = usize>,
) -> CaughtUp {
    let expected = chain_view(chain, replica.start_height).await;
    let on_chain: Vec<BlockRef> = chain.blocks();
    let stale = replica.stale_depth(&expected);
    let waiting = (stale > 0 && expected.blocks.len() < replica.blocks.len())
        .then_some(CaughtUp::WaitingForTheNode);
    if let Some(outcome) = waiting {
        // A shorter chain disproves nothing the stream follows: it emits
        // nothing, keeps its cursor, and stays that way however often it is
        // polled.
        assert!(node_is_behind(replica, chain));
        for _ in 0..3 {
            let size = sizes.next().expect("cycled");
            match stream.next_batch(size).await {
                Ok(batch) => assert!(
                    batch.is_empty(),
                    "{outcome:?}: the stream followed a chain shorter than the replica: {batch:?}"
                ),
                Err(e) => panic!(
                    "{outcome:?}: next_batch failed for a node behind us: {e} (the replica is \
                     {stale} blocks ahead of the chain, max_depth {max_depth})"
                ),
            }
            assert_cursor_is_the_replica(stream, replica, max_depth);
            assert_eq!(stream.last_tip(), Some(&chain.tip()));
        }
        return outcome;
    }

    if stale > max_depth {
        // Deeper than the stream follows: it must stop, emit nothing and
        // stay stopped.
        let top = replica
            .top()
            .cloned()
            .expect("only a non-empty replica goes stale");
        for _ in 0..2 {
            let result = stream.next_batch(sizes.next().expect("cycled")).await;
            expect_too_deep(result, max_depth, &top);
            assert_cursor_is_the_replica(stream, replica, max_depth);
        }
        // An operator resyncs the consumer from the chain.
        *replica = expected;
        *stream = CanonicalStream::new(
            chain.unfiltered_source(),
            replica.persisted_cursor(max_depth),
            replica.start_height,
            max_depth,
        );
        return CaughtUp::OnTheChain;
    }

    let mut disconnected = 0;
    let mut polls = 0;
    loop {
        polls += 1;
        assert!(polls <= MAX_POLLS, "the stream did not catch up");
        let size = sizes.next().expect("cycled");
        let batch = match stream.next_batch(size).await {
            Ok(batch) => batch,
            Err(e) => panic!(
                "next_batch failed on a static chain: {e} (reorg depth {stale}, max_depth {max_depth})"
            ),
        };
        if batch.is_empty() {
            break;
        }
        assert!(
            connects(&batch) <= size + max_depth,
            "{} connects in a batch of at most {size} (max_depth {max_depth})",
            connects(&batch)
        );
        for event in &batch {
            if let ChainEvent::Disconnected { block } = event {
                assert!(
                    !on_chain.contains(block),
                    "disconnected {block}, which the chain still has: below the fork point"
                );
                disconnected += 1;
            }
            replica.apply(event);
        }
        assert_eq!(stream.cursor_tip(), replica.top());
    }
    assert_eq!(
        disconnected, stale,
        "the stream disconnects exactly the blocks the chain dropped"
    );
    assert!(disconnected <= max_depth);
    assert_eq!(*replica, expected, "the replica is not the chain");
    assert_eq!(stream.last_tip(), Some(&chain.tip()));
    assert_cursor_is_the_replica(stream, replica, max_depth);
    CaughtUp::OnTheChain
}

async fn run_scenario(s: Scenario) {
    let chain = ScriptedChain::new(Network::Tron, s.base_height);
    mine_plans(&chain, &s.initial);
    let blocks = chain.blocks();

    let (start_height, mut replica, cursor) = match &s.start {
        Start::Genesis => (s.base_height, Replica::empty(s.base_height), Vec::new()),
        Start::EmptyAt(at) => {
            let start = s.base_height + at.index(blocks.len() + 3) as u64;
            (start, Replica::empty(start), Vec::new())
        }
        Start::Cursor {
            from,
            to,
            pass_whole_replica,
        } => {
            let (a, b) = (from.index(blocks.len()), to.index(blocks.len()));
            let (from, to) = (a.min(b), a.max(b));
            let start = blocks[from].height;
            let mut replica = chain_view(&chain, start).await;
            replica.blocks.truncate(to - from + 1);
            let kept = replica.blocks.clone();
            replica
                .contents
                .retain(|hash, _| kept.iter().any(|b| &b.hash == hash));
            let cursor = if *pass_whole_replica {
                replica.blocks.clone()
            } else {
                replica.persisted_cursor(s.max_depth)
            };
            (start, replica, cursor)
        }
    };

    let mut stream =
        CanonicalStream::new(chain.unfiltered_source(), cursor, start_height, s.max_depth);
    assert_eq!(stream.cursor_tip(), replica.top());
    let mut sizes = s.max_blocks.iter().copied().cycle();
    for (op, catch_up_now) in &s.steps {
        match op {
            Op::Extend(plans) => mine_plans(&chain, plans),
            Op::Reorg { depth, branch } => {
                chain.reorg(depth % (s.max_depth + 1));
                mine_plans(&chain, branch);
            }
            Op::ReorgKeepingTransactions { depth, branch } => {
                chain.reorg_keeping_transactions(depth % (s.max_depth + 1));
                mine_plans(&chain, branch);
            }
            Op::Restart => {
                stream = CanonicalStream::new(
                    chain.unfiltered_source(),
                    replica.persisted_cursor(s.max_depth),
                    start_height,
                    s.max_depth,
                );
                assert_cursor_is_the_replica(&stream, &replica, s.max_depth);
            }
        }
        if *catch_up_now {
            catch_up_checked(&chain, &mut stream, &mut replica, s.max_depth, &mut sizes).await;
        }
    }

    // Whatever the chain did, once it grows back to the replica's height,
    // the replica is exactly the chain. Growing from its first block past
    // the start height and every block of the replica is enough.
    let max_growths = MAX_GROWTHS + replica.blocks.len() + (start_height - s.base_height) as usize;
    let mut grown = 0;
    loop {
        let outcome =
            catch_up_checked(&chain, &mut stream, &mut replica, s.max_depth, &mut sizes).await;
        if outcome == CaughtUp::OnTheChain {
            break;
        }
        assert!(
            grown < max_growths,
            "the stream never followed the growing chain"
        );
        mine_plans(&chain, &[Vec::new()]);
        grown += 1;
    }
    assert_eq!(replica, chain_view(&chain, start_height).await);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(200),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Extends, reorgs (empty, shorter, equal or longer replacement
    /// branches, with or without the dropped transactions), restarts, random
    /// batch sizes, and changes the stream only sees several at a time:
    /// applying the events yields exactly the chain, transfers included, and
    /// no disconnect ever reaches below the fork point -- except while the
    /// chain is shorter than the replica, when the stream emits nothing and
    /// the replica keeps its blocks until the chain is as long again.
    #[test]
    fn applying_the_events_always_yields_the_chain(s in scenario_strategy()) {
        rt().block_on(run_scenario(s));
    }
}

// ---------------------------------------------------------------------------
// 2. Reorgs deeper than max_depth stop the stream.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn reorg_deeper_than_max_depth_is_reorg_too_deep_and_emits_nothing() {
    let max_depth = 3;
    for replacement in [0, 1, 2, 4, 5, 9] {
        let chain = chain_with(40, 10);
        let (mut stream, replica) = caught_up_stream(&chain, 40, max_depth).await;
        let top = replica.top().cloned().expect("caught up");

        reorg_and_mine(&chain, max_depth + 1, replacement);
        // Shorter than ours: the node may just be behind, on a branch the
        // network orphaned; nothing is followed, nothing halts.
        while chain.height() < top.height {
            assert_node_is_behind(&replica, &chain);
            for size in [1, 100] {
                assert_eq!(stream.next_batch(size).await, Ok(Vec::new()));
                assert_cursor_is_the_replica(&stream, &replica, max_depth);
            }
            chain.mine();
        }
        // As long as ours: now it is a fork, max_depth + 1 deep.
        for _ in 0..3 {
            let result = stream.next_batch(100).await;
            expect_too_deep(result, max_depth, &top);
            assert_eq!(stream.cursor_tip(), Some(&top), "the cursor moved");
        }
    }
}

#[tokio::test]
async fn reorg_of_exactly_max_depth_is_followed() {
    let max_depth = 3;
    for replacement in [0, 1, 3, 6] {
        let chain = chain_with(40, 10);
        let (mut stream, mut replica) = caught_up_stream(&chain, 40, max_depth).await;
        let top = replica.top().cloned().expect("caught up");
        reorg_and_mine(&chain, max_depth, replacement);
        // Shorter: the stream waits for the node.
        while chain.height() < top.height {
            assert_node_is_behind(&replica, &chain);
            assert_eq!(stream.next_batch(100).await, Ok(Vec::new()));
            assert_cursor_is_the_replica(&stream, &replica, max_depth);
            chain.mine();
        }

        let mut events = Vec::new();
        for _ in 0..MAX_POLLS {
            let batch = stream
                .next_batch(100)
                .await
                .expect("a reorg of max_depth is followed");
            if batch.is_empty() {
                break;
            }
            events.extend(batch);
        }
        for event in &events {
            replica.apply(event);
        }
        let disconnects = events
            .iter()
            .filter(|e| matches!(e, ChainEvent::Disconnected { .. }))
            .count();
        assert_eq!(disconnects, max_depth);
        assert_eq!(replica, chain_view(&chain, 40).await);
    }
}

#[tokio::test]
async fn too_deep_reorg_found_mid_batch_keeps_the_blocks_already_connected() {
    // The stream is catching up; while it fetches the 7th block of a batch
    // the node replaces everything but its first block.
    let max_depth = 2;
    let chain = chain_with(0, 12);
    let source = MeddlingSource::new(&chain, |call, chain| {
        if call == 7 {
            reorg_and_mine(chain, 12, 13);
        }
    });
    let mut stream = CanonicalStream::new(source, Vec::new(), 0, max_depth);
    let mut replica = Replica::empty(0);

    let mut outcome = None;
    for _ in 0..MAX_POLLS {
        match stream.next_batch(10).await {
            Ok(batch) => {
                assert!(
                    !batch.is_empty(),
                    "cannot be caught up across a too deep reorg"
                );
                for event in &batch {
                    replica.apply(event);
                }
                assert_eq!(stream.cursor_tip(), replica.top());
            }
            Err(e) => {
                outcome = Some(e);
                break;
            }
        }
    }
    // Whatever the stream connected before it met the reorg reached the
    // consumer: the cursor and the replica agree.
    let top = replica
        .top()
        .cloned()
        .expect("blocks were connected before the reorg");
    assert_eq!(top.height, 5);
    assert_eq!(stream.cursor_tip(), Some(&top));
    let error = outcome.expect("the stream stops at the reorg");
    expect_too_deep(Err(error), max_depth, &top);
    expect_too_deep(stream.next_batch(10).await, max_depth, &top);
}

#[tokio::test]
async fn replacing_the_start_block_is_followed_when_the_cursor_holds_all_history() {
    // The stream starts above the chain's first block, so its cursor holds
    // the whole history it applied; a reorg replacing even the start block is
    // followed as long as it is no deeper than max_depth.
    let max_depth = 5;
    let chain = chain_with(0, 8);
    let (mut stream, mut replica) = caught_up_stream(&chain, 5, max_depth).await;
    assert_eq!(replica.blocks.len(), 4);

    reorg_and_mine(&chain, 6, 7);
    let errors = catch_up(&chain, &mut stream, &mut replica, || 3).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, chain_view(&chain, 5).await);

    // The chain now ends below the start height: nothing we applied is on
    // it, but nothing is disproved either. The stream waits for the node.
    reorg_and_mine(&chain, 8, 0);
    assert!(chain.height() < 5);
    let before = replica.clone();
    let errors = catch_up(&chain, &mut stream, &mut replica, || 3).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, before);
    assert_node_is_behind(&replica, &chain);
    assert_cursor_is_the_replica(&stream, &replica, max_depth);

    // Blocks of its own at our heights, the start block's included, up to
    // our height: a reorg of the whole history, max_depth deep, followed.
    chain.mine_n(9);
    assert_eq!(replica.blocks.len(), max_depth);
    let errors = catch_up(&chain, &mut stream, &mut replica, || 3).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, chain_view(&chain, 5).await);
}

#[tokio::test]
async fn replacing_more_history_than_max_depth_is_too_deep_even_from_the_start() {
    // The cursor holds the whole history since the start height, max_depth + 1
    // blocks, and the node replaces all of them.
    let max_depth = 3;
    let chain = chain_with(0, 12);
    let (mut stream, replica) = caught_up_stream(&chain, 9, max_depth).await;
    assert_eq!(replica.blocks.len(), max_depth + 1);
    let top = replica.top().cloned().expect("caught up");

    reorg_and_mine(&chain, 5, 6);
    expect_too_deep(stream.next_batch(10).await, max_depth, &top);
    assert_eq!(stream.cursor_tip(), Some(&top));
}

#[tokio::test]
async fn restart_from_a_short_cursor_whose_blocks_all_vanished_is_too_deep() {
    // A consumer that persisted fewer than max_depth + 1 blocks cannot tell
    // where a reorg that replaced all of them forked: the stream stops rather
    // than guess.
    let max_depth = 4;
    let chain = chain_with(0, 12);
    let (_, replica) = caught_up_stream(&chain, 0, max_depth).await;
    let top = replica.top().cloned().expect("caught up");

    reorg_and_mine(&chain, 2, 3);
    let mut stream = CanonicalStream::new(
        chain.unfiltered_source(),
        replica.persisted_cursor(1),
        0,
        max_depth,
    );
    expect_too_deep(stream.next_batch(10).await, max_depth, &top);
    assert_eq!(stream.cursor_tip(), Some(&top));
}

// ---------------------------------------------------------------------------
// 3. A node that changes its chain while the stream walks back.
// ---------------------------------------------------------------------------

/// A stream over a [`MeddlingSource`] with the cursor of a caught-up
/// consumer, so the hook's call numbers count from this point.
async fn meddled_stream(
    chain: &ScriptedChain,
    start_height: u64,
    max_depth: usize,
    hook: impl FnMut(usize, &ScriptedChain) + Send + 'static,
) -> (CanonicalStream<MeddlingSource>, Replica) {
    let (_, replica) = caught_up_stream(chain, start_height, max_depth).await;
    let stream = CanonicalStream::new(
        MeddlingSource::new(chain, hook),
        replica.persisted_cursor(max_depth),
        start_height,
        max_depth,
    );
    (stream, replica)
}

#[tokio::test]
async fn chain_moving_during_the_reorg_walk_converges() {
    // For every moment of the walk (and of the forward fetch before it), the
    // node reorgs again, in a few shapes; the stream must end on the chain.
    let max_depth = 8;
    for (depth, mine) in [(1, 1), (2, 3), (3, 1), (2, 0), (0, 2), (4, 6)] {
        for trigger in 1..=10 {
            for first_replacement in [2, 3, 5] {
                let chain = chain_with(100, 12);
                let (mut stream, mut replica) =
                    meddled_stream(&chain, 100, max_depth, move |call, chain| {
                        if call == trigger {
                            reorg_and_mine(chain, depth, mine);
                        }
                    })
                    .await;

                reorg_and_mine(&chain, 3, first_replacement);
                // A second reorg with nothing mined only truncates: the
                // stream may be left waiting for the node until it grows.
                let (errors, grown) = converge(&chain, &mut stream, &mut replica, || 2).await;
                for e in &errors {
                    assert!(matches!(e, StreamError::Unsettled { .. }), "{e}");
                }
                assert!(
                    grown <= 1 + depth,
                    "waited for {grown} blocks, more than the reorgs took away"
                );
                assert_eq!(
                    replica,
                    chain_view(&chain, 100).await,
                    "trigger {trigger}, second reorg ({depth}, {mine}), first replacement {first_replacement}"
                );
            }
        }
    }
}

#[tokio::test]
async fn node_that_never_settles_is_unsettled_then_converges() {
    // While armed, every block() call replaces the node's top two blocks:
    // no walk can find a branch that links up.
    let max_depth = 6;
    let chain = chain_with(0, 10);
    let armed = Arc::new(AtomicBool::new(true));
    let hook_armed = Arc::clone(&armed);
    let (mut stream, mut replica) = meddled_stream(&chain, 0, max_depth, move |_, chain| {
        if hook_armed.load(Ordering::SeqCst) {
            reorg_and_mine(chain, 2, 2);
        }
    })
    .await;
    let top = replica.top().cloned().expect("caught up");

    reorg_and_mine(&chain, 1, 1);
    for _ in 0..3 {
        match stream.next_batch(5).await {
            Err(e @ StreamError::Unsettled { .. }) => {
                assert!(e.is_transient(), "Unsettled is retried");
                assert_eq!(e, StreamError::Unsettled { height: top.height });
            }
            other => panic!("expected Unsettled, got {other:?}"),
        }
        assert_eq!(
            stream.cursor_tip(),
            Some(&top),
            "an unsettled walk moved the cursor"
        );
    }

    armed.store(false, Ordering::SeqCst);
    let errors = catch_up(&chain, &mut stream, &mut replica, || 5).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, chain_view(&chain, 0).await);
}

#[tokio::test]
async fn chain_moving_during_the_forward_fetch_converges() {
    // The stream is far behind and fetching forward in big batches when the
    // node reorgs below what the batch already connected.
    let max_depth = 8;
    for trigger in 1..=12 {
        for (depth, mine) in [(3, 5), (6, 2), (9, 9)] {
            let chain = chain_with(0, 4);
            let (mut stream, mut replica) =
                meddled_stream(&chain, 0, max_depth, move |call, chain| {
                    if call == trigger {
                        reorg_and_mine(chain, depth, mine);
                    }
                })
                .await;
            chain.mine_n(10);
            let (errors, _) = converge(&chain, &mut stream, &mut replica, || 20).await;
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(
                replica,
                chain_view(&chain, 0).await,
                "trigger {trigger}, reorg ({depth}, {mine})"
            );
        }
    }
}

#[derive(Debug, Clone)]
enum Meddle {
    Fail,
    Reorg { depth: usize, mine: usize },
    Mine(usize),
}

fn meddle_strategy() -> impl Strategy<Value = Meddle> {
    prop_oneof![
        2 => Just(Meddle::Fail),
        2 => (0..=2usize, 0..=4usize).prop_map(|(depth, mine)| Meddle::Reorg { depth, mine }),
        1 => (1..=3usize).prop_map(Meddle::Mine),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(200),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The node reorgs, mines or fails at random moments of the stream's
    /// forward fetches and reorg walks: with transient errors retried, the
    /// consumer still ends on exactly the node's chain.
    #[test]
    fn stream_converges_while_the_node_moves_and_fails_under_it(
        initial in 1usize..15,
        first_reorg in 0usize..=3,
        first_replacement in 0usize..6,
        meddles in prop::collection::vec((1usize..30, meddle_strategy()), 0..5),
        max_blocks in 1usize..6,
    ) {
        rt().block_on(async {
            let max_depth = 8;
            let chain = chain_with(7, initial);
            let script: HashMap<usize, Meddle> = meddles.into_iter().collect();
            let (mut stream, mut replica) = meddled_stream(&chain, 7, max_depth, move |call, chain| {
                match script.get(&call) {
                    Some(Meddle::Fail) => chain.fail_next(1),
                    Some(Meddle::Reorg { depth, mine }) => reorg_and_mine(chain, *depth, *mine),
                    Some(Meddle::Mine(n)) => {
                        chain.mine_n(*n);
                    }
                    None => {}
                }
            })
            .await;

            reorg_and_mine(&chain, first_reorg, first_replacement);
            chain.mine();
            // A meddling reorg with nothing mined only truncates: the stream
            // may be left waiting for the node until it grows a block.
            let (errors, grown) = converge(&chain, &mut stream, &mut replica, || max_blocks).await;
            assert!(grown <= 2 + 2 * 4, "grew the chain {grown} times, more than 5 reorgs took away");
            for e in &errors {
                assert!(
                    matches!(e, StreamError::Unsettled { .. } | StreamError::Source(SourceError::Transient(_))),
                    "{e}"
                );
            }
            assert_eq!(replica, chain_view(&chain, 7).await);
        });
    }
}

// ---------------------------------------------------------------------------
// 4. A node that is behind us, and the chain getting shorter.
// ---------------------------------------------------------------------------

/// A node that is behind: it serves `chain` only up to a height the test
/// sets, as a restarted node or a lagging backend behind a load balancer
/// does. Its blocks are the chain's own, so catching up shows the same ones.
#[derive(Debug)]
struct LaggingSource {
    inner: ScriptedSource,
    served_up_to: Arc<AtomicU64>,
}

impl LaggingSource {
    /// The source, and the height it serves up to (`u64::MAX`: all of it).
    fn new(chain: &ScriptedChain) -> (LaggingSource, Arc<AtomicU64>) {
        let served_up_to = Arc::new(AtomicU64::new(u64::MAX));
        let source = LaggingSource {
            inner: chain.unfiltered_source(),
            served_up_to: Arc::clone(&served_up_to),
        };
        (source, served_up_to)
    }

    fn limit(&self) -> u64 {
        self.served_up_to.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl BlockSource for LaggingSource {
    fn network(&self) -> Network {
        self.inner.network()
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        let tip = self.inner.tip().await?;
        if tip.height <= self.limit() {
            return Ok(tip);
        }
        let lagging = self.inner.block(self.limit()).await?;
        Ok(lagging.expect("a lagging node has its own tip").block)
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        Ok(self.inner.final_height().await?.min(self.limit()))
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        if height > self.limit() {
            return Ok(None);
        }
        self.inner.block(height).await
    }
}

/// Polls until an empty batch, applying every event; returns them all.
async fn drain<S: BlockSource>(
    stream: &mut CanonicalStream<S>,
    replica: &mut Replica,
    max_blocks: usize,
) -> Vec<ChainEvent> {
    let mut events = Vec::new();
    for _ in 0..MAX_POLLS {
        let batch = stream.next_batch(max_blocks).await.expect("no error");
        if batch.is_empty() {
            return events;
        }
        for event in &batch {
            replica.apply(event);
        }
        assert_eq!(stream.cursor_tip(), replica.top());
        events.extend(batch);
    }
    panic!("the stream did not catch up within {MAX_POLLS} polls");
}

/// Each event as (connected?, block).
fn shape(events: &[ChainEvent]) -> Vec<(bool, BlockRef)> {
    events
        .iter()
        .map(|e| (matches!(e, ChainEvent::Connected { .. }), e.block().clone()))
        .collect()
}

/// Polls a stream whose node is behind a few times, with several batch
/// sizes: nothing is emitted, no error, and the cursor stays the replica's.
async fn waits<S: BlockSource>(
    stream: &mut CanonicalStream<S>,
    replica: &Replica,
    max_depth: usize,
    node_tip: &BlockRef,
) {
    for size in [1, 3, 100] {
        let result = stream.next_batch(size).await;
        assert_eq!(
            result,
            Ok(Vec::new()),
            "the stream did not wait for a node at {node_tip}"
        );
        assert_eq!(stream.last_tip(), Some(node_tip));
        assert_cursor_is_the_replica(stream, replica, max_depth);
    }
}

#[tokio::test]
async fn a_node_that_is_behind_us_is_waited_for_not_followed_back() {
    // Reading a lagging node as a reorg would disconnect our upper blocks and
    // reverse their (maybe final) credits, only to connect the very same
    // blocks again once the node caught up.
    let max_depth = 4;
    let chain = chain_with(0, 12);
    let (_, mut replica) = caught_up_stream(&chain, 0, max_depth).await;
    let ours = chain.blocks();
    let (source, served_up_to) = LaggingSource::new(&chain);
    let mut stream =
        CanonicalStream::new(source, replica.persisted_cursor(max_depth), 0, max_depth);
    assert_eq!(stream.next_batch(10).await, Ok(Vec::new()));

    // The node's tip is one of our remembered blocks, at several depths.
    for behind_at in [11, 8, 10, 9] {
        served_up_to.store(behind_at, Ordering::SeqCst);
        waits(&mut stream, &replica, max_depth, &ours[behind_at as usize]).await;
    }

    // The consumer restarts while the node is still behind: the same.
    let (source, served_up_to) = LaggingSource::new(&chain);
    served_up_to.store(9, Ordering::SeqCst);
    let mut stream =
        CanonicalStream::new(source, replica.persisted_cursor(max_depth), 0, max_depth);
    waits(&mut stream, &replica, max_depth, &ours[9]).await;

    // The node catches up with the same blocks: still nothing to do.
    served_up_to.store(12, Ordering::SeqCst);
    waits(&mut stream, &replica, max_depth, &ours[12]).await;

    // New blocks connect normally, as far as the node serves them.
    let before = replica.clone();
    chain.pay(ADDRESSES[1], AssetId::Known(Asset::Usdt), 5);
    let new = [chain.mine(), chain.mine(), chain.mine()];
    served_up_to.store(10, Ordering::SeqCst);
    waits(&mut stream, &replica, max_depth, &ours[10]).await;
    served_up_to.store(13, Ordering::SeqCst);
    let events = drain(&mut stream, &mut replica, 5).await;
    assert_eq!(shape(&events), vec![(true, new[0].clone())]);
    served_up_to.store(u64::MAX, Ordering::SeqCst);
    let events = drain(&mut stream, &mut replica, 1).await;
    assert_eq!(
        shape(&events),
        vec![(true, new[1].clone()), (true, new[2].clone())]
    );
    assert_eq!(replica, chain_view(&chain, 0).await);
    assert!(
        replica.blocks.starts_with(&before.blocks),
        "a block the consumer had was replaced"
    );
    assert_eq!(replica.contents[&new[0].hash].1.len(), 1);
}

#[tokio::test]
async fn a_node_behind_our_whole_window_is_not_a_deep_reorg() {
    // The stream remembers blocks 12..=15; the node is far further back.
    // Nothing it shows contradicts what we applied, so this is no reorg at
    // all, let alone one deeper than max_depth.
    let max_depth = 3;
    let chain = chain_with(0, 15);
    let ours = chain.blocks();
    for start_height in [0, 10] {
        let (_, mut replica) = caught_up_stream(&chain, start_height, max_depth).await;
        assert_eq!(replica.top(), ours.last());
        let (source, served_up_to) = LaggingSource::new(&chain);
        let mut stream = CanonicalStream::new(
            source,
            replica.persisted_cursor(max_depth),
            start_height,
            max_depth,
        );
        // Just below the window; ten blocks back, deeper than max_depth (and,
        // for the second stream, below its start height); the node's first
        // block.
        for behind_at in [11, 5, 0] {
            served_up_to.store(behind_at, Ordering::SeqCst);
            waits(&mut stream, &replica, max_depth, &ours[behind_at as usize]).await;
        }
        served_up_to.store(u64::MAX, Ordering::SeqCst);
        waits(&mut stream, &replica, max_depth, &ours[15]).await;
        assert!(drain(&mut stream, &mut replica, 4).await.is_empty());
    }

    // The same with a chain that really got shorter: truncated below the
    // window, it is a strict prefix of what we applied, and the stream waits.
    let (mut stream, replica) = caught_up_stream(&chain, 0, max_depth).await;
    let top = replica.top().cloned().expect("caught up");
    chain.reorg(10);
    assert_eq!(chain.height(), 5);
    assert_node_is_behind(&replica, &chain);
    waits(&mut stream, &replica, max_depth, &chain.tip()).await;
    // Blocks of its own, below every height the stream remembers and then
    // at them, on a chain still shorter than ours: still no reorg...
    while chain.height() < 14 {
        chain.mine();
        waits(&mut stream, &replica, max_depth, &chain.tip()).await;
    }
    // ...until it is as long as ours: a fork 10 blocks deep.
    chain.mine();
    for _ in 0..2 {
        expect_too_deep(stream.next_batch(4).await, max_depth, &top);
        assert_cursor_is_the_replica(&stream, &replica, max_depth);
    }
}

#[tokio::test]
async fn a_truncated_chain_is_followed_once_it_is_as_long_as_ours() {
    let max_depth = 4;
    for depth in 1..=max_depth {
        for regrow in [depth, depth + 2] {
            for keep_transactions in [false, true] {
                let case = format!("depth {depth}, regrow {regrow}, keep {keep_transactions}");
                let chain = chain_with(0, 12);
                let (mut stream, mut replica) = caught_up_stream(&chain, 0, max_depth).await;
                let before = replica.clone();
                let dropped = replica.blocks[replica.blocks.len() - depth..].to_vec();
                let dropped_txids: Vec<String> = dropped
                    .iter()
                    .flat_map(|b| &replica.contents[&b.hash].1)
                    .map(|t| t.txid.clone())
                    .collect();
                assert_eq!(dropped_txids.len(), depth);

                if keep_transactions {
                    chain.reorg_keeping_transactions(depth);
                } else {
                    chain.reorg(depth);
                }
                // Only shorter: the stream waits, the replica keeps the
                // dropped blocks and their credits.
                assert_node_is_behind(&replica, &chain);
                waits(&mut stream, &replica, max_depth, &chain.tip()).await;
                assert_eq!(replica, before, "{case}");

                // The chain grows blocks of its own at heights we hold: a
                // shorter branch is waited for, one as long as ours is
                // followed.
                let mut grown = Vec::new();
                for _ in 1..depth {
                    grown.push(chain.mine());
                    waits(&mut stream, &replica, max_depth, &chain.tip()).await;
                }
                assert_eq!(replica, before, "{case}");
                grown.extend((grown.len()..regrow).map(|_| chain.mine()));
                let events = drain(&mut stream, &mut replica, 2).await;
                let expected: Vec<(bool, BlockRef)> = dropped
                    .iter()
                    .rev()
                    .map(|b| (false, b.clone()))
                    .chain(grown.iter().map(|b| (true, b.clone())))
                    .collect();
                assert_eq!(shape(&events), expected, "{case}");
                assert_eq!(replica, chain_view(&chain, 0).await, "{case}");

                let carried: Vec<String> = replica.contents[&grown[0].hash]
                    .1
                    .iter()
                    .map(|t| t.txid.clone())
                    .collect();
                if keep_transactions {
                    assert_eq!(
                        carried, dropped_txids,
                        "{case}: the moved payments arrive once"
                    );
                } else {
                    assert!(carried.is_empty(), "{case}");
                }
            }
        }
    }
}

#[tokio::test]
async fn a_reorg_on_a_truncated_chain_is_measured_from_what_we_applied() {
    // The stream did not follow the truncation, so the consumer still holds
    // the truncated blocks: a later reorg's depth counts them too.
    let max_depth = 3;
    for (truncated, reorged, too_deep) in [(2, 1, false), (max_depth, 1, true), (1, 2, false)] {
        let chain = chain_with(0, 10);
        let (mut stream, mut replica) = caught_up_stream(&chain, 0, max_depth).await;
        let top = replica.top().cloned().expect("caught up");
        chain.reorg(truncated);
        waits(&mut stream, &replica, max_depth, &chain.tip()).await;

        // Back to our height, on a branch of its own.
        reorg_and_mine(&chain, reorged, truncated + reorged);
        let stale = replica.stale_depth(&chain_view(&chain, 0).await);
        assert_eq!(stale, truncated + reorged);
        if too_deep {
            expect_too_deep(stream.next_batch(4).await, max_depth, &top);
            assert_cursor_is_the_replica(&stream, &replica, max_depth);
        } else {
            let events = drain(&mut stream, &mut replica, 4).await;
            let disconnects = events.len() - connects(&events);
            assert_eq!(disconnects, stale);
            assert_eq!(replica, chain_view(&chain, 0).await);
        }
    }
}

#[tokio::test]
async fn a_chain_getting_shorter_is_followed_once_as_long_as_ours() {
    let max_depth = 5;
    let chain = chain_with(0, 12);
    let (mut stream, mut replica) = caught_up_stream(&chain, 0, max_depth).await;

    // The top three blocks vanish and nothing replaces them: the node may
    // just be behind, so the stream waits.
    let dropped = chain.reorg(3);
    assert_eq!(dropped.len(), 3);
    assert!(stream.next_batch(10).await.expect("waits").is_empty());
    assert_cursor_is_the_replica(&stream, &replica, max_depth);
    assert_node_is_behind(&replica, &chain);

    // Blocks of its own in their place: waited for while the branch is
    // shorter than ours, followed once it is as long.
    for (i, address) in ADDRESSES.iter().enumerate() {
        if i == 2 {
            assert!(stream.next_batch(10).await.expect("waits").is_empty());
            assert_cursor_is_the_replica(&stream, &replica, max_depth);
        }
        chain.pay(address, AssetId::Known(Asset::Usdt), 11);
        chain.mine();
    }
    let batch = stream.next_batch(10).await.expect("followed");
    let heights: Vec<(bool, u64)> = batch
        .iter()
        .map(|e| (matches!(e, ChainEvent::Connected { .. }), e.block().height))
        .collect();
    assert_eq!(
        heights,
        vec![
            (false, 12),
            (false, 11),
            (false, 10),
            (true, 10),
            (true, 11),
            (true, 12)
        ]
    );
    for event in &batch {
        replica.apply(event);
    }
    assert_eq!(replica, chain_view(&chain, 0).await);
    assert!(stream.next_batch(10).await.expect("caught up").is_empty());

    // Two blocks replaced by one that carries their transactions, then one
    // more to reach our height.
    chain.reorg_keeping_transactions(2);
    let carrier = chain.mine();
    assert!(chain.height() < stream.cursor_tip().expect("caught up").height);
    let (errors, grown) = converge(&chain, &mut stream, &mut replica, || 10).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(grown, 1);
    assert_eq!(replica, chain_view(&chain, 0).await);
    assert_eq!(
        replica.contents[&carrier.hash].1.len(),
        2,
        "the moved payments arrive once"
    );

    // A tip at the cursor's height but on another branch.
    reorg_and_mine(&chain, 2, 2);
    assert_eq!(
        chain.height(),
        stream.cursor_tip().expect("caught up").height
    );
    let errors = catch_up(&chain, &mut stream, &mut replica, || 1).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, chain_view(&chain, 0).await);
}

#[tokio::test]
async fn chain_shrinking_below_a_lagging_cursor_is_followed() {
    // The stream is half way through catching up when the node drops back
    // below what it has already connected: it waits, and follows the chain
    // once it grows blocks of its own.
    let max_depth = 5;
    let chain = chain_with(0, 12);
    let mut stream = CanonicalStream::new(chain.unfiltered_source(), Vec::new(), 0, max_depth);
    let mut replica = Replica::empty(0);
    for _ in 0..3 {
        for event in &stream.next_batch(2).await.expect("catching up") {
            replica.apply(event);
        }
    }
    assert_eq!(replica.top().expect("connected").height, 5);

    chain.reorg(10);
    assert_eq!(chain.height(), 2);
    let before = replica.clone();
    let errors = catch_up(&chain, &mut stream, &mut replica, || 2).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, before);
    assert_node_is_behind(&replica, &chain);
    assert_cursor_is_the_replica(&stream, &replica, max_depth);

    chain.mine_n(4);
    let errors = catch_up(&chain, &mut stream, &mut replica, || 2).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, chain_view(&chain, 0).await);
}

#[tokio::test]
async fn small_reorg_after_a_shrinking_reorg_is_followed() {
    // A reorg of max_depth blocks replaced by a single one (followed once
    // the branch is as long as ours), then another reorg of up to max_depth:
    // each is within max_depth of what the consumer holds, so both are
    // followed, just as they are after a restart.
    let max_depth = 3;
    for second in 1..=max_depth {
        let chain = chain_with(0, 10);
        let (mut stream, mut replica) = caught_up_stream(&chain, 0, max_depth).await;

        reorg_and_mine(&chain, max_depth, 1);
        let (errors, _) = converge(&chain, &mut stream, &mut replica, || 4).await;
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(replica, chain_view(&chain, 0).await);
        assert_cursor_is_the_replica(&stream, &replica, max_depth);

        reorg_and_mine(&chain, second, second);
        let events = drain(&mut stream, &mut replica, 4).await;
        assert_eq!(events.len() - connects(&events), second);
        assert_eq!(
            replica,
            chain_view(&chain, 0).await,
            "second reorg {second}"
        );
    }
}

/// A backend that is behind on a branch it has not left: it serves `ours`
/// up to the fork, then `stale`, a shorter branch the network orphaned.
#[derive(Debug)]
struct StaleBackend {
    ours: ScriptedSource,
    stale: ScriptedChain,
    fork_height: u64,
}

impl StaleBackend {
    fn source(&self, height: u64) -> ScriptedSource {
        if height <= self.fork_height {
            self.ours.clone()
        } else {
            self.stale.unfiltered_source()
        }
    }
}

#[async_trait]
impl BlockSource for StaleBackend {
    fn network(&self) -> Network {
        self.ours.network()
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        Ok(self.stale.tip())
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        self.stale.unfiltered_source().final_height().await
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        self.source(height).block(height).await
    }
}

/// A load balancer over two backends that sends each call to one of them,
/// as round robin shared with other clients does: by a fixed pseudo-random
/// sequence, so no call of the stream always meets the same backend.
#[derive(Debug)]
struct Alternating<A, B> {
    first: A,
    second: B,
    state: AtomicU64,
}

impl<A: BlockSource, B: BlockSource> Alternating<A, B> {
    fn new(first: A, second: B) -> Self {
        Alternating {
            first,
            second,
            state: AtomicU64::new(0x2545_f491_4f6c_dd1d),
        }
    }

    fn to_first(&self) -> bool {
        let mut x = self.state.load(Ordering::SeqCst);
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state.store(x, Ordering::SeqCst);
        x & 1 == 0
    }
}

#[async_trait]
impl<A: BlockSource, B: BlockSource> BlockSource for Alternating<A, B> {
    fn network(&self) -> Network {
        self.first.network()
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        if self.to_first() {
            self.first.tip().await
        } else {
            self.second.tip().await
        }
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        if self.to_first() {
            self.first.final_height().await
        } else {
            self.second.final_height().await
        }
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        if self.to_first() {
            self.first.block(height).await
        } else {
            self.second.block(height).await
        }
    }
}

#[tokio::test]
async fn a_backend_behind_us_on_a_stale_branch_never_disconnects_our_blocks() {
    // Bitcoin-like: final at 3 confirmations, so blocks 9..=11 of 0..=14 are
    // final and credited. A backend behind a load balancer (or restored
    // from a snapshot) still sits on a branch that forked off after block 9
    // and that the network orphaned: 2 blocks, tip 11, lower than ours.
    // Following it would disconnect 10..=14, reverse their final credits,
    // and credit them again when the next answer comes from the good one.
    let max_depth = 6;
    let chain = chain_with(0, 14);
    chain.set_confirmations(3);
    let (_, mut replica) = caught_up_stream(&chain, 0, max_depth).await;
    let ours = chain.blocks();
    let fork_height = 9;
    let stale = ScriptedChain::continuing(Network::Ethereum, &ours[fork_height as usize], 7);
    stale.mine();
    assert_eq!(stale.height(), 11);
    let backend = || StaleBackend {
        ours: chain.unfiltered_source(),
        stale: stale.clone(),
        fork_height,
    };

    // The stale backend alone: waited for, at every batch size.
    let mut stream =
        CanonicalStream::new(backend(), replica.persisted_cursor(max_depth), 0, max_depth);
    waits(&mut stream, &replica, max_depth, &stale.tip()).await;

    // A branch as long as ours is a reorg like any other, and followed.
    let rival = ScriptedChain::continuing(Network::Ethereum, &ours[fork_height as usize], 8);
    rival.mine_n(4);
    assert_eq!(rival.tip().height, 14);
    let mut followed = replica.clone();
    let mut stream = CanonicalStream::new(
        StaleBackend {
            ours: chain.unfiltered_source(),
            stale: rival.clone(),
            fork_height,
        },
        followed.persisted_cursor(max_depth),
        0,
        max_depth,
    );
    let events = drain(&mut stream, &mut followed, 10).await;
    assert_eq!(events.len() - connects(&events), 5);
    assert_eq!(followed.top(), Some(&rival.tip()));

    // Both behind a balancer that alternates per call, while the good one
    // mines on: only the good chain's new blocks are connected, and none
    // is ever disconnected.
    let mut stream = CanonicalStream::new(
        Alternating::new(chain.unfiltered_source(), backend()),
        replica.persisted_cursor(max_depth),
        0,
        max_depth,
    );
    for round in 0..40 {
        if round % 5 == 4 {
            chain.pay(ADDRESSES[round % 3], AssetId::Known(Asset::Usdt), 9);
            chain.mine();
        }
        let batch = match stream.next_batch(1 + round % 3).await {
            Ok(batch) => batch,
            Err(e) => {
                assert!(e.is_transient(), "round {round}: {e}");
                continue;
            }
        };
        for event in &batch {
            assert!(
                matches!(event, ChainEvent::Connected { .. }),
                "round {round}: the stale backend made the stream disconnect {}",
                event.block()
            );
            replica.apply(event);
        }
        assert_eq!(stream.cursor_tip(), replica.top());
    }
    // The final height never names a block of the stale branch.
    for _ in 0..4 {
        if let Ok(Some(height)) = stream.confirmed_final_height().await {
            assert!(replica.blocks.iter().any(|b| b.height == height));
        }
    }
    drain_alternating(&mut stream, &mut replica, &chain.tip()).await;
    assert_eq!(replica, chain_view(&chain, 0).await);
}

/// Polls until the cursor is at `tip`, applying every event (connects
/// only); transient errors are retried.
async fn drain_alternating<S: BlockSource>(
    stream: &mut CanonicalStream<S>,
    replica: &mut Replica,
    tip: &BlockRef,
) {
    for _ in 0..MAX_POLLS {
        if stream.cursor_tip() == Some(tip) {
            return;
        }
        match stream.next_batch(4).await {
            Ok(batch) => {
                for event in &batch {
                    assert!(matches!(event, ChainEvent::Connected { .. }), "{event:?}");
                    replica.apply(event);
                }
            }
            Err(e) => assert!(e.is_transient(), "{e}"),
        }
    }
    panic!("the stream did not reach {tip} within {MAX_POLLS} polls");
}

// ---------------------------------------------------------------------------
// 5. Transient source errors.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn transient_source_errors_surface_and_the_stream_resumes() {
    let max_depth = 4;
    let chain = chain_with(0, 6);
    let mut stream = CanonicalStream::new(chain.unfiltered_source(), Vec::new(), 0, max_depth);
    let mut replica = Replica::empty(0);

    chain.fail_next(3);
    for _ in 0..3 {
        match stream.next_batch(3).await {
            Err(e @ StreamError::Source(SourceError::Transient(_))) => assert!(e.is_transient()),
            other => panic!("expected a transient source error, got {other:?}"),
        }
        assert_eq!(stream.cursor_tip(), None);
    }
    let errors = catch_up(&chain, &mut stream, &mut replica, || 3).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, chain_view(&chain, 0).await);

    // Failures while a reorg is pending.
    reorg_and_mine(&chain, 3, 4);
    for failures in 1..=4 {
        chain.fail_next(failures);
        let errors = catch_up(&chain, &mut stream, &mut replica, || 2).await;
        assert_eq!(errors.len(), failures as usize);
        assert!(errors.iter().all(StreamError::is_transient));
        assert_eq!(replica, chain_view(&chain, 0).await);
        reorg_and_mine(&chain, 2, 3);
    }
}

#[tokio::test]
async fn node_outage_mid_batch_loses_and_duplicates_nothing() {
    // The node fails exactly one block() call, at every position of a
    // forward batch and of a reorg walk.
    let max_depth = 6;
    for failing_call in 1..=14 {
        for reorg_depth in [0, 2, 5] {
            let chain = chain_with(0, 5);
            let (mut stream, mut replica) =
                meddled_stream(&chain, 0, max_depth, move |call, chain| {
                    if call == failing_call {
                        chain.fail_next(1);
                    }
                })
                .await;
            chain.mine_n(4);
            reorg_and_mine(&chain, reorg_depth, reorg_depth + 3);

            let errors = catch_up(&chain, &mut stream, &mut replica, || 6).await;
            assert!(errors.len() <= 1, "{errors:?}");
            assert!(errors
                .iter()
                .all(|e| matches!(e, StreamError::Source(SourceError::Transient(_)))));
            assert_eq!(
                replica,
                chain_view(&chain, 0).await,
                "failing call {failing_call}, reorg depth {reorg_depth}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 6. Restarting from a persisted cursor.
// ---------------------------------------------------------------------------

/// Stops the consumer's stream, lets `while_down` change the chain, and
/// starts a new stream from the persisted cursor.
async fn restart(
    chain: &ScriptedChain,
    replica: &Replica,
    max_depth: usize,
    while_down: impl FnOnce(&ScriptedChain),
) -> CanonicalStream<ScriptedSource> {
    while_down(chain);
    CanonicalStream::new(
        chain.unfiltered_source(),
        replica.persisted_cursor(max_depth),
        replica.start_height,
        max_depth,
    )
}

#[tokio::test]
async fn restart_from_a_persisted_cursor_continues() {
    let max_depth = 4;
    let chain = chain_with(500, 20);
    let mut stream = CanonicalStream::new(chain.unfiltered_source(), Vec::new(), 500, max_depth);
    let mut replica = Replica::empty(500);
    for _ in 0..4 {
        for event in &stream.next_batch(3).await.expect("catching up") {
            replica.apply(event);
        }
    }
    drop(stream);

    let mut stream = restart(&chain, &replica, max_depth, |chain| {
        chain.mine_n(3);
    })
    .await;
    assert_eq!(stream.cursor_tip(), replica.top());
    let errors = catch_up(&chain, &mut stream, &mut replica, || 3).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(replica, chain_view(&chain, 500).await);

    // Nothing changed while down: nothing to do.
    let mut stream = restart(&chain, &replica, max_depth, |_| {}).await;
    assert!(stream.next_batch(3).await.expect("caught up").is_empty());
}

#[tokio::test]
async fn restart_follows_a_reorg_that_happened_while_down() {
    let max_depth = 4;
    for depth in 1..=max_depth {
        for replacement in [0, 1, depth, depth + 3] {
            for keep_transactions in [false, true] {
                let chain = chain_with(0, 15);
                let (stream, mut replica) = caught_up_stream(&chain, 0, max_depth).await;
                drop(stream);

                let mut stream = restart(&chain, &replica, max_depth, |chain| {
                    if keep_transactions {
                        chain.reorg_keeping_transactions(depth);
                        chain.mine_n(replacement);
                    } else {
                        reorg_and_mine(chain, depth, replacement);
                    }
                })
                .await;
                let case =
                    format!("depth {depth}, replacement {replacement}, keep {keep_transactions}");
                // Shorter while down: the restarted stream waits for the
                // node, then follows it once it is as long as ours.
                let (errors, grown) = converge(&chain, &mut stream, &mut replica, || 2).await;
                assert_eq!(grown, depth.saturating_sub(replacement), "{case}");
                assert!(errors.is_empty(), "{case}: {errors:?}");
                assert_eq!(replica, chain_view(&chain, 0).await, "{case}");
            }
        }
    }
}

#[tokio::test]
async fn restart_after_a_too_deep_reorg_while_down_stops() {
    let max_depth = 4;
    let chain = chain_with(0, 15);
    let (stream, replica) = caught_up_stream(&chain, 0, max_depth).await;
    drop(stream);
    let top = replica.top().cloned().expect("caught up");

    let mut stream = restart(&chain, &replica, max_depth, |chain| {
        reorg_and_mine(chain, max_depth + 1, max_depth + 2);
    })
    .await;
    expect_too_deep(stream.next_batch(5).await, max_depth, &top);
    assert_eq!(stream.cursor_tip(), Some(&top));
}

//! Blocks handed out without the traces of some of their transactions.
//!
//! A node that cannot trace a transaction (its tracer ran out of time, its
//! state is pruned, the provider has no `debug_*`) must not hold back the
//! block's tokens and top-level ETH: those go out at once. What contracts
//! sent in the untraced transactions is asked again on later steps. Once
//! the traces come and show ETH to a watched address, the block is
//! reported through `missed_from` and read again with those traces. After
//! `retry_for` without traces, the block goes to the operator: a named
//! alert and a count, never a silent stall or a silent miss. The wait is
//! kept in memory: blocks still waiting when the source is dropped (the
//! watcher stops or loses its lease) are given up the same way here, and
//! the watcher has recorded the lowest of them in the store before the
//! block itself (`TraceBacklog::lowest`), so after a crash, a restart or
//! another instance taking over, they are read again from there.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use alloy_primitives::B256;
use paywatch_core::WatchRead;
use tracing::{error, info, warn};

use crate::scan::{pays_internally, trace_failure};
use crate::types::TxTrace;

/// The name operators alert on (see deploy/prometheus-alerts.yml).
pub(crate) const ALERT: &str = "eth_traces_unavailable";

/// Blocks waited on at most; past it the oldest goes to the operator at
/// once, so a provider that never traces cannot grow memory without end.
const MOST_WAITING: usize = 512;

/// The first retry after this, doubling up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(1);
const LONGEST_PAUSE: Duration = Duration::from_secs(60);

/// Retries started per step at most: a step must stay short.
pub(crate) const RETRIES_PER_STEP: usize = 4;

/// What the operator and metrics see of the untraced blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceBacklog {
    /// Blocks whose traces are still asked for.
    pub waiting: u64,
    /// Blocks given up on since start: each was an `eth_traces_unavailable`
    /// alert, and ETH sent by contracts in them may be unseen.
    pub given_up: u64,
    /// The latest block given up on.
    pub last_given_up: Option<GivenUp>,
    /// The lowest block still waited on, or whose recovered traces are not
    /// yet queued as a rescan: where a restart must read again from.
    pub lowest: Option<u64>,
}

/// A block whose contract-sent ETH paywatch could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenUp {
    pub height: u64,
    pub hash: String,
    /// The transactions without a trace.
    pub transactions: Vec<String>,
    pub why: String,
}

#[derive(Debug)]
struct Waiting {
    hash: B256,
    /// Every transaction of the block, in order: a trace answer is checked
    /// against them.
    txs: Vec<B256>,
    /// Positions in `txs` still without a trace.
    untraced: Vec<usize>,
    why: String,
    since: Instant,
    next: Instant,
    pause: Duration,
}

#[derive(Debug, Default)]
struct State {
    waiting: BTreeMap<u64, Waiting>,
    /// Traces got on a retry, by block hash, for the block's next reading.
    recovered: HashMap<B256, Vec<TxTrace>>,
    missed: Option<u64>,
    given_up: u64,
    last_given_up: Option<GivenUp>,
}

#[derive(Debug)]
pub(crate) struct Untraced {
    retry_for: Duration,
    state: Mutex<State>,
}

/// One block to trace again, with its transactions to check the answer by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) height: u64,
    pub(crate) hash: B256,
    pub(crate) txs: Vec<B256>,
}

impl Untraced {
    pub(crate) fn new(retry_for: Duration) -> Untraced {
        Untraced {
            retry_for,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The block at `height` went out with `untraced` (positions in `txs`)
    /// lacking a trace.
    pub(crate) fn note(
        &self,
        height: u64,
        hash: B256,
        txs: Vec<B256>,
        untraced: Vec<usize>,
        why: String,
    ) {
        if untraced.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut s = self.lock();
        if s.waiting.get(&height).is_some_and(|w| w.hash == hash) {
            return; // read again (a rescan) while still waited on
        }
        warn!(
            height,
            block = %hash,
            transactions = untraced.len(),
            %why,
            "block read without the traces of some transactions: its tokens and \
             top-level ETH count now, ETH sent by contracts in them is asked for again"
        );
        s.waiting.insert(
            height,
            Waiting {
                hash,
                txs,
                untraced,
                why,
                since: now,
                next: now + FIRST_PAUSE,
                pause: FIRST_PAUSE,
            },
        );
        while s.waiting.len() > MOST_WAITING {
            let Some((h, w)) = s.waiting.pop_first() else {
                break;
            };
            give_up(&mut s, h, w, "too many blocks waiting for traces");
        }
    }

    /// Blocks whose next try is due, oldest first.
    pub(crate) fn due(&self) -> Vec<Due> {
        let now = Instant::now();
        self.lock()
            .waiting
            .iter()
            .filter(|(_, w)| w.next <= now)
            .take(RETRIES_PER_STEP)
            .map(|(h, w)| Due {
                height: *h,
                hash: w.hash,
                txs: w.txs.clone(),
            })
            .collect()
    }

    /// The block at `due.height` is no longer `due.hash`: the new block
    /// there is read as any other.
    pub(crate) fn left_chain(&self, due: &Due) {
        let mut s = self.lock();
        if s.waiting
            .get(&due.height)
            .is_some_and(|w| w.hash == due.hash)
        {
            s.waiting.remove(&due.height);
            s.recovered.remove(&due.hash);
        }
    }

    /// What a retry of `due` got: the block's traces, or why not.
    pub(crate) fn retried(
        &self,
        due: &Due,
        answer: Result<Vec<TxTrace>, String>,
        watch: &WatchRead<'_>,
    ) {
        let mut s = self.lock();
        let Some(w) = s
            .waiting
            .get_mut(&due.height)
            .filter(|w| w.hash == due.hash)
        else {
            return;
        };
        let traces = answer.and_then(|t| fits(&w.txs, t));
        let mut paid = false;
        let mut why = None;
        match &traces {
            Ok(traces) => {
                w.untraced.retain(|&i| match trace_failure(&traces[i]) {
                    Some(failed) => {
                        why = Some(failed);
                        true
                    }
                    None => {
                        paid |= pays_internally(w.txs[i], &traces[i], watch);
                        false
                    }
                });
            }
            Err(failed) => why = Some(failed.clone()),
        }
        if let Some(why) = why {
            w.why = why;
        }
        let (done, expired) = (w.untraced.is_empty(), w.since.elapsed() >= self.retry_for);
        w.pause = (w.pause * 2).min(LONGEST_PAUSE);
        w.next = Instant::now() + w.pause;
        if paid {
            info!(
                height = due.height,
                block = %due.hash,
                "traces came back and show ETH sent by a contract to a watched address; \
                 the block is read again"
            );
            if let Ok(traces) = traces {
                merge_into(s.recovered.entry(due.hash).or_default(), traces);
            }
            s.missed = Some(s.missed.map_or(due.height, |m| m.min(due.height)));
        }
        if done {
            s.waiting.remove(&due.height);
        } else if expired {
            let w = s.waiting.remove(&due.height).expect("looked up above");
            give_up(&mut s, due.height, w, "no traces within the retry bound");
        }
    }

    /// Traces got on a retry of the block `hash`, for reading it again.
    pub(crate) fn take_recovered(&self, hash: &B256) -> Option<Vec<TxTrace>> {
        self.lock().recovered.remove(hash)
    }

    pub(crate) fn missed_from(&self) -> Option<u64> {
        self.lock().missed
    }

    pub(crate) fn missed_queued(&self, from: u64) {
        let mut s = self.lock();
        // A lower height noted meanwhile stays.
        if s.missed == Some(from) {
            s.missed = None;
        }
    }

    /// Nobody will ask for these traces again (the watcher stopped, or
    /// lost its lease to another instance, which does not know of them):
    /// each waiting block goes to the operator now rather than silently.
    pub(crate) fn abandon(&self, because: &str) {
        let mut s = self.lock();
        while let Some((h, w)) = s.waiting.pop_first() {
            give_up(&mut s, h, w, because);
        }
    }

    pub(crate) fn backlog(&self) -> TraceBacklog {
        let s = self.lock();
        let waiting_from = s.waiting.keys().next().copied();
        TraceBacklog {
            waiting: s.waiting.len() as u64,
            given_up: s.given_up,
            last_given_up: s.last_given_up.clone(),
            lowest: match (waiting_from, s.missed) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// The answer as the block's traces, one per transaction in order; why not
/// when it cannot be.
pub(crate) fn fits(txs: &[B256], traces: Vec<TxTrace>) -> Result<Vec<TxTrace>, String> {
    if traces.len() != txs.len() {
        return Err(format!(
            "the node traced {} transactions of {}",
            traces.len(),
            txs.len()
        ));
    }
    if let Some((tx, t)) = txs
        .iter()
        .zip(&traces)
        .find(|(tx, t)| t.tx_hash.is_some_and(|h| h != **tx))
    {
        return Err(format!(
            "the trace of transaction {tx:#x} names transaction {:#x}",
            t.tx_hash.unwrap_or_default()
        ));
    }
    Ok(traces)
}

/// `into` gets each of `from`'s traces that succeeded where its own did not.
pub(crate) fn merge_into(into: &mut Vec<TxTrace>, from: Vec<TxTrace>) {
    if into.len() != from.len() {
        *into = from;
        return;
    }
    for (mine, theirs) in into.iter_mut().zip(from) {
        if trace_failure(mine).is_some() && trace_failure(&theirs).is_none() {
            *mine = theirs;
        }
    }
}

fn give_up(s: &mut State, height: u64, w: Waiting, because: &str) {
    let transactions: Vec<String> = w
        .untraced
        .iter()
        .map(|&i| format!("{:#x}", w.txs[i]))
        .collect();
    error!(
        alert = ALERT,
        height,
        block = %w.hash,
        transactions = %transactions.join(","),
        why = %w.why,
        waited_secs = w.since.elapsed().as_secs(),
        "{because}: ETH that contracts sent in these transactions is not seen. Check them \
         by hand (a block explorer's internal transactions, or `paywatch extract` with the \
         node's answers), and request a rescan from this height once the node can trace it"
    );
    s.recovered.remove(&w.hash);
    s.given_up += 1;
    s.last_given_up = Some(GivenUp {
        height,
        hash: format!("{:#x}", w.hash),
        transactions,
        why: w.why,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::b256;
    use paywatch_core::{Network, WatchSet};
    use serde_json::json;

    const TX: B256 = b256!("1111111111111111111111111111111111111111111111111111111111111111");
    const BLOCK: B256 = b256!("2222222222222222222222222222222222222222222222222222222222222222");
    const PAYEE: &str = "0x00000000000000000000000000000000000000aa";

    fn watch() -> WatchSet {
        let w = WatchSet::new(Network::Ethereum).keyed(crate::scan::watch_key());
        w.extend([PAYEE]);
        w
    }

    fn traced(to: &str) -> Vec<TxTrace> {
        let contract = "0x00000000000000000000000000000000000000c0";
        vec![serde_json::from_value(json!({
            "txHash": TX,
            "result": { "type": "CALL", "from": "0x00000000000000000000000000000000000000b0",
                        "to": contract, "value": "0x0",
                        "calls": [{ "type": "CALL", "from": contract, "to": to, "value": "0x5" }] }
        }))
        .unwrap()]
    }

    fn waiting_block(u: &Untraced) -> Due {
        u.note(7, BLOCK, vec![TX], vec![0], "execution timeout".into());
        u.lock().waiting.get_mut(&7).unwrap().next = Instant::now();
        u.due().pop().unwrap()
    }

    #[test]
    fn traces_that_come_back_without_a_watched_payment_end_the_wait_quietly() {
        let u = Untraced::new(Duration::from_secs(600));
        let due = waiting_block(&u);
        let other = "0x00000000000000000000000000000000000000ee";
        u.retried(&due, Ok(traced(other)), &watch().read());
        assert_eq!(u.backlog(), TraceBacklog::default());
        assert_eq!(u.missed_from(), None);
        assert!(u.take_recovered(&BLOCK).is_none());
    }

    #[test]
    fn traces_that_come_back_with_a_watched_payment_report_the_block_missed() {
        let u = Untraced::new(Duration::from_secs(600));
        let due = waiting_block(&u);
        u.retried(&due, Ok(traced(PAYEE)), &watch().read());
        assert_eq!(u.missed_from(), Some(7));
        assert_eq!(u.backlog().waiting, 0);
        u.missed_queued(7);
        assert_eq!(u.missed_from(), None);
        assert_eq!(u.take_recovered(&BLOCK).map(|t| t.len()), Some(1));
    }

    #[test]
    fn a_block_still_untraceable_past_the_bound_is_given_up_by_name() {
        let u = Untraced::new(Duration::ZERO);
        let due = waiting_block(&u);
        u.retried(&due, Err("missing trie node".into()), &watch().read());
        let b = u.backlog();
        assert_eq!((b.waiting, b.given_up), (0, 1));
        let g = b.last_given_up.unwrap();
        assert_eq!(g.height, 7);
        assert_eq!(g.transactions, vec![format!("{TX:#x}")]);
        assert_eq!(g.why, "missing trie node");
        assert_eq!(u.missed_from(), None);
    }

    #[test]
    fn blocks_still_waiting_when_the_source_goes_are_given_up_by_name() {
        let u = Untraced::new(Duration::from_secs(600));
        waiting_block(&u);
        u.abandon("the watcher stopped");
        let b = u.backlog();
        assert_eq!((b.waiting, b.given_up), (0, 1));
        assert_eq!(b.last_given_up.map(|g| g.height), Some(7));
    }

    #[test]
    fn an_answer_for_another_number_of_transactions_is_no_trace() {
        let u = Untraced::new(Duration::from_secs(600));
        let due = waiting_block(&u);
        let mut two = traced(PAYEE);
        two.extend(traced(PAYEE));
        u.retried(&due, Ok(two), &watch().read());
        assert_eq!(u.missed_from(), None);
        assert_eq!(u.backlog().waiting, 1);
    }
}

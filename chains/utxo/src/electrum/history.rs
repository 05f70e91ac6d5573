//! Each watched address's history, read again only when the server's
//! status for it says it changed, and the snapshot: the tip whose whole
//! chain the histories describe.
//!
//! An Electrum server's status for an address is a hash of its whole
//! history, heights included: the same status, the same history. It comes
//! with each subscription and in a notification whenever it changes, so a
//! history is read once, then again only when the status the server gives
//! differs from the one the history held hashes to. A new tip alone reads
//! nothing: ElectrumX charges each request to the session (slowed past
//! 1,000, closed at 10,000), and thousands of addresses read again on each
//! block add up to that within minutes. After a reconnect, subscribing
//! again gives every status, and only those that moved are read.
//!
//! ElectrumX sends a block's header notification first and then, one by
//! one, the statuses it changed (session.py, `_notify_inner`), so a tip may
//! be seen before its news. Three things close that gap: on a new tip the
//! source waits for one round trip before it collects the news; addresses
//! with a transaction in the mempool (what a block usually confirms) are
//! read again on every new tip whatever their status; and news that comes
//! later still, placing a transaction in a block already handed out, is
//! kept as `missed_from` for the watcher to read that block again.

use std::sync::atomic::Ordering;

use bitcoin::hashes::{sha256, Hash as _};
use bitcoin::hex::DisplayHex as _;
use bitcoin::{ScriptBuf, Txid};
use electrum_client::{ElectrumApi as _, GetHistoryRes, Param, ToElectrumScriptHash};
use tracing::{debug, warn};

use super::ask::Call;
use super::chain::Tip;
use super::conn::Conn;
use super::{ElectrumError, Inner, State, ATTEMPTS};

/// An address's status as an Electrum server gives it: `None` for no history.
pub(super) type Status = Option<[u8; 32]>;

pub(super) struct Watched {
    pub(super) script: ScriptBuf,
    /// (txid, height): 0 in the mempool, -1 in it with unconfirmed inputs.
    /// `None` until first read.
    pub(super) history: Option<Vec<(Txid, i32)>>,
    /// The status the server last gave; `None` until it gave one.
    pub(super) status: Option<Status>,
}

impl Watched {
    pub(super) fn new(script: ScriptBuf) -> Watched {
        Watched {
            script,
            history: None,
            status: None,
        }
    }

    /// Takes in a status from the server; true if the history held is not
    /// the one it describes. No history at all needs no reading.
    pub(super) fn heard(&mut self, status: Status) -> bool {
        self.status = Some(status);
        if status.is_none() {
            self.history = Some(Vec::new());
            return false;
        }
        self.history.as_deref().map(status_of) != Some(status)
    }

    /// Whether a transaction of the history is in the mempool: a new block
    /// may have confirmed it.
    fn has_unconfirmed(&self) -> bool {
        self.history
            .as_ref()
            .is_some_and(|h| h.iter().any(|(_, height)| *height <= 0))
    }
}

impl State {
    /// Marks for reading the histories that name `txid`: they placed it
    /// where the server no longer proves it to be.
    pub(super) fn read_again_holding(&mut self, txid: &Txid) {
        for (i, w) in self.watched.iter().enumerate() {
            if w.history
                .as_ref()
                .is_some_and(|h| h.iter().any(|(t, _)| t == txid))
            {
                self.dirty.insert(i);
            }
        }
    }
}

/// The status of `history` as ElectrumX computes it: the SHA-256 of
/// `txid:height:` for each entry in order, none for an empty history.
pub(super) fn status_of(history: &[(Txid, i32)]) -> Status {
    if history.is_empty() {
        return None;
    }
    let text: String = history.iter().map(|(t, h)| format!("{t}:{h}:")).collect();
    Some(sha256::Hash::hash(text.as_bytes()).to_byte_array())
}

impl Inner {
    /// Brings the histories in line with the server's current tip: takes in
    /// new addresses, subscribes them, and reads again the histories whose
    /// status changed, and on a new tip also those with transactions in the
    /// mempool. Returns the snapshot.
    pub(super) fn sync(&self, conn: &mut Conn, st: &mut State) -> Result<Tip, ElectrumError> {
        for _ in 0..ATTEMPTS {
            let before = self.best(conn)?;
            self.take_in_addresses(st)?;
            self.subscribe(conn, st)?;
            let moved = st.snapshot.as_ref().is_none_or(|s| s.hash != before.hash);
            if moved {
                // The tip's news follow its header: give them a round trip.
                conn.client
                    .ping()
                    .map_err(|e| self.error("server.ping", e))?;
            }
            self.collect_notifications(conn, st)?;
            let mut todo: Vec<usize> = st.dirty.iter().copied().collect();
            if moved {
                st.snapshot = None;
                todo.extend(
                    st.watched
                        .iter()
                        .enumerate()
                        .filter(|(i, w)| w.has_unconfirmed() && !st.dirty.contains(i))
                        .map(|(i, _)| i),
                );
            }
            // Nothing asked since `before`: the histories describe it as they are.
            let settled = todo.is_empty() || {
                if let Err(e) = self.read_histories(conn, st, &todo) {
                    st.snapshot = None;
                    return Err(e);
                }
                self.best(conn)?.hash == before.hash
            };
            if settled {
                if moved {
                    st.prune_txs();
                    debug!(url = %self.url, tip = %before.hash, height = before.height,
                        read = todo.len(), addresses = st.watched.len(), "histories follow the new tip");
                }
                st.snapshot = Some(before.clone());
                return Ok(before);
            }
            // Some histories may be of the old chain, some of the new: the
            // next round reads what the new tip's news name.
            st.snapshot = None;
        }
        Err(self.unsettled("reading address histories"))
    }

    pub(super) fn read_histories(
        &self,
        conn: &mut Conn,
        st: &mut State,
        todo: &[usize],
    ) -> Result<(), ElectrumError> {
        const METHOD: &str = "blockchain.scripthash.get_history";
        for chunk in todo.chunks(self.batch_size()) {
            let calls: Vec<Call> = chunk
                .iter()
                .map(|&i| Call {
                    method: METHOD,
                    params: vec![Param::String(
                        st.watched[i]
                            .script
                            .to_electrum_scripthash()
                            .as_slice()
                            .to_lower_hex_string(),
                    )],
                })
                .collect();
            for (&i, answer) in chunk.iter().zip(self.ask(conn, &calls)?) {
                let history: Vec<GetHistoryRes> =
                    serde_json::from_value(answer?).map_err(|e| self.bad(METHOD, e.to_string()))?;
                let history: Vec<(Txid, i32)> =
                    history.into_iter().map(|h| (h.tx_hash, h.height)).collect();
                self.note_missed(st, i, &history);
                st.watched[i].history = Some(history);
                st.dirty.remove(&i);
            }
        }
        Ok(())
    }

    /// A transaction that `history` places in a block already handed out,
    /// and the history held before did not: that block went out without
    /// it, and must be read again.
    fn note_missed(&self, st: &mut State, i: usize, history: &[(Txid, i32)]) {
        // An address read for the first time: the watcher reads the blocks
        // since it was issued again itself.
        let Some(before) = st.watched[i].history.as_ref() else {
            return;
        };
        let Some((handed, _)) = st.handed else {
            return;
        };
        let missed = history
            .iter()
            .filter(|entry| !before.contains(entry))
            .filter_map(|(txid, h)| {
                u64::try_from(*h)
                    .ok()
                    .filter(|h| (1..=handed).contains(h))
                    .map(|h| (txid, h))
            })
            .min_by_key(|(_, h)| *h);
        if let Some((txid, height)) = missed {
            warn!(url = %self.url, %txid, height, handed,
                "the server placed a transaction in a block already read; it is read again");
            self.missed.fetch_min(height, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bitcoin::BlockHash;
    use paywatch_core::{BlockSource as _, Network, WatchSet};

    use super::*;
    use crate::electrum::{ElectrumConfig, ElectrumSource};
    use crate::params::{Chain, Params};

    fn txid(n: u8) -> Txid {
        Txid::from_byte_array([n; 32])
    }

    /// News read after block 10 was handed out: a transaction placed at or
    /// below it, new to a history read before, is a block to read again;
    /// nothing else is.
    #[test]
    fn a_history_that_places_a_transaction_in_a_block_already_handed_out_is_a_miss() {
        let params = Params::new(Network::Litecoin, Chain::Regtest).unwrap();
        let watch = Arc::new(WatchSet::new(Network::Litecoin).listing());
        let cfg = ElectrumConfig {
            params,
            url: "tcp://127.0.0.1:1".to_owned(),
            confirmations: 6,
            batch_size: 10,
            max_subscriptions: 10,
            mempool: true,
        };
        let source = ElectrumSource::new(cfg, watch).unwrap();
        let inner = &source.inner;
        let mut st = State {
            handed: Some((10, BlockHash::from_byte_array([7; 32]))),
            ..State::default()
        };
        st.watched.push(Watched::new(ScriptBuf::new()));

        // First read of an address: the watcher reads its past itself.
        inner.note_missed(&mut st, 0, &[(txid(1), 4)]);
        assert_eq!(source.missed_from(), None);
        st.watched[0].history = Some(vec![(txid(1), 4)]);
        // The same, in the mempool, or above what was handed out: no miss.
        inner.note_missed(&mut st, 0, &[(txid(1), 4), (txid(2), 0), (txid(3), 11)]);
        assert_eq!(source.missed_from(), None);
        // A transaction new to the history, in block 9 and in block 7.
        inner.note_missed(&mut st, 0, &[(txid(1), 4), (txid(2), 9)]);
        assert_eq!(source.missed_from(), Some(9));
        inner.note_missed(&mut st, 0, &[(txid(1), 4), (txid(5), 7)]);
        assert_eq!(source.missed_from(), Some(7), "the lowest");
        // Queued from 9 while 7 was noted: 7 stays; from 7 clears it.
        source.missed_queued(9);
        assert_eq!(source.missed_from(), Some(7));
        source.missed_queued(7);
        assert_eq!(source.missed_from(), None);
    }

    #[test]
    fn a_status_is_electrumxs_hash_of_the_history() {
        // Python's hashlib.sha256(f"{a}:12:{b}:0:".encode()).hexdigest(),
        // as ElectrumX's address_status computes it.
        let a: Txid = "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
            .parse()
            .unwrap();
        let b: Txid = "0e3e2357e806b6cdb1f70b54c3a3a17b6714ee1f0e68bebb44a74b1efd512098"
            .parse()
            .unwrap();
        assert_eq!(
            status_of(&[(a, 12), (b, 0)]).map(|s| s.to_lower_hex_string()),
            Some("029068ad86b42c92ee50ef7e79422440e3c31efc001aebe1b274c3b050347d19".to_owned())
        );
        assert_ne!(
            status_of(&[(a, 12), (b, 0)]),
            status_of(&[(a, 12), (b, 13)])
        );
        assert_eq!(status_of(&[]), None);
    }

    #[test]
    fn a_status_that_matches_the_history_held_needs_no_reading() {
        let a: Txid = "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
            .parse()
            .unwrap();
        let mut w = Watched::new(ScriptBuf::new());
        assert!(w.heard(status_of(&[(a, 5)])), "nothing read yet");
        w.history = Some(vec![(a, 5)]);
        assert!(!w.heard(status_of(&[(a, 5)])));
        assert!(w.heard(status_of(&[(a, 6)])), "the transaction moved");
        assert!(!w.heard(None), "no history needs no reading");
        assert_eq!(w.history, Some(Vec::new()));
    }
}

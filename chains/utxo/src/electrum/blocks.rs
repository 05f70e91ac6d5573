//! A block as the histories see it: its header, and the watched
//! transactions placed in it, each proven to its merkle root.

use std::collections::BTreeSet;

use bitcoin::block::Header;
use bitcoin::Txid;
use electrum_client::utils::validate_merkle_proof;
use electrum_client::{GetMerkleRes, Param};
use paywatch_core::SourceBlock;
use serde_json::Value;

use super::ahead::{chains, Ahead, READ_AHEAD};
use super::ask::Call;
use super::chain::{block_ref, Tip};
use super::conn::Conn;
use super::{ElectrumError, Inner, State, ATTEMPTS};

const HEADERS: &str = "blockchain.block.headers";
const MERKLE: &str = "blockchain.transaction.get_merkle";
const TX: &str = "blockchain.transaction.get";

impl Inner {
    pub(super) fn block(
        &self,
        conn: &mut Conn,
        st: &mut State,
        height: u64,
    ) -> Result<Option<SourceBlock>, ElectrumError> {
        // A height handed out before is asked again when the stream walks
        // back after a parent mismatch: it must see the server's chain as it
        // is now, not headers read before it moved.
        let walking_back = st.handed.is_some_and(|(h, _)| height <= h);
        if walking_back {
            st.ahead = None;
        }
        for _ in 0..ATTEMPTS {
            let behind = st.snapshot.as_ref().is_none_or(|s| height > s.height);
            if behind || self.has_new_addresses(st) {
                self.sync(conn, st)?;
            }
            let Some(snapshot) = st.snapshot.clone() else {
                continue;
            };
            // Read with another tip, they may be of a branch the server left.
            if st.ahead.as_ref().is_some_and(|a| a.tip != snapshot.hash) {
                st.ahead = None;
            }
            if height > snapshot.height {
                return Ok(None);
            }
            match self.block_in(conn, st, height, &snapshot, !walking_back)? {
                Some(block) => return Ok(Some(block)),
                // The server left the snapshot's chain: read it again.
                None => {
                    st.snapshot = None;
                    st.ahead = None;
                }
            }
        }
        Err(self.unsettled(&format!("reading block {height}")))
    }

    /// The block at `height` with what the histories place there, each
    /// transaction proven to be in it; `None` if the snapshot's tip is no
    /// longer on the server's chain. Headers, proofs and transactions go in
    /// one batch: a server that holds back small answers (ElectrumX 2 pads
    /// and delays them up to a second) costs one wait per block, not three.
    /// With `read_ahead`, the header comes from those read ahead, and when
    /// it is not there, the headers up to the snapshot's tip come with it
    /// (see `ahead`); a block with no history entries then costs no request.
    fn block_in(
        &self,
        conn: &mut Conn,
        st: &mut State,
        height: u64,
        snapshot: &Tip,
        read_ahead: bool,
    ) -> Result<Option<SourceBlock>, ElectrumError> {
        let at = usize::try_from(height).map_err(|e| self.bad(HEADERS, e.to_string()))?;
        let tip_at =
            usize::try_from(snapshot.height).map_err(|e| self.bad(HEADERS, e.to_string()))?;
        let txids = txids_at(st, height);
        let fetch: Vec<Txid> = txids
            .iter()
            .filter(|t| !st.txs.contains_key(*t))
            .copied()
            .collect();

        let cached = match st
            .ahead
            .as_ref()
            .filter(|a| a.tip == snapshot.hash)
            .and_then(|a| a.get(height))
            .copied()
        {
            Some(header) if read_ahead && follows_handed(st, height, &header) => Some(header),
            Some(_) => {
                st.ahead = None;
                None
            }
            None => None,
        };
        if let (Some(header), true) = (cached, txids.is_empty()) {
            return Ok(Some(self.hand_out(st, height, &header, &[])));
        }
        // Headers asked from `height` up: none when read ahead, else up to
        // the snapshot's tip, never past it.
        let count = match (cached, read_ahead) {
            (Some(_), _) => 0,
            (None, true) => READ_AHEAD.min(snapshot.height.saturating_sub(height) + 1),
            (None, false) => 1,
        };
        let reaches_tip = count > 0 && height.saturating_add(count - 1) == snapshot.height;

        let mut calls = Vec::new();
        if count > 0 {
            let n = usize::try_from(count).map_err(|e| self.bad(HEADERS, e.to_string()))?;
            calls.push(Call {
                method: HEADERS,
                params: vec![Param::Usize(at), Param::Usize(n)],
            });
        }
        if !reaches_tip {
            calls.push(Call {
                method: HEADERS,
                params: vec![Param::Usize(tip_at), Param::Usize(1)],
            });
        }
        calls.extend(txids.iter().map(|t| Call {
            method: MERKLE,
            params: vec![Param::String(t.to_string()), Param::Usize(at)],
        }));
        calls.extend(fetch.iter().map(|t| Call {
            method: TX,
            params: vec![Param::String(t.to_string())],
        }));
        let mut answers = Vec::with_capacity(calls.len());
        for chunk in calls.chunks(self.batch_size().saturating_mul(2).max(2)) {
            answers.extend(self.ask(conn, chunk)?);
        }
        let mut answers = answers.into_iter();
        let mut next = || {
            answers
                .next()
                .ok_or_else(|| self.bad(HEADERS, "no answer".to_owned()))?
        };
        let range = if count > 0 {
            self.headers_in(next()?, count)?
        } else {
            Vec::new()
        };
        // With the snapshot's tip still on the server's chain, the block at
        // `height` is its ancestor, and the histories cover it.
        let on_snapshot = if reaches_tip {
            u64::try_from(range.len()).is_ok_and(|n| n == count)
                && range.last().map(|h| h.block_hash()) == Some(snapshot.hash)
        } else {
            let tip = self.headers_in(next()?, 1)?;
            tip.first().map(|h| h.block_hash()) == Some(snapshot.hash)
        };
        let Some(header) = cached.or_else(|| range.first().copied()) else {
            return Ok(None);
        };
        // Headers that do not chain were read while the server switched
        // branches: as good as a tip that moved.
        if !on_snapshot || !chains(&range) {
            return Ok(None);
        }
        let answers: Vec<Result<Value, ElectrumError>> = answers.collect();
        let (ordered, coinbase) = self.prove(st, height, &header, &txids, &fetch, answers)?;
        if count > 0 && read_ahead {
            // Kept only if they follow the block handed out below them: if
            // not, the stream walks back, and asks those heights afresh.
            st.ahead = follows_handed(st, height, &header)
                .then(|| Ahead::new(snapshot.hash, height, range))
                .flatten();
        }
        let mut block = self.hand_out(st, height, &header, &ordered);
        if let Some(coinbase) = coinbase {
            mark_coinbase(&mut block, &coinbase.to_string(), self.cfg.confirmations);
        }
        Ok(Some(block))
    }

    /// Checks each of `txids` against its merkle proof to `header` (the
    /// first `txids.len()` answers) and caches the transactions `fetch`ed
    /// (the rest); returns `txids` in block order, and the one proven at
    /// position 0 (the coinbase) if it is among them. A failed proof means
    /// the histories naming the transaction are stale: they are marked for
    /// reading.
    fn prove(
        &self,
        st: &mut State,
        height: u64,
        header: &Header,
        txids: &[Txid],
        fetch: &[Txid],
        mut answers: Vec<Result<Value, ElectrumError>>,
    ) -> Result<(Vec<Txid>, Option<Txid>), ElectrumError> {
        let at = usize::try_from(height).map_err(|e| self.bad(MERKLE, e.to_string()))?;
        let tx_answers = answers.split_off(txids.len().min(answers.len()));
        let mut placed: Vec<(usize, Txid)> = Vec::with_capacity(txids.len());
        for (txid, answer) in txids.iter().zip(answers) {
            let proof = answer.and_then(|v| {
                serde_json::from_value::<GetMerkleRes>(v)
                    .map_err(|e| self.bad(MERKLE, e.to_string()))
            });
            let stale = |detail: String| ElectrumError::StaleHistory {
                url: self.url.clone(),
                height,
                detail,
            };
            match proof {
                Ok(p)
                    if p.block_height == at
                        && validate_merkle_proof(txid, &header.merkle_root, &p) =>
                {
                    placed.push((p.pos, *txid));
                }
                Ok(_) => {
                    st.snapshot = None;
                    st.read_again_holding(txid);
                    return Err(stale(format!(
                        "transaction {txid} does not prove to block {}",
                        header.block_hash()
                    )));
                }
                Err(e @ ElectrumError::Server { .. }) => {
                    st.snapshot = None;
                    st.read_again_holding(txid);
                    return Err(stale(e.to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        for (txid, answer) in fetch.iter().zip(tx_answers) {
            let outputs = self.outputs_of(txid, &answer?)?;
            st.txs.insert(*txid, outputs);
        }
        placed.sort_unstable();
        // The proof checked the position against the header's merkle root.
        let coinbase = placed.first().filter(|(pos, _)| *pos == 0).map(|(_, t)| *t);
        Ok((placed.into_iter().map(|(_, t)| t).collect(), coinbase))
    }

    /// The block, with the payments in `ordered` (cached), remembered as the
    /// last one handed out.
    fn hand_out(
        &self,
        st: &mut State,
        height: u64,
        header: &Header,
        ordered: &[Txid],
    ) -> SourceBlock {
        st.handed = Some((height, header.block_hash()));
        SourceBlock {
            block: block_ref(height, header),
            timestamp: i64::from(header.time),
            transfers: self.scan(st, ordered),
        }
    }
}

/// Gives the outputs of the block's coinbase, `coinbase`, the final height
/// from which they count final (see [`crate::scan::mature_coinbase`]).
fn mark_coinbase(block: &mut SourceBlock, coinbase: &str, confirmations: u32) {
    let matures_at = crate::scan::coinbase_matures_at(block.block.height, confirmations);
    for t in block.transfers.iter_mut().filter(|t| t.txid == coinbase) {
        t.matures_at = Some(matures_at);
    }
}

/// The transactions the histories place at `height`, each once.
fn txids_at(st: &State, height: u64) -> Vec<Txid> {
    let height = i64::try_from(height).unwrap_or(i64::MAX);
    st.watched
        .iter()
        .filter_map(|w| w.history.as_ref())
        .flatten()
        .filter(|(_, h)| i64::from(*h) == height)
        .map(|(t, _)| *t)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Whether `header`, at `height`, names the block handed out just below it
/// as its parent; true when that block is not known.
fn follows_handed(st: &State, height: u64, header: &Header) -> bool {
    match st.handed {
        Some((h, hash)) if h.checked_add(1) == Some(height) => header.prev_blockhash == hash,
        _ => true,
    }
}

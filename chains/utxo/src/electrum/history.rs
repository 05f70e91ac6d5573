//! Each watched address's history, read again whenever the tip moved, and
//! the snapshot: the tip whose whole chain the histories describe.

use bitcoin::hex::DisplayHex as _;
use bitcoin::{ScriptBuf, Txid};
use electrum_client::{GetHistoryRes, Param, ToElectrumScriptHash};
use tracing::debug;

use super::ask::Call;
use super::chain::Tip;
use super::conn::Conn;
use super::{ElectrumError, Inner, State, ATTEMPTS};

pub(super) struct Watched {
    pub(super) script: ScriptBuf,
    /// (txid, height): 0 in the mempool, -1 in it with unconfirmed inputs.
    /// `None` until first read.
    pub(super) history: Option<Vec<(Txid, i32)>>,
}

impl Inner {
    /// Brings the histories in line with the server's current tip: takes in
    /// new addresses, subscribes them, and reads again every history if the
    /// tip moved, else those the server said changed. Returns the snapshot.
    pub(super) fn sync(&self, conn: &mut Conn, st: &mut State) -> Result<Tip, ElectrumError> {
        for _ in 0..ATTEMPTS {
            let before = self.best(conn)?;
            self.take_in_addresses(st)?;
            self.subscribe(conn, st)?;
            self.collect_notifications(conn, st)?;
            let full = st.snapshot.as_ref().is_none_or(|s| s.hash != before.hash);
            let todo: Vec<usize> = if full {
                st.snapshot = None;
                (0..st.watched.len()).collect()
            } else {
                st.dirty.iter().copied().collect()
            };
            // Nothing asked since `before`: the histories describe it as they are.
            let settled = todo.is_empty() || {
                if let Err(e) = self.read_histories(conn, st, &todo) {
                    // Those read so far may be of a newer chain than the snapshot's.
                    st.snapshot = None;
                    return Err(e);
                }
                self.best(conn)?.hash == before.hash
            };
            if settled {
                if full {
                    st.prune_txs();
                    debug!(url = %self.url, tip = %before.hash, height = before.height,
                        addresses = st.watched.len(), "read every address history");
                }
                st.snapshot = Some(before.clone());
                return Ok(before);
            }
            // Some histories may be of the old chain, some of the new.
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
                st.watched[i].history =
                    Some(history.into_iter().map(|h| (h.tx_hash, h.height)).collect());
                st.dirty.remove(&i);
            }
        }
        Ok(())
    }
}

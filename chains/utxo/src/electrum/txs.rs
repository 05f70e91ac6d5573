//! Transactions: fetched once, checked against their txid, kept as their
//! outputs, and scanned for payments to watched addresses.

use std::collections::HashSet;
use std::sync::Arc;

use bitcoin::{ScriptBuf, Txid};
use electrum_client::Param;
use paywatch_core::Transfer;
use serde_json::Value;
use tracing::debug;

use super::ask::Call;
use super::conn::Conn;
use super::{ElectrumError, Inner, State};
use crate::block::{from_hex, transaction_id, transaction_outputs, Output};
use crate::scan::scan_outputs;

pub(super) struct OwnedOutput {
    index: u32,
    value: u64,
    script: ScriptBuf,
}

impl Inner {
    /// Caches the outputs of `txids`; says whether it asked the server. With
    /// `skip_missing`, a transaction the server no longer has (it left the
    /// mempool) is left out.
    pub(super) fn fetch_txs(
        &self,
        conn: &mut Conn,
        st: &mut State,
        txids: &[Txid],
        skip_missing: bool,
    ) -> Result<bool, ElectrumError> {
        const METHOD: &str = "blockchain.transaction.get";
        let missing: Vec<Txid> = txids
            .iter()
            .filter(|t| !st.txs.contains_key(*t))
            .copied()
            .collect();
        for chunk in missing.chunks(self.batch_size()) {
            let calls: Vec<Call> = chunk
                .iter()
                .map(|t| Call {
                    method: METHOD,
                    params: vec![Param::String(t.to_string())],
                })
                .collect();
            for (txid, answer) in chunk.iter().zip(self.ask(conn, &calls)?) {
                let value = match answer {
                    Ok(v) => v,
                    Err(ElectrumError::Server { message, .. }) if skip_missing => {
                        debug!(%txid, %message, "transaction gone from the server; it is seen once mined");
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let outputs = self.outputs_of(txid, &value)?;
                st.txs.insert(*txid, outputs);
            }
        }
        Ok(!missing.is_empty())
    }

    pub(super) fn outputs_of(
        &self,
        txid: &Txid,
        value: &Value,
    ) -> Result<Arc<[OwnedOutput]>, ElectrumError> {
        const METHOD: &str = "blockchain.transaction.get";
        let bad = |why: String| self.bad(METHOD, format!("transaction {txid}: {why}"));
        let hex = value
            .as_str()
            .ok_or_else(|| bad(format!("expected hex, got {value}")))?;
        let bytes = from_hex(hex).map_err(|e| bad(e.to_string()))?;
        // The merkle proof covers the txid, not these bytes: they must hash
        // to it, MWEB-flagged ones (a HogEx, a peg-out) included.
        let got = transaction_id(&bytes).map_err(|e| bad(e.to_string()))?;
        if got != *txid {
            return Err(bad(format!("the bytes are transaction {got}")));
        }
        let outputs = transaction_outputs(&bytes).map_err(|e| bad(e.to_string()))?;
        Ok(outputs
            .iter()
            .map(|o| OwnedOutput {
                index: o.index,
                value: o.value,
                script: o.script.to_owned(),
            })
            .collect())
    }

    /// The outputs of the cached `txids` that pay watched scripts, in order.
    pub(super) fn scan(&self, st: &State, txids: &[Txid]) -> Vec<Transfer> {
        let watch = self.watch.read();
        let mut transfers = Vec::new();
        for txid in txids {
            let Some(outputs) = st.txs.get(txid) else {
                continue;
            };
            let borrowed: Vec<Output<'_>> = outputs
                .iter()
                .map(|o| Output {
                    index: o.index,
                    value: o.value,
                    script: &o.script,
                })
                .collect();
            transfers.extend(scan_outputs(
                &txid.to_string(),
                &borrowed,
                &self.cfg.params,
                &watch,
            ));
        }
        transfers
    }
}

impl State {
    /// Keeps only the transactions some history still names.
    pub(super) fn prune_txs(&mut self) {
        if self.txs.is_empty() {
            return;
        }
        let named: HashSet<&Txid> = self
            .watched
            .iter()
            .filter_map(|w| w.history.as_ref())
            .flatten()
            .map(|(t, _)| t)
            .collect();
        self.txs.retain(|t, _| named.contains(t));
    }
}

//! One block's node answers → the transfers it makes to watched addresses.
//! The watcher and `paywatch extract` both go through [`scan`], so an
//! operator reading a recorded answer sees exactly what the watcher saw.

use std::collections::HashMap;
use std::sync::Arc;

use alloy_primitives::{b256, Address, B256, U256};
use paywatch_core::{Amount, Asset, AssetId, Network, Transfer, WatchKeyFn, WatchRead};
use tracing::warn;

use crate::address::{parse_address, storage_form};
use crate::types::{CallFrame, RpcLog, RpcTransaction, TxTrace};

/// keccak256("Transfer(address,address,uint256)"): ERC-20's Transfer event.
pub const TRANSFER_TOPIC: B256 =
    b256!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// Transfers of ETH get indexes from here up, token transfers (a log's
/// position among its transaction's Transfer logs) stay below: a
/// transaction can both pay ETH and emit logs, and each needs its own key.
/// The top-level value is `NATIVE_INDEX`; ETH moved by contracts follows,
/// numbered by its place among the frames that move value (value above
/// zero, precompiles left out), so every client gives the same payment the same key.
pub const NATIVE_INDEX: u32 = 1 << 31;

/// How a watch set keys Ethereum addresses: the 20 raw bytes, so logs and
/// transactions are tested without formatting an address string.
pub fn watch_key() -> WatchKeyFn {
    Arc::new(|address: &str| parse_address(address).ok().map(|a| a.to_vec()))
}

/// The token contracts paywatch accepts, by the asset they carry.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_contract: HashMap<Address, Asset>,
}

impl Tokens {
    pub fn new(contracts: impl IntoIterator<Item = (Asset, Address)>) -> Tokens {
        Tokens {
            by_contract: contracts.into_iter().map(|(a, c)| (c, a)).collect(),
        }
    }

    /// The contracts whose Transfer logs are fetched and accepted.
    pub fn contracts(&self) -> impl Iterator<Item = (&Address, &Asset)> {
        self.by_contract.iter()
    }

    fn asset_of(&self, contract: &Address) -> AssetId {
        match self.by_contract.get(contract) {
            Some(asset) => AssetId::Known(*asset),
            None => AssetId::Token {
                contract: storage_form(contract),
            },
        }
    }
}

/// What the node said about one block. `transactions` is `None` when only
/// receipts are at hand (`eth_getBlockReceipts`): they carry no ETH value.
#[derive(Debug)]
pub struct BlockAnswers<'a> {
    pub hash: B256,
    pub transactions: Option<&'a [RpcTransaction]>,
    /// Transfer logs of successful transactions; a failed one emits none.
    pub logs: &'a [RpcLog],
    /// Success by transaction hash, for every transaction that pays ETH to
    /// a watched address.
    pub succeeded: &'a HashMap<B256, bool>,
    /// `callTracer` traces in block order, where the node serves them.
    pub traces: Option<&'a [TxTrace]>,
}

/// An answer that does not hold together: nothing from it is used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    #[error("log {index} of transaction {tx} belongs to block {theirs}, not to block {ours}")]
    ForeignLog {
        tx: String,
        index: String,
        theirs: B256,
        ours: B256,
    },
    #[error("log {index} of transaction {tx} is marked removed (its block left the chain)")]
    RemovedLog { tx: String, index: String },
    #[error("log of contract {contract} has no transaction hash or log index")]
    IncompleteLog { contract: Address },
    #[error("transaction {tx} belongs to block {theirs}, not to block {ours}")]
    ForeignTransaction { tx: B256, theirs: B256, ours: B256 },
    #[error("no receipt for transaction {tx}, which pays ETH to a watched address")]
    MissingReceipt { tx: B256 },
    #[error("the block has {transactions} transactions but its trace has {traces}")]
    TraceCount { transactions: usize, traces: usize },
    #[error("the trace of transaction {tx} names transaction {theirs}")]
    TraceMismatch { tx: B256, theirs: B256 },
    #[error("the trace of transaction {tx} failed: {why}")]
    TraceFailed { tx: B256, why: String },
}

/// Every payment in the block to a watched address: ETH by transaction
/// value (and by internal call, with traces), tokens by Transfer log.
pub fn scan(
    block: &BlockAnswers<'_>,
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<Vec<Transfer>, ScanError> {
    let mut found = Vec::new();
    if let Some(transactions) = block.transactions {
        native_transfers(block, transactions, watch, &mut found)?;
    }
    let positions = LogPositions::of(block.logs);
    for log in block.logs {
        if let Some(t) = token_transfer(block.hash, log, &positions, tokens, watch)? {
            found.push(t);
        }
    }
    Ok(found)
}

/// Where each Transfer log stands among its own transaction's Transfer
/// logs: the key of a token payment. The block-wide log index is not: it
/// changes when the transaction is mined again in another block, and the
/// same payment would then look like a second one (and lose its first
/// sighting, so an on-time payment could turn late). A transaction executed
/// again emits the same logs in the same order, whichever block holds it.
struct LogPositions {
    by_tx: HashMap<B256, Vec<u64>>,
}

impl LogPositions {
    fn of(logs: &[RpcLog]) -> LogPositions {
        let mut by_tx: HashMap<B256, Vec<u64>> = HashMap::new();
        for log in logs
            .iter()
            .filter(|l| l.topics.first() == Some(&TRANSFER_TOPIC))
        {
            if let (Some(tx), Some(index)) = (log.transaction_hash, log.log_index) {
                by_tx.entry(tx).or_default().push(index.to::<u64>());
            }
        }
        for indexes in by_tx.values_mut() {
            indexes.sort_unstable();
            indexes.dedup();
        }
        LogPositions { by_tx }
    }

    fn position(&self, tx: &B256, log_index: u64) -> Option<u32> {
        let indexes = self.by_tx.get(tx)?;
        let at = indexes.binary_search(&log_index).ok()?;
        u32::try_from(at).ok()
    }
}

/// The transactions of the block that pay ETH to a watched address, by
/// value or (with traces) by internal call: the ones whose receipt decides.
pub fn paying_transactions(block: &BlockAnswers<'_>, watch: &WatchRead<'_>) -> Vec<B256> {
    let Some(transactions) = block.transactions else {
        return Vec::new();
    };
    transactions
        .iter()
        .enumerate()
        .filter(|(i, tx)| {
            pays_watched(tx, watch)
                || block
                    .traces
                    .and_then(|t| t.get(*i))
                    .and_then(|t| internal_payments(tx.hash, t, watch).ok())
                    .is_some_and(|p| !p.is_empty())
        })
        .map(|(_, tx)| tx.hash)
        .collect()
}

fn pays_watched(tx: &RpcTransaction, watch: &WatchRead<'_>) -> bool {
    tx.to
        .is_some_and(|to| !tx.value.is_zero() && watch.contains_key(to.as_slice()))
}

fn native_transfers(
    block: &BlockAnswers<'_>,
    transactions: &[RpcTransaction],
    watch: &WatchRead<'_>,
    found: &mut Vec<Transfer>,
) -> Result<(), ScanError> {
    if let Some(traces) = block.traces {
        if traces.len() != transactions.len() {
            return Err(ScanError::TraceCount {
                transactions: transactions.len(),
                traces: traces.len(),
            });
        }
    }
    for (i, tx) in transactions.iter().enumerate() {
        if let Some(theirs) = tx.block_hash.filter(|h| *h != block.hash) {
            return Err(ScanError::ForeignTransaction {
                tx: tx.hash,
                theirs,
                ours: block.hash,
            });
        }
        let pays_watched = pays_watched(tx, watch);
        let trace = block.traces.map(|t| &t[i]);
        // A transaction the node could not trace still pays by its value;
        // what its contracts sent is the source's to look for again.
        let internal = match trace.map(|t| internal_payments(tx.hash, t, watch)) {
            Some(Ok(found)) => found,
            Some(Err(ScanError::TraceFailed { .. })) | None => Vec::new(),
            Some(Err(e)) => return Err(e),
        };
        if !pays_watched && internal.is_empty() {
            continue;
        }
        let success = *block
            .succeeded
            .get(&tx.hash)
            .ok_or(ScanError::MissingReceipt { tx: tx.hash })?;
        let txid = tx_id(&tx.hash);
        if let (true, Some(to)) = (pays_watched, tx.to) {
            found.push(Transfer {
                network: Network::Ethereum,
                asset: AssetId::Known(Asset::Eth),
                txid: txid.clone(),
                index: NATIVE_INDEX,
                to: storage_form(&to),
                from: Some(storage_form(&tx.from)),
                amount: amount(&tx.value, &txid),
                success,
                matures_at: None,
            });
        }
        for p in internal {
            found.push(Transfer {
                network: Network::Ethereum,
                asset: AssetId::Known(Asset::Eth),
                txid: txid.clone(),
                index: NATIVE_INDEX + p.ordinal,
                to: storage_form(&p.to),
                from: Some(storage_form(&p.from)),
                amount: amount(&p.value, &txid),
                success: success && p.succeeded,
                matures_at: None,
            });
        }
    }
    Ok(())
}

/// Whether the trace of `tx` shows ETH sent by a contract to a watched
/// address; false when the trace failed.
pub(crate) fn pays_internally(tx: B256, trace: &TxTrace, watch: &WatchRead<'_>) -> bool {
    internal_payments(tx, trace, watch).is_ok_and(|p| !p.is_empty())
}

/// Why the node gave no trace of a transaction: its entry carries an error
/// (geth's "execution timeout") or no result.
pub(crate) fn trace_failure(trace: &TxTrace) -> Option<String> {
    match (&trace.result, &trace.error) {
        (Some(_), None) => None,
        (_, Some(why)) => Some(why.clone()),
        (None, None) => Some("no result".to_owned()),
    }
}

struct InternalPayment {
    ordinal: u32,
    from: Address,
    to: Address,
    value: U256,
    succeeded: bool,
}

/// ETH moved by contracts inside a transaction. The root frame is the
/// transaction itself (counted from its value); a frame that reverted, or
/// sits under one that did, moved nothing.
fn internal_payments(
    tx: B256,
    trace: &TxTrace,
    watch: &WatchRead<'_>,
) -> Result<Vec<InternalPayment>, ScanError> {
    if let Some(theirs) = trace.tx_hash.filter(|h| *h != tx) {
        return Err(ScanError::TraceMismatch { tx, theirs });
    }
    let Some(root) = &trace.result else {
        return Err(ScanError::TraceFailed {
            tx,
            why: trace.error.clone().unwrap_or_else(|| "no result".into()),
        });
    };
    let mut out = Vec::new();
    let mut ordinal = 0;
    walk(
        &root.calls,
        root.error.is_none(),
        &mut ordinal,
        watch,
        &mut out,
    );
    Ok(out)
}

fn walk(
    frames: &[CallFrame],
    parent_ok: bool,
    ordinal: &mut u32,
    watch: &WatchRead<'_>,
    out: &mut Vec<InternalPayment>,
) {
    for frame in frames {
        let ok = parent_ok && frame.error.is_none();
        if let Some((to, value)) = moves_value(frame) {
            *ordinal += 1;
            if watch.contains_key(to.as_slice()) {
                out.push(InternalPayment {
                    ordinal: *ordinal,
                    from: frame.from,
                    to,
                    value,
                    succeeded: ok,
                });
            }
        }
        walk(&frame.calls, ok, ordinal, watch, out);
    }
}

/// The target and amount of a frame that moves ETH. DELEGATECALL and
/// STATICCALL carry the caller's value for show (clients differ in showing
/// it); only a CALL (or a self-destruct's payout) moves ETH to its target.
/// Calls to precompiles are left out: clients differ in listing them, and
/// counting them would give one payment a different key on each client.
fn moves_value(frame: &CallFrame) -> Option<(Address, U256)> {
    if !matches!(frame.kind.as_str(), "CALL" | "SELFDESTRUCT") {
        return None;
    }
    let (to, value) = (frame.to?, frame.value?);
    (!value.is_zero() && !is_precompile(&to)).then_some((to, value))
}

/// Precompiles live at the lowest addresses: 0x01 to 0x11 and 0x100 so
/// far. 0x01 to 0x1f and 0x100 to 0x1ff are taken, so that the next few
/// are too. No key-derived address falls there.
fn is_precompile(address: &Address) -> bool {
    let (high, low) = address.as_slice().split_at(18);
    high.iter().all(|b| *b == 0) && matches!((low[0], low[1]), (0, 0x01..=0x1f) | (1, _))
}

fn token_transfer(
    block: B256,
    log: &RpcLog,
    positions: &LogPositions,
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<Option<Transfer>, ScanError> {
    // ERC-721 Transfer has the same topic0 but four topics: not money here.
    if log.topics.len() != 3 || log.topics[0] != TRANSFER_TOPIC || log.data.len() != 32 {
        return Ok(None);
    }
    let Some(to) = topic_address(&log.topics[2]) else {
        return Ok(None);
    };
    if !watch.contains_key(to.as_slice()) {
        return Ok(None);
    }
    let (Some(tx), Some(index)) = (log.transaction_hash, log.log_index) else {
        return Err(ScanError::IncompleteLog {
            contract: log.address,
        });
    };
    let index_text = index.to_string();
    if let Some(theirs) = log.block_hash.filter(|h| *h != block) {
        return Err(ScanError::ForeignLog {
            tx: tx_id(&tx),
            index: index_text,
            theirs,
            ours: block,
        });
    }
    if log.removed {
        return Err(ScanError::RemovedLog {
            tx: tx_id(&tx),
            index: index_text,
        });
    }
    let value = U256::from_be_slice(&log.data);
    // Zero-value Transfer logs are address-poisoning spam, not payments.
    if value.is_zero() {
        return Ok(None);
    }
    let index = positions
        .position(&tx, index.to::<u64>())
        .filter(|i| *i < NATIVE_INDEX)
        .ok_or(ScanError::IncompleteLog {
            contract: log.address,
        })?;
    let txid = tx_id(&tx);
    Ok(Some(Transfer {
        network: Network::Ethereum,
        asset: tokens.asset_of(&log.address),
        amount: amount(&value, &txid),
        txid,
        index,
        to: storage_form(&to),
        from: topic_address(&log.topics[1]).map(|a| storage_form(&a)),
        success: true,
        matures_at: None,
    }))
}

/// An indexed address topic: 12 zero bytes, then the address.
fn topic_address(topic: &B256) -> Option<Address> {
    let (pad, body) = topic.as_slice().split_at(12);
    pad.iter()
        .all(|b| *b == 0)
        .then(|| Address::from_slice(body))
}

pub(crate) fn tx_id(hash: &B256) -> String {
    format!("{hash:#x}")
}

/// No real ETH or stablecoin amount reaches 2^128; a spam token can claim
/// anything. Such a transfer is still recorded (flagged wrong_asset, never
/// credited), at the largest amount paywatch stores.
fn amount(value: &U256, txid: &str) -> Amount {
    match u128::try_from(*value) {
        Ok(v) => Amount(v),
        Err(_) => {
            warn!(%txid, %value, "transfer amount above 2^128 stored as 2^128-1");
            Amount(u128::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paywatch_core::WatchSet;
    use serde_json::json;

    const PAYEE: &str = "0x00000000000000000000000000000000000000aa";
    const TX: B256 = b256!("1111111111111111111111111111111111111111111111111111111111111111");
    const BLOCK: B256 = b256!("2222222222222222222222222222222222222222222222222222222222222222");

    fn frame(
        kind: &str,
        to: &str,
        value: &str,
        calls: Vec<serde_json::Value>,
    ) -> serde_json::Value {
        json!({ "type": kind, "from": "0x00000000000000000000000000000000000000c0",
                "to": to, "value": value, "calls": calls })
    }

    /// The index of the one internal payment to [`PAYEE`] in `calls`.
    fn internal_index(calls: Vec<serde_json::Value>) -> u32 {
        let watch = WatchSet::new(Network::Ethereum).keyed(watch_key());
        watch.extend([PAYEE]);
        let contract = "0x00000000000000000000000000000000000000c0";
        let trace: TxTrace = serde_json::from_value(json!({
            "txHash": TX,
            "result": frame("CALL", contract, "0x0", calls),
        }))
        .unwrap();
        let tx: RpcTransaction = serde_json::from_value(json!({
            "hash": TX, "from": "0x00000000000000000000000000000000000000b0",
            "to": contract, "value": "0x0", "blockHash": BLOCK,
        }))
        .unwrap();
        let succeeded = HashMap::from([(TX, true)]);
        let txs = [tx];
        let traces = [trace];
        let answers = BlockAnswers {
            hash: BLOCK,
            transactions: Some(&txs),
            logs: &[],
            succeeded: &succeeded,
            traces: Some(&traces),
        };
        let found = scan(&answers, &Tokens::default(), &watch.read()).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        found[0].index
    }

    #[test]
    fn an_internal_payment_keeps_its_index_whether_precompile_calls_are_listed_or_not() {
        let pay = || frame("CALL", PAYEE, "0x1388", vec![]);
        let ecrecover = || {
            frame(
                "STATICCALL",
                "0x0000000000000000000000000000000000000001",
                "0x0",
                vec![],
            )
        };
        let sha256_paid = || {
            frame(
                "CALL",
                "0x0000000000000000000000000000000000000002",
                "0x1",
                vec![],
            )
        };
        // geth lists precompile calls; other clients leave them out.
        let geth = internal_index(vec![ecrecover(), sha256_paid(), pay()]);
        let reth = internal_index(vec![pay()]);
        assert_eq!(geth, reth);
        assert_eq!(geth, NATIVE_INDEX + 1);
    }

    #[test]
    fn frames_that_move_no_value_do_not_shift_an_internal_payment_index() {
        let token = "0x00000000000000000000000000000000000000d0";
        let other = "0x00000000000000000000000000000000000000e0";
        let index = internal_index(vec![
            frame(
                "DELEGATECALL",
                token,
                "0x1388",
                vec![frame("STATICCALL", token, "0x0", vec![])],
            ),
            frame("CALL", token, "0x0", vec![]),
            frame("CALL", other, "0x7", vec![]),
            frame("CALL", PAYEE, "0x1388", vec![]),
        ]);
        // Only the paid call to `other` comes before it.
        assert_eq!(index, NATIVE_INDEX + 2);
    }
}

//! `paywatch extract --network ethereum`: the payments recorded node
//! answers hold for some addresses, read through the very scan the watcher
//! uses, so an operator can answer "why was this payment not seen?".

use std::collections::{BTreeMap, HashMap};

use alloy_primitives::B256;
use paywatch_core::{Asset, Method, Network, Transfer, WatchSet};
use serde_json::Value;

use crate::address::{parse_address, AddressError};
use crate::scan::{scan, watch_key, BlockAnswers, Tokens, TRANSFER_TOPIC};
use crate::types::{RpcBlock, RpcLog, RpcReceipt};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    #[error("a --watch address is not usable")]
    Address(#[from] AddressError),
    #[error("give at least one --watch address")]
    NothingWatched,
    #[error("{file}: {why}")]
    File { file: String, why: String },
    #[error("block {block}: {why}")]
    Block { block: String, why: String },
}

/// One payment found, and the block it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPayment {
    pub block: String,
    pub transfer: Transfer,
}

/// What the files held, besides the payments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtractReport {
    pub payments: Vec<FoundPayment>,
    /// Payments in transactions that failed: kept by the watcher for the
    /// record, never counted.
    pub failed: Vec<FoundPayment>,
    /// Blocks given by receipts alone: their ETH values are not in receipts.
    pub without_transactions: Vec<String>,
}

/// Every successful payment to one of `watch` in the files (name, JSON):
/// `eth_getBlockReceipts` results, `eth_getTransactionReceipt` results, and
/// `eth_getBlockByNumber(…, true)` results, bare or in their JSON-RPC
/// envelope. A block is paired with its receipts by hash. USDT and USDC are
/// the mainnet contracts; other tokens show by contract.
pub fn extract(
    files: &[(String, Vec<u8>)],
    watch: &[String],
) -> Result<ExtractReport, ExtractError> {
    if watch.is_empty() {
        return Err(ExtractError::NothingWatched);
    }
    let set = WatchSet::new(Network::Ethereum).keyed(watch_key());
    for a in watch {
        parse_address(a)?;
    }
    set.extend(watch.iter().map(String::as_str));

    let mut blocks: BTreeMap<B256, RpcBlock> = BTreeMap::new();
    let mut receipts: BTreeMap<B256, Vec<RpcReceipt>> = BTreeMap::new();
    for (file, raw) in files {
        let fail = |why: String| ExtractError::File {
            file: file.clone(),
            why,
        };
        let json: Value =
            serde_json::from_slice(raw).map_err(|e| fail(format!("not JSON: {e}")))?;
        let json = match json {
            Value::Object(mut o) if o.contains_key("jsonrpc") => match o.remove("result") {
                Some(r) => r,
                None => {
                    return Err(fail(format!(
                        "a JSON-RPC error, not a result: {}",
                        Value::Object(o)
                    )))
                }
            },
            other => other,
        };
        match json {
            Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    let r: RpcReceipt = serde_json::from_value(item)
                        .map_err(|e| fail(format!("item {i} is not a transaction receipt: {e}")))?;
                    let hash = r
                        .block_hash
                        .ok_or_else(|| fail(format!("receipt {i} names no block")))?;
                    receipts.entry(hash).or_default().push(r);
                }
            }
            Value::Object(o) if o.contains_key("transactions") => {
                let b: RpcBlock = serde_json::from_value(Value::Object(o)).map_err(|e| {
                    fail(format!(
                        "not a block with full transactions (eth_getBlockByNumber(n, true)): {e}"
                    ))
                })?;
                blocks.insert(b.hash, b);
            }
            Value::Object(o) => {
                let r: RpcReceipt = serde_json::from_value(Value::Object(o))
                    .map_err(|e| fail(format!("neither a block nor a receipt: {e}")))?;
                let hash = r
                    .block_hash
                    .ok_or_else(|| fail("the receipt names no block".into()))?;
                receipts.entry(hash).or_default().push(r);
            }
            _ => {
                return Err(fail(
                    "neither a block, a receipt nor a list of receipts".into(),
                ))
            }
        }
    }
    if let Some(hash) = blocks.keys().find(|h| !receipts.contains_key(*h)) {
        return Err(ExtractError::Block {
            block: format!("{hash:#x}"),
            why: "no receipts given for it; add its eth_getBlockReceipts result, which says which transactions succeeded".into(),
        });
    }

    let tokens = Tokens::new([Asset::Usdt, Asset::Usdc].into_iter().filter_map(|asset| {
        let contract = Method::new(asset, Network::Ethereum)
            .ok()?
            .default_contract()?;
        Some((asset, parse_address(contract).ok()?))
    }));
    let mut report = ExtractReport::default();
    for (hash, block_receipts) in &receipts {
        let succeeded: HashMap<B256, bool> = block_receipts
            .iter()
            .map(|r| (r.transaction_hash, r.succeeded()))
            .collect();
        // A failed transaction emits no logs; a receipt that shows some
        // anyway is not believed.
        let logs: Vec<RpcLog> = block_receipts
            .iter()
            .filter(|r| r.succeeded())
            .flat_map(|r| r.logs.iter())
            .filter(|l| l.topics.first() == Some(&TRANSFER_TOPIC))
            .cloned()
            .collect();
        let block = blocks.get(hash);
        if block.is_none() {
            report.without_transactions.push(format!("{hash:#x}"));
        }
        let answers = BlockAnswers {
            hash: *hash,
            transactions: block.map(|b| b.transactions.as_slice()),
            logs: &logs,
            succeeded: &succeeded,
            traces: None,
        };
        let found = scan(&answers, &tokens, &set.read()).map_err(|e| ExtractError::Block {
            block: format!("{hash:#x}"),
            why: e.to_string(),
        })?;
        for transfer in found {
            let p = FoundPayment {
                block: format!("{hash:#x}"),
                transfer,
            };
            if p.transfer.success {
                report.payments.push(p);
            } else {
                report.failed.push(p);
            }
        }
    }
    Ok(report)
}

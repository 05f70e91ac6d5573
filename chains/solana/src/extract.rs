//! `paywatch extract --network solana`: the payments recorded node answers
//! hold for some addresses, read through the very scan the watcher uses,
//! so an operator can answer "why was this payment not seen?".

use std::collections::HashSet;

use paywatch_core::{Network, Transfer, WatchSet};
use serde_json::Value;
use solana_transaction_status_client_types::EncodedConfirmedTransactionWithStatusMeta;

use crate::address::{parse_address, watch_key, AddressError};
use crate::failure::make_result_readable;
use crate::scan::{failed, parse_block, scan_block, scan_transaction, ScanError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    #[error("a --watch address is not usable")]
    Address(#[from] AddressError),
    #[error("give at least one --watch address")]
    NothingWatched,
    #[error("{file}: {why}")]
    File { file: String, why: String },
    #[error("{file}: {source}")]
    Scan { file: String, source: ScanError },
}

/// One payment found, and where: `getTransaction` answers name the slot,
/// `getBlock` answers the blockhash (the slot is only in the request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPayment {
    pub slot: Option<u64>,
    pub blockhash: Option<String>,
    pub transfer: Transfer,
}

/// What the files held, besides the payments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtractReport {
    pub payments: Vec<FoundPayment>,
    /// Transactions given alone (`getTransaction`) that failed: they move
    /// nothing but fees, so they pay no one; named so the operator sees why.
    pub failed_transactions: Vec<String>,
}

/// Every payment to one of `watch` in the files (name, JSON): `getBlock`
/// and `getTransaction` answers, bare or in their JSON-RPC envelope, legacy
/// or v0 transactions. A payment in two files (a block and one of its
/// transactions) is reported once.
pub fn extract(
    files: &[(String, Vec<u8>)],
    watch: &[String],
) -> Result<ExtractReport, ExtractError> {
    if watch.is_empty() {
        return Err(ExtractError::NothingWatched);
    }
    for a in watch {
        parse_address(a)?;
    }
    let set = WatchSet::new(Network::Solana).keyed(watch_key());
    set.extend(watch.iter().map(String::as_str));
    let set = set.read();

    let mut report = ExtractReport::default();
    let mut seen = HashSet::new();
    for (file, raw) in files {
        let fail = |why: String| ExtractError::File {
            file: file.clone(),
            why,
        };
        let refused = |source: ScanError| ExtractError::Scan {
            file: file.clone(),
            source,
        };
        let json: Value =
            serde_json::from_slice(raw).map_err(|e| fail(format!("not JSON: {e}")))?;
        let result = unwrap_envelope(json).map_err(fail)?;
        let (slot, blockhash, found) = if is_transaction(&result) {
            let mut result = result;
            make_result_readable(&mut result);
            let tx: EncodedConfirmedTransactionWithStatusMeta = serde_json::from_value(result)
                .map_err(|e| fail(format!("not a getTransaction answer: {e}")))?;
            let found = scan_transaction(&tx.transaction, &set).map_err(refused)?;
            if tx.transaction.meta.as_ref().is_some_and(failed) {
                // The scan has read the signature already; it is there.
                report.failed_transactions.extend(first_signature(&tx));
            }
            (Some(tx.slot), None, found)
        } else {
            let block = parse_block(result).map_err(refused)?;
            let found = scan_block(&block, &set).map_err(refused)?;
            (None, Some(block.blockhash), found)
        };
        for transfer in found {
            if seen.insert((transfer.txid.clone(), transfer.index)) {
                report.payments.push(FoundPayment {
                    slot,
                    blockhash: blockhash.clone(),
                    transfer,
                });
            }
        }
    }
    Ok(report)
}

/// The `result` of a JSON-RPC envelope, or the answer itself when bare.
fn unwrap_envelope(json: Value) -> Result<Value, String> {
    let Value::Object(mut map) = json else {
        return Err("expected a JSON object (a getBlock or getTransaction answer)".into());
    };
    if !map.contains_key("jsonrpc") {
        return Ok(Value::Object(map));
    }
    if let Some(error) = map.get("error") {
        return Err(format!("the node answered with an error: {error}"));
    }
    match map.remove("result") {
        Some(Value::Null) | None => {
            Err("the node answered null: no such block or transaction (yet)".into())
        }
        Some(result) => Ok(result),
    }
}

/// getTransaction answers carry one transaction and its meta; getBlock
/// answers a list of them under a blockhash.
fn is_transaction(result: &Value) -> bool {
    result.get("transaction").is_some() && result.get("blockhash").is_none()
}

fn first_signature(tx: &EncodedConfirmedTransactionWithStatusMeta) -> Option<String> {
    use solana_transaction_status_client_types::EncodedTransaction;
    match &tx.transaction.transaction {
        EncodedTransaction::Json(ui) => ui.signatures.first().cloned(),
        EncodedTransaction::Accounts(list) => list.signatures.first().cloned(),
        other => Some(other.decode()?.signatures.first()?.to_string()),
    }
}

//! `paywatch extract --network tron`: the payments recorded node answers
//! hold for some addresses, read through the very scan the watcher uses,
//! so an operator can answer "why was this payment not seen?".

use std::collections::{BTreeMap, BTreeSet, HashSet};

use alloy_primitives::hex;
use paywatch_core::{Network, Transfer, WatchSet};
use serde_json::Value;

use crate::address::{ethereum_body, parse_address, watch_key, AddressError};
use crate::json::{answer, Answer};
use crate::proto::{BlockExtention, TransactionExtention, TransactionInfo};
use crate::scan::{scan, scan_answers, BlockAnswers, ScanError, Tokens};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    #[error("a --watch address is not usable")]
    Address(#[from] AddressError),
    #[error("give at least one --watch address")]
    NothingWatched,
    #[error("{file}: {why}")]
    File { file: String, why: String },
    #[error("transaction {tx}: {why}")]
    Transaction { tx: String, why: String },
    #[error("block {block}: {why}")]
    Block { block: String, why: String },
}

/// One payment found, and the number of the block it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPayment {
    pub block: String,
    pub transfer: Transfer,
}

/// What the files held, besides the payments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtractReport {
    pub payments: Vec<FoundPayment>,
    /// TRX payments in transactions that failed: kept by the watcher for
    /// the record, never counted.
    pub failed: Vec<FoundPayment>,
    /// Blocks (by number) given by transaction infos alone: TRX transfers
    /// are in the transactions, not in their infos.
    pub without_transactions: Vec<String>,
}

/// [`extract_with`] the mainnet USDT contract.
pub fn extract(
    files: &[(String, Vec<u8>)],
    watch: &[String],
) -> Result<ExtractReport, ExtractError> {
    extract_with(files, watch, &Tokens::mainnet())
}

/// Every payment to one of `watch` (T-addresses, or Ethereum addresses
/// for the same keys) in the files (name, JSON): java-tron HTTP answers
/// for blocks (getblockbynum), transactions (gettransactionbyid) and
/// transaction infos (gettransactioninfobyid, or the array of
/// gettransactioninfobyblocknum), read together and paired by txid.
/// Tokens other than `tokens` show by contract.
pub fn extract_with(
    files: &[(String, Vec<u8>)],
    watch: &[String],
    tokens: &Tokens,
) -> Result<ExtractReport, ExtractError> {
    if watch.is_empty() {
        return Err(ExtractError::NothingWatched);
    }
    for a in watch {
        if ethereum_body(a.trim()).is_none() {
            parse_address(a)?;
        }
    }
    let set = WatchSet::new(Network::Tron).keyed(watch_key());
    set.extend(watch.iter().map(String::as_str));

    let answers = Answers::read(files)?;
    let in_blocks: HashSet<&[u8]> = answers
        .blocks
        .values()
        .flat_map(|b| &b.transactions)
        .map(|t| t.txid.as_slice())
        .collect();
    // Transactions given alone go to the block their info names.
    let mut loose: BTreeMap<u64, Vec<TransactionExtention>> = BTreeMap::new();
    for tx in answers.transactions.values() {
        if in_blocks.contains(tx.txid.as_slice()) {
            continue;
        }
        let info =
            answers
                .infos
                .get(tx.txid.as_slice())
                .ok_or_else(|| ExtractError::Transaction {
                    tx: hex::encode(&tx.txid),
                    why:
                        "no transaction info given for it; add its gettransactioninfobyid answer, \
                      which says which block it is in and whether it succeeded"
                            .into(),
                })?;
        loose.entry(number_of(info)?).or_default().push(tx.clone());
    }
    let mut infos: BTreeMap<u64, Vec<TransactionInfo>> = BTreeMap::new();
    for info in answers.infos.values() {
        infos
            .entry(number_of(info)?)
            .or_default()
            .push(info.clone());
    }

    let numbers: BTreeSet<u64> = answers
        .blocks
        .keys()
        .chain(loose.keys())
        .chain(infos.keys())
        .copied()
        .collect();
    let set = set.read();
    let mut report = ExtractReport::default();
    let mut record = |number: u64, found: Vec<Transfer>| {
        for transfer in found {
            let p = FoundPayment {
                block: number.to_string(),
                transfer,
            };
            if p.transfer.success {
                report.payments.push(p);
            } else {
                report.failed.push(p);
            }
        }
    };
    let refused = |number: u64| {
        move |e: ScanError| ExtractError::Block {
            block: number.to_string(),
            why: e.to_string(),
        }
    };
    let scan_part = |number: u64, transactions: Option<&[TransactionExtention]>, infos: &[_]| {
        let block = BlockAnswers {
            number,
            transactions,
            infos,
        };
        scan_answers(&block, tokens, &set).map_err(refused(number))
    };
    let no_infos = Vec::new();
    for number in numbers {
        let block_infos = infos.get(&number).unwrap_or(&no_infos);
        if let Some(block) = answers.blocks.get(&number) {
            if block_infos.is_empty() && !block.transactions.is_empty() {
                return Err(ExtractError::Block {
                    block: number.to_string(),
                    why: "no transaction infos given for it; add its \
                          gettransactioninfobyblocknum answer, which says which transactions \
                          succeeded and holds their TRC-20 Transfer logs"
                        .into(),
                });
            }
            // The very call the watcher makes on a block and its infos.
            let found = scan(block, block_infos, tokens, &set).map_err(refused(number))?;
            record(number, found);
            continue;
        }
        let transactions = loose.get(&number).map_or(&[][..], Vec::as_slice);
        let ids: HashSet<&[u8]> = transactions.iter().map(|t| t.txid.as_slice()).collect();
        let (paired, alone): (Vec<TransactionInfo>, Vec<TransactionInfo>) = block_infos
            .iter()
            .cloned()
            .partition(|i| ids.contains(i.id.as_slice()));
        if !transactions.is_empty() {
            record(number, scan_part(number, Some(transactions), &paired)?);
        }
        if !alone.is_empty() {
            report.without_transactions.push(number.to_string());
            record(number, scan_part(number, None, &alone)?);
        }
    }
    Ok(report)
}

fn number_of(info: &TransactionInfo) -> Result<u64, ExtractError> {
    u64::try_from(info.block_number).map_err(|_| ExtractError::Transaction {
        tx: hex::encode(&info.id),
        why: format!("its info names block {}", info.block_number),
    })
}

/// Everything the files hold, each answer once.
#[derive(Debug, Default)]
struct Answers {
    blocks: BTreeMap<u64, BlockExtention>,
    transactions: BTreeMap<Vec<u8>, TransactionExtention>,
    infos: BTreeMap<Vec<u8>, TransactionInfo>,
}

impl Answers {
    fn read(files: &[(String, Vec<u8>)]) -> Result<Answers, ExtractError> {
        let mut answers = Answers::default();
        for (file, raw) in files {
            let fail = |why: String| ExtractError::File {
                file: file.clone(),
                why,
            };
            let json: Value =
                serde_json::from_slice(raw).map_err(|e| fail(format!("not JSON: {e}")))?;
            let items = match json {
                // gettransactioninfobyblocknum answers a bare array.
                Value::Array(items) => items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| answer(item).map_err(|e| fail(format!("item {i}: {e}"))))
                    .collect::<Result<Vec<_>, _>>()?,
                other => vec![answer(other).map_err(fail)?],
            };
            for item in items {
                answers.add(item).map_err(fail)?;
            }
        }
        Ok(answers)
    }

    /// The same answer in two files is fine; two different answers for
    /// one block or transaction are not.
    fn add(&mut self, item: Answer) -> Result<(), String> {
        match item {
            Answer::Block(number, block) => match self.blocks.get(&number) {
                Some(known) if *known != block => Err(format!(
                    "block {number} is {}, but another file gives it as {}",
                    hex::encode(&block.blockid),
                    hex::encode(&known.blockid)
                )),
                Some(_) => Ok(()),
                None => {
                    self.blocks.insert(number, block);
                    Ok(())
                }
            },
            Answer::Transaction(tx) => match self.transactions.get(&tx.txid) {
                Some(known) if *known != tx => Err(format!(
                    "transaction {} differs from the one in another file",
                    hex::encode(&tx.txid)
                )),
                Some(_) => Ok(()),
                None => {
                    self.transactions.insert(tx.txid.clone(), tx);
                    Ok(())
                }
            },
            Answer::Info(info) => match self.infos.get(&info.id) {
                Some(known) if *known != info => Err(format!(
                    "the info of {} differs from the one in another file",
                    hex::encode(&info.id)
                )),
                Some(_) => Ok(()),
                None => {
                    self.infos.insert(info.id.clone(), info);
                    Ok(())
                }
            },
        }
    }
}

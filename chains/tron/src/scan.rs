//! One block's node answers → the transfers it makes to watched addresses.
//! The watcher and `paywatch extract` both go through [`scan`], so an
//! operator reading a recorded answer sees exactly what the watcher saw.

use std::collections::{HashMap, HashSet};

use alloy_primitives::{hex, U256};
use bitcoin::hashes::{sha256, Hash};
use paywatch_core::{Amount, Asset, AssetId, Method, Network, Transfer, WatchRead};
use prost::Message;
use tracing::warn;

use crate::address::{body_from_proto, encode_address, parse_address};
use crate::proto::transaction::contract::ContractType;
use crate::proto::transaction::result::ContractResult;
use crate::proto::transaction::Raw;
use crate::proto::transaction_info::{Code, Log};
use crate::proto::{BlockExtention, TransactionExtention, TransactionInfo, TransferContract};

/// keccak256("Transfer(address,address,uint256)"): TRC-20's Transfer event,
/// the same as ERC-20's.
pub const TRANSFER_TOPIC: [u8; 32] =
    alloy_primitives::hex!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// TRX paid by a transaction's own TransferContract gets `NATIVE_INDEX` plus
/// the contract's position; log indexes stay below, so a transaction that
/// both pays TRX and emits logs keys each transfer apart.
pub const NATIVE_INDEX: u32 = 1 << 31;

/// The `type_url` java-tron gives a TransferContract parameter.
const TRANSFER_TYPE_URL: &str = "type.googleapis.com/protocol.TransferContract";

/// The token contracts paywatch accepts, by the asset they carry, keyed by
/// the 20-byte body logs name them with.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_contract: HashMap<[u8; 20], Asset>,
}

impl Tokens {
    pub fn new(contracts: impl IntoIterator<Item = (Asset, [u8; 20])>) -> Tokens {
        Tokens {
            by_contract: contracts.into_iter().map(|(a, c)| (c, a)).collect(),
        }
    }

    /// USDT at its mainnet contract, TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t.
    pub fn mainnet() -> Tokens {
        Tokens::new([Asset::Usdt].into_iter().filter_map(|asset| {
            let contract = Method::new(asset, Network::Tron).ok()?.default_contract()?;
            Some((asset, parse_address(contract).ok()?))
        }))
    }

    /// The accepted contracts, as bodies.
    pub fn contracts(&self) -> impl Iterator<Item = (&[u8; 20], &Asset)> {
        self.by_contract.iter()
    }

    fn asset_of(&self, contract: &[u8; 20]) -> AssetId {
        match self.by_contract.get(contract) {
            Some(asset) => AssetId::Known(*asset),
            None => AssetId::Token {
                contract: encode_address(contract),
            },
        }
    }
}

/// What the node said about one block.
#[derive(Debug)]
pub struct BlockAnswers<'a> {
    pub number: u64,
    /// The block's transactions (`BlockExtention::transactions`). A
    /// transaction without `txid` (from a plain `Block`) is identified by
    /// the sha256 of its re-encoded `raw_data`. `None` when only the infos
    /// are at hand: they show TRC-20 transfers but not TRX ones.
    pub transactions: Option<&'a [TransactionExtention]>,
    /// The block's infos (`GetTransactionInfoByBlockNum`), one per
    /// transaction, in any order.
    pub infos: &'a [TransactionInfo],
}

/// An answer that does not hold together: nothing from it is used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    #[error("the block has no header, so no number")]
    MissingHeader,
    #[error("the block's header gives it the number {number}")]
    NegativeNumber { number: i64 },
    #[error("transaction {position} of block {block} has no raw_data")]
    MissingRawData { block: u64, position: usize },
    #[error("transaction {position} of block {block} has a {length}-byte id, expected 32")]
    BadTxid {
        block: u64,
        position: usize,
        length: usize,
    },
    #[error("transaction {tx} appears twice in block {block}")]
    DuplicateTransaction { block: u64, tx: String },
    #[error("transaction info {position} for block {block} has a {length}-byte id, expected 32")]
    BadInfoId {
        block: u64,
        position: usize,
        length: usize,
    },
    #[error("the transaction info for {tx} names block {theirs}, not block {ours}")]
    ForeignInfo { tx: String, theirs: i64, ours: u64 },
    #[error("there is a transaction info for {tx}, which is not in block {block}")]
    InfoWithoutTransaction { block: u64, tx: String },
    #[error("there are two transaction infos for {tx} in block {block}")]
    DuplicateInfo { block: u64, tx: String },
    #[error("no transaction info for transaction {tx} of block {block}")]
    MissingInfo { block: u64, tx: String },
    #[error("transaction {tx}: its TransferContract cannot be read: {why}")]
    BadTransferContract { tx: String, why: String },
    #[error("transaction {tx}: log {index} {why}")]
    BadLog {
        tx: String,
        index: usize,
        why: String,
    },
}

/// Every payment in a block (`GetBlockByNum2` and the like) to a watched
/// address, given the block's infos (`GetTransactionInfoByBlockNum`): TRX
/// by TransferContract, tokens by Transfer log in the infos.
///
/// A TRX transfer whose transaction failed is returned with `success:
/// false` (kept for the record, never counted). Logs are read only from
/// infos whose transaction succeeded, never from calldata: calldata misses
/// transfers made by contracts and shows calls that reverted.
pub fn scan(
    block: &BlockExtention,
    infos: &[TransactionInfo],
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<Vec<Transfer>, ScanError> {
    let number = block
        .block_header
        .as_ref()
        .and_then(|h| h.raw_data.as_ref())
        .map(|r| r.number)
        .ok_or(ScanError::MissingHeader)?;
    let number = u64::try_from(number).map_err(|_| ScanError::NegativeNumber { number })?;
    let answers = BlockAnswers {
        number,
        transactions: Some(&block.transactions),
        infos,
    };
    scan_answers(&answers, tokens, watch)
}

/// [`scan`] on answers in pieces, or on a block's infos alone.
pub fn scan_answers(
    block: &BlockAnswers<'_>,
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<Vec<Transfer>, ScanError> {
    let mut found = Vec::new();
    match block.transactions {
        Some(transactions) => {
            let infos = pair(block.number, transactions, block.infos)?;
            for (position, (tx, (txid, info))) in transactions.iter().zip(infos).enumerate() {
                let txid = hex::encode(txid);
                trx_transfers(block.number, position, tx, &txid, info, watch, &mut found)?;
                token_transfers(info, &txid, tokens, watch, &mut found)?;
            }
        }
        None => {
            let mut seen = HashSet::new();
            for (position, info) in block.infos.iter().enumerate() {
                let id = info_id(block.number, position, info)?;
                if !seen.insert(id) {
                    return Err(ScanError::DuplicateInfo {
                        block: block.number,
                        tx: hex::encode(id),
                    });
                }
                token_transfers(info, &hex::encode(id), tokens, watch, &mut found)?;
            }
        }
    }
    Ok(found)
}

/// Whether the transactions can pay a watched address at all: one pays it
/// TRX, or one runs contract code, which may emit a Transfer log to anyone.
/// When not, the source may skip fetching the block's infos: the block
/// pays nobody watched.
pub fn may_pay(transactions: &[TransactionExtention], watch: &WatchRead<'_>) -> bool {
    transactions
        .iter()
        .filter_map(|tx| tx.transaction.as_ref()?.raw_data.as_ref())
        .flat_map(|raw| &raw.contract)
        .any(|contract| match ContractType::try_from(contract.r#type) {
            Ok(ContractType::TriggerSmartContract | ContractType::CreateSmartContract) => true,
            Ok(ContractType::TransferContract) => contract
                .parameter
                .as_ref()
                .and_then(|p| TransferContract::decode(p.value.as_slice()).ok())
                .and_then(|c| body_from_proto(&c.to_address))
                .is_some_and(|to| watch.contains_key(&to)),
            // An unknown type may be newer than these protos: look closer.
            Err(_) => true,
            Ok(_) => false,
        })
}

/// The id of a transaction: sha256 of its serialized `raw_data`.
pub fn txid_of(raw: &Raw) -> [u8; 32] {
    sha256::Hash::hash(&raw.encode_to_vec()).to_byte_array()
}

/// Each transaction's id and its info, in block order. Every transaction
/// has exactly one info of this block and every info one transaction.
fn pair<'a>(
    block: u64,
    transactions: &[TransactionExtention],
    infos: &'a [TransactionInfo],
) -> Result<Vec<([u8; 32], &'a TransactionInfo)>, ScanError> {
    let mut ids = Vec::with_capacity(transactions.len());
    let mut position_of = HashMap::with_capacity(transactions.len());
    for (position, tx) in transactions.iter().enumerate() {
        let id = tx_id(block, position, tx)?;
        if position_of.insert(id, position).is_some() {
            return Err(ScanError::DuplicateTransaction {
                block,
                tx: hex::encode(id),
            });
        }
        ids.push(id);
    }
    let mut paired: Vec<Option<&TransactionInfo>> = vec![None; transactions.len()];
    for (position, info) in infos.iter().enumerate() {
        let id = info_id(block, position, info)?;
        let Some(&at) = position_of.get(&id) else {
            return Err(ScanError::InfoWithoutTransaction {
                block,
                tx: hex::encode(id),
            });
        };
        if paired[at].replace(info).is_some() {
            return Err(ScanError::DuplicateInfo {
                block,
                tx: hex::encode(id),
            });
        }
    }
    ids.into_iter()
        .zip(paired)
        .map(|(id, info)| {
            info.map(|i| (id, i)).ok_or_else(|| ScanError::MissingInfo {
                block,
                tx: hex::encode(id),
            })
        })
        .collect()
}

/// The node's id where it gives one: re-encoding `raw_data` reproduces
/// the signed bytes only while these protos know every field in them.
fn tx_id(block: u64, position: usize, tx: &TransactionExtention) -> Result<[u8; 32], ScanError> {
    if !tx.txid.is_empty() {
        return tx
            .txid
            .as_slice()
            .try_into()
            .map_err(|_| ScanError::BadTxid {
                block,
                position,
                length: tx.txid.len(),
            });
    }
    let raw = raw_data(block, position, tx)?;
    Ok(txid_of(raw))
}

fn raw_data(block: u64, position: usize, tx: &TransactionExtention) -> Result<&Raw, ScanError> {
    tx.transaction
        .as_ref()
        .and_then(|t| t.raw_data.as_ref())
        .ok_or(ScanError::MissingRawData { block, position })
}

fn info_id(block: u64, position: usize, info: &TransactionInfo) -> Result<[u8; 32], ScanError> {
    let id: [u8; 32] = info
        .id
        .as_slice()
        .try_into()
        .map_err(|_| ScanError::BadInfoId {
            block,
            position,
            length: info.id.len(),
        })?;
    if u64::try_from(info.block_number).ok() != Some(block) {
        return Err(ScanError::ForeignInfo {
            tx: hex::encode(id),
            theirs: info.block_number,
            ours: block,
        });
    }
    Ok(id)
}

fn trx_transfers(
    block: u64,
    position: usize,
    tx: &TransactionExtention,
    txid: &str,
    info: &TransactionInfo,
    watch: &WatchRead<'_>,
    found: &mut Vec<Transfer>,
) -> Result<(), ScanError> {
    let raw = raw_data(block, position, tx)?;
    let ret = tx
        .transaction
        .as_ref()
        .map_or(&[][..], |t| t.ret.as_slice());
    for (position, contract) in raw.contract.iter().enumerate() {
        if contract.r#type != ContractType::TransferContract as i32 {
            continue;
        }
        let bad = |why: String| ScanError::BadTransferContract {
            tx: txid.to_owned(),
            why,
        };
        let parameter = contract
            .parameter
            .as_ref()
            .ok_or_else(|| bad("it has no parameter".into()))?;
        if parameter.type_url != TRANSFER_TYPE_URL {
            return Err(bad(format!(
                "its parameter is a {:?}, not a {TRANSFER_TYPE_URL:?}",
                parameter.type_url
            )));
        }
        let transfer = TransferContract::decode(parameter.value.as_slice())
            .map_err(|e| bad(format!("its parameter does not decode: {e}")))?;
        let Some(to) = body_from_proto(&transfer.to_address) else {
            continue;
        };
        if !watch.contains_key(&to) {
            continue;
        }
        let amount = u128::try_from(transfer.amount)
            .map_err(|_| bad(format!("it moves a negative amount, {}", transfer.amount)))?;
        if amount == 0 {
            continue;
        }
        let index = u32::try_from(position)
            .ok()
            .and_then(|p| NATIVE_INDEX.checked_add(p))
            .ok_or_else(|| bad(format!("it is contract {position} of its transaction")))?;
        // The transaction's ret says whether the TRX moved; the info must
        // not say otherwise.
        let success = ret
            .first()
            .is_some_and(|r| r.contract_ret == ContractResult::Success as i32)
            && info.result == Code::Sucess as i32;
        found.push(Transfer {
            network: Network::Tron,
            asset: AssetId::Known(Asset::Trx),
            txid: txid.to_owned(),
            index,
            to: encode_address(&to),
            from: body_from_proto(&transfer.owner_address).map(|b| encode_address(&b)),
            amount: Amount(amount),
            success,
        });
    }
    Ok(())
}

fn token_transfers(
    info: &TransactionInfo,
    txid: &str,
    tokens: &Tokens,
    watch: &WatchRead<'_>,
    found: &mut Vec<Transfer>,
) -> Result<(), ScanError> {
    // A failed transaction moved no tokens; logs it shows are not believed.
    let succeeded = info.result == Code::Sucess as i32
        && info
            .receipt
            .as_ref()
            .is_some_and(|r| r.result == ContractResult::Success as i32);
    if !succeeded {
        return Ok(());
    }
    for (index, log) in info.log.iter().enumerate() {
        if let Some(t) = token_transfer(log, index, txid, tokens, watch)? {
            found.push(t);
        }
    }
    Ok(())
}

fn token_transfer(
    log: &Log,
    index: usize,
    txid: &str,
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<Option<Transfer>, ScanError> {
    // TRC-721 Transfer has the same topic0 but four topics: not money here.
    if log.topics.len() != 3 || log.topics[0].as_slice() != TRANSFER_TOPIC || log.data.len() != 32 {
        return Ok(None);
    }
    let Some(to) = topic_body(&log.topics[2]) else {
        return Ok(None);
    };
    if !watch.contains_key(&to) {
        return Ok(None);
    }
    let value = U256::from_be_slice(&log.data);
    // Zero-value Transfer logs are address-poisoning spam, not payments.
    if value.is_zero() {
        return Ok(None);
    }
    let bad = |why: String| ScanError::BadLog {
        tx: txid.to_owned(),
        index,
        why,
    };
    let contract = log_contract(&log.address).ok_or_else(|| {
        bad(format!(
            "names a contract of {} bytes, expected 20",
            log.address.len()
        ))
    })?;
    let index = u32::try_from(index)
        .ok()
        .filter(|i| *i < NATIVE_INDEX)
        .ok_or_else(|| bad("has an index past the log range".into()))?;
    Ok(Some(Transfer {
        network: Network::Tron,
        asset: tokens.asset_of(&contract),
        amount: amount(&value, txid),
        txid: txid.to_owned(),
        index,
        to: encode_address(&to),
        from: topic_body(&log.topics[1]).map(|b| encode_address(&b)),
        success: true,
    }))
}

/// A log names its contract by the 20-byte body; some nodes keep the 0x41.
fn log_contract(address: &[u8]) -> Option<[u8; 20]> {
    address.try_into().ok().or_else(|| body_from_proto(address))
}

/// An indexed address topic: 12 zero bytes, then the body (the EVM view
/// of a Tron address drops the 0x41).
fn topic_body(topic: &[u8]) -> Option<[u8; 20]> {
    if topic.len() != 32 {
        return None;
    }
    let (pad, body) = topic.split_at(12);
    if pad.iter().any(|b| *b != 0) {
        return None;
    }
    body.try_into().ok()
}

/// No real TRX or stablecoin amount reaches 2^128; a spam token can claim
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

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
use crate::internal::internal_trx;
use crate::proto::transaction::contract::ContractType;
use crate::proto::transaction::result::ContractResult;
use crate::proto::transaction::Raw;
use crate::proto::transaction_info::{Code, Log};
use crate::proto::{BlockExtention, TransactionExtention, TransactionInfo, TransferContract};

/// keccak256("Transfer(address,address,uint256)"): TRC-20's Transfer event,
/// the same as ERC-20's.
pub const TRANSFER_TOPIC: [u8; 32] =
    alloy_primitives::hex!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// Whether any 20 bytes of `raw` (behind Tron's 0x41 prefix, or bare) are a
/// watched address's body: an unreadable contract that might pay us.
fn names_watched(raw: &[u8], watch: &WatchRead<'_>) -> bool {
    raw.windows(20).any(|w| watch.contains_key(w))
}

/// TRX paid by a transaction's own TransferContract gets `NATIVE_INDEX` plus
/// the contract's position; log indexes stay below, so a transaction that
/// both pays TRX and emits logs keys each transfer apart.
pub const NATIVE_INDEX: u32 = 1 << 31;

/// TRX a contract sends (an internal transaction) gets `INTERNAL_INDEX`
/// plus its position among the transaction's TRX-carrying internal
/// transactions: above the TransferContract range, so neither it, the
/// logs nor each other collide.
pub const INTERNAL_INDEX: u32 = NATIVE_INDEX + (1 << 30);

/// The type a TransferContract parameter names: java-tron checks a
/// contract's `type_url` as protobuf's `Any.is` does, by the part after its
/// last `/`, whatever comes before.
const TRANSFER_TYPE: &str = "protocol.TransferContract";

/// Whether java-tron would read a parameter with this `type_url` as a
/// TransferContract.
fn names_transfer_contract(type_url: &str) -> bool {
    type_url
        .rsplit_once('/')
        .is_some_and(|(_, name)| name == TRANSFER_TYPE)
}

/// Contracts skipped because they could not be read and named no watched
/// address, since the process started.
static UNREADABLE_SKIPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many TransferContracts the scan could not read and skipped (they
/// named no watched address), since the process started.
pub fn unreadable_contracts_skipped() -> u64 {
    UNREADABLE_SKIPPED.load(std::sync::atomic::Ordering::Relaxed)
}

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

    /// USDT at its mainnet contract, TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t,
    /// and the other methods' assets recognised on Tron (USDC; see
    /// [`paywatch_core::recognised_tokens`]).
    pub fn mainnet() -> Tokens {
        let methods = [Asset::Usdt].into_iter().filter_map(|asset| {
            let contract = Method::new(asset, Network::Tron).ok()?.default_contract()?;
            Some((asset, parse_address(contract).ok()?))
        });
        let recognised = paywatch_core::recognised_tokens(Network::Tron)
            .iter()
            .filter_map(|(asset, contract)| Some((*asset, parse_address(contract).ok()?)));
        Tokens::new(methods.chain(recognised))
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
    #[error("transaction {tx}: internal transaction {position} {why}")]
    BadInternalTransaction {
        tx: String,
        position: usize,
        why: String,
    },
    #[error("transaction {tx}: log {index} {why}")]
    BadLog {
        tx: String,
        index: usize,
        why: String,
    },
}

/// Every payment in a block (`GetBlockByNum2` and the like) to a watched
/// address, given the block's infos (`GetTransactionInfoByBlockNum`): TRX
/// by TransferContract and by the internal transactions of contracts (in
/// the infos, when the node keeps them), tokens by Transfer log in the
/// infos.
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
    let mut found = Found {
        tokens,
        watch,
        senders: HashMap::new(),
        transfers: Vec::new(),
    };
    match block.transactions {
        Some(transactions) => {
            let infos = pair(block.number, transactions, block.infos)?;
            for (position, (tx, (txid, info))) in transactions.iter().zip(infos).enumerate() {
                found.trx_transfers(block.number, position, tx, &txid, info)?;
                found.token_transfers(info, &txid)?;
                found.internal_transfers(info, &txid)?;
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
                found.token_transfers(info, &id)?;
                found.internal_transfers(info, &id)?;
            }
        }
    }
    Ok(found.transfers)
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
            Ok(ContractType::TransferContract) => contract.parameter.as_ref().is_some_and(|p| {
                let to = match TransferView::read(&p.value) {
                    Some(transfer) => body_from_proto(transfer.to),
                    None => TransferContract::decode(p.value.as_slice())
                        .ok()
                        .and_then(|c| body_from_proto(&c.to_address)),
                };
                to.is_some_and(|to| watch.contains_key(&to))
            }),
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
    match pair_in_order(block, transactions, infos) {
        Some(paired) => Ok(paired),
        None => pair_by_id(block, transactions, infos),
    }
}

/// [`pair`] when the infos come in block order, as java-tron gives them:
/// each info's id is its transaction's, checked in place. `None` when
/// anything is otherwise (or wrong), for [`pair_by_id`] to sort out and
/// report; what this accepts, that would pair the same way.
fn pair_in_order<'a>(
    block: u64,
    transactions: &[TransactionExtention],
    infos: &'a [TransactionInfo],
) -> Option<Vec<([u8; 32], &'a TransactionInfo)>> {
    if transactions.len() != infos.len() {
        return None;
    }
    let mut paired = Vec::with_capacity(infos.len());
    let mut prefixes = Vec::with_capacity(infos.len());
    for (position, (tx, info)) in transactions.iter().zip(infos).enumerate() {
        let id = tx_id(block, position, tx).ok()?;
        if info_id(block, position, info).ok()? != id {
            return None;
        }
        let [a, b, c, d, e, f, g, h, ..] = id;
        prefixes.push(u64::from_le_bytes([a, b, c, d, e, f, g, h]));
        paired.push((id, info));
    }
    // No transaction twice: distinct first 8 bytes show it without a
    // map. Ids are hashes, so shared ones are all but only repeats.
    prefixes.sort_unstable();
    if prefixes.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    Some(paired)
}

/// [`pair`] by id, the infos in any order.
fn pair_by_id<'a>(
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

/// The transfers found so far, and what finding them takes.
struct Found<'a, 'w> {
    tokens: &'a Tokens,
    watch: &'a WatchRead<'w>,
    /// The T-addresses of senders seen in the block: senders repeat
    /// (exchanges, payment processors) and encoding is the dear part.
    senders: HashMap<[u8; 20], String>,
    transfers: Vec<Transfer>,
}

impl Found<'_, '_> {
    fn sender(&mut self, body: [u8; 20]) -> String {
        self.senders
            .entry(body)
            .or_insert_with(|| encode_address(&body))
            .clone()
    }

    fn trx_transfers(
        &mut self,
        block: u64,
        position: usize,
        tx: &TransactionExtention,
        txid: &[u8; 32],
        info: &TransactionInfo,
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
                tx: hex::encode(txid),
                why,
            };
            let decoded;
            let read = match contract.parameter.as_ref() {
                None => Err("it has no parameter".to_owned()),
                Some(p) if !names_transfer_contract(&p.type_url) => Err(format!(
                    "its parameter is a {:?}, not a {TRANSFER_TYPE}",
                    p.type_url
                )),
                Some(p) => match TransferView::read(&p.value) {
                    Some(transfer) => Ok(transfer),
                    None => match TransferContract::decode(p.value.as_slice()) {
                        Ok(d) => {
                            decoded = d;
                            Ok(TransferView::of(&decoded))
                        }
                        Err(e) => Err(format!("its parameter does not decode: {e}")),
                    },
                },
            };
            let transfer = match read {
                Ok(transfer) => transfer,
                // One cheap transaction paywatch cannot read must not stop
                // the watcher, unless it may be money to us.
                Err(why) => {
                    let raw = contract
                        .parameter
                        .as_ref()
                        .map_or(&[][..], |p| p.value.as_slice());
                    if names_watched(raw, self.watch) {
                        return Err(bad(why));
                    }
                    UNREADABLE_SKIPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    warn!(tx = %hex::encode(txid), block, %why,
                          "a TransferContract paywatch cannot read, naming no watched address: skipped");
                    continue;
                }
            };
            let Some(to) = body_from_proto(transfer.to) else {
                continue;
            };
            if !self.watch.contains_key(&to) {
                continue;
            }
            let amount = u128::try_from(transfer.amount)
                .map_err(|_| bad(format!("it moves a negative amount, {}", transfer.amount)))?;
            if amount == 0 {
                continue;
            }
            let index = u32::try_from(position)
                .ok()
                .map(|p| NATIVE_INDEX + p)
                .filter(|i| *i < INTERNAL_INDEX)
                .ok_or_else(|| bad(format!("it is contract {position} of its transaction")))?;
            // The transaction's ret says whether the TRX moved; the info
            // must not say otherwise.
            let success = ret
                .first()
                .is_some_and(|r| r.contract_ret == ContractResult::Success as i32)
                && info.result == Code::Sucess as i32;
            let from = body_from_proto(transfer.owner).map(|b| self.sender(b));
            self.transfers.push(Transfer {
                network: Network::Tron,
                asset: AssetId::Known(Asset::Trx),
                txid: hex::encode(txid),
                index,
                to: encode_address(&to),
                from,
                amount: Amount(amount),
                success,
                matures_at: None,
            });
        }
        Ok(())
    }

    fn token_transfers(
        &mut self,
        info: &TransactionInfo,
        txid: &[u8; 32],
    ) -> Result<(), ScanError> {
        // A failed transaction moved no tokens; logs it shows are not
        // believed.
        if !succeeded(info) {
            return Ok(());
        }
        for (index, log) in info.log.iter().enumerate() {
            self.token_transfer(log, index, txid)?;
        }
        Ok(())
    }

    fn token_transfer(
        &mut self,
        log: &Log,
        index: usize,
        txid: &[u8; 32],
    ) -> Result<(), ScanError> {
        // TRC-721 Transfer has the same topic0 but four topics: not money
        // here.
        if log.topics.len() != 3
            || log.topics[0].as_slice() != TRANSFER_TOPIC
            || log.data.len() != 32
        {
            return Ok(());
        }
        let Some(to) = topic_body(&log.topics[2]) else {
            return Ok(());
        };
        if !self.watch.contains_key(&to) {
            return Ok(());
        }
        let value = U256::from_be_slice(&log.data);
        // Zero-value Transfer logs are address-poisoning spam, not payments.
        if value.is_zero() {
            return Ok(());
        }
        let bad = |why: String| ScanError::BadLog {
            tx: hex::encode(txid),
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
        let from = topic_body(&log.topics[1]).map(|b| self.sender(b));
        self.transfers.push(Transfer {
            network: Network::Tron,
            asset: self.tokens.asset_of(&contract),
            amount: amount(&value, txid),
            txid: hex::encode(txid),
            index,
            to: encode_address(&to),
            from,
            success: true,
            matures_at: None,
        });
        Ok(())
    }
}

impl Found<'_, '_> {
    /// TRX the transaction's contracts sent to watched addresses. One whose
    /// call was rejected, or whose transaction failed, moved nothing: kept
    /// for the record, never counted, as a failed TransferContract is.
    fn internal_transfers(
        &mut self,
        info: &TransactionInfo,
        txid: &[u8; 32],
    ) -> Result<(), ScanError> {
        let succeeded = succeeded(info);
        for it in internal_trx(info) {
            let Some(to) = it.to.filter(|to| self.watch.contains_key(to)) else {
                continue;
            };
            let bad = |why: String| ScanError::BadInternalTransaction {
                tx: hex::encode(txid),
                position: it.listed_at,
                why,
            };
            let amount = it.amount.clone().map_err(bad)?;
            let index = u32::try_from(it.position)
                .ok()
                .and_then(|p| INTERNAL_INDEX.checked_add(p))
                .ok_or_else(|| bad("is past the range of internal indexes".into()))?;
            let from = it.from.map(|b| self.sender(b));
            self.transfers.push(Transfer {
                network: Network::Tron,
                asset: AssetId::Known(Asset::Trx),
                txid: hex::encode(txid),
                index,
                to: encode_address(&to),
                from,
                amount: Amount(amount),
                success: succeeded && !it.rejected,
                matures_at: None,
            });
        }
        Ok(())
    }
}

/// Whether the transaction's contract code ran to the end: the info and
/// its receipt both say so.
fn succeeded(info: &TransactionInfo) -> bool {
    info.result == Code::Sucess as i32
        && info
            .receipt
            .as_ref()
            .is_some_and(|r| r.result == ContractResult::Success as i32)
}

/// A TransferContract's fields as its parameter holds them, read in place.
#[derive(Debug, Clone, Copy)]
struct TransferView<'a> {
    owner: &'a [u8],
    to: &'a [u8],
    amount: i64,
}

impl<'a> TransferView<'a> {
    /// The fields of a TransferContract in the plain encoding java-tron
    /// writes: fields 1 to 3 (any order, repeats keeping the last) with
    /// one-byte keys and varints of at most 9 bytes. Whatever this reads,
    /// prost decodes to the same values; anything else (unknown fields,
    /// a negative amount, a malformed message) is `None`, left to prost.
    fn read(mut buf: &'a [u8]) -> Option<TransferView<'a>> {
        let mut view = TransferView {
            owner: &[],
            to: &[],
            amount: 0,
        };
        while let Some((&key, rest)) = buf.split_first() {
            buf = rest;
            match key {
                // Field 1 or 2, length-delimited.
                0x0a | 0x12 => {
                    let len = usize::try_from(varint(&mut buf)?).ok()?;
                    if len > buf.len() {
                        return None;
                    }
                    let (field, rest) = buf.split_at(len);
                    buf = rest;
                    if key == 0x0a {
                        view.owner = field;
                    } else {
                        view.to = field;
                    }
                }
                // Field 3, a varint; below 2^63, so as prost reads it.
                0x18 => view.amount = i64::try_from(varint(&mut buf)?).ok()?,
                _ => return None,
            }
        }
        Some(view)
    }

    fn of(transfer: &'a TransferContract) -> TransferView<'a> {
        TransferView {
            owner: &transfer.owner_address,
            to: &transfer.to_address,
            amount: transfer.amount,
        }
    }
}

/// A varint of at most 9 bytes (63 bits), taken off the front of `buf`.
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0;
    for shift in (0..63).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
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
fn amount(value: &U256, txid: &[u8; 32]) -> Amount {
    match u128::try_from(*value) {
        Ok(v) => Amount(v),
        Err(_) => {
            let txid = hex::encode(txid);
            warn!(%txid, %value, "transfer amount above 2^128 stored as 2^128-1");
            Amount(u128::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Transaction;

    /// xorshift64*, fixed seed: reproducible pseudo-random inputs.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % n as u64).unwrap()
        }

        fn bytes(&mut self, len: usize) -> Vec<u8> {
            (0..len).map(|_| self.next().to_le_bytes()[0]).collect()
        }
    }

    fn same(view: TransferView<'_>, decoded: &TransferContract) -> bool {
        view.owner == decoded.owner_address.as_slice()
            && view.to == decoded.to_address.as_slice()
            && view.amount == decoded.amount
    }

    #[test]
    fn the_in_place_transfer_reader_agrees_with_prost() {
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        let mut read = 0;
        for round in 0..20_000 {
            let amount = match round % 5 {
                0 => 0,
                1 => i64::MAX,
                2 => -1 - i64::try_from(rng.next() >> 1).unwrap(),
                _ => i64::try_from(rng.next() >> (rng.next() % 64)).unwrap_or(7),
            };
            let plain = TransferContract {
                owner_address: rng.bytes([21, 21, 0, 20, 3][round % 5]),
                to_address: rng.bytes([21, 0, 21, 22, 21][round % 3]),
                amount,
            }
            .encode_to_vec();
            // The plain encoding is read in place unless the amount is
            // negative (a 10-byte varint).
            let view = TransferView::read(&plain);
            assert_eq!(view.is_some(), amount >= 0, "{plain:02x?}");
            if let Some(view) = view {
                assert!(same(
                    view,
                    &TransferContract::decode(plain.as_slice()).unwrap()
                ));
                read += 1;
            }
            // Damaged, extended and reordered forms: whatever is read in
            // place is what prost decodes.
            let mut changed = plain.clone();
            match rng.below(7) {
                0 => changed.truncate(rng.below(plain.len() + 1)),
                1 if !changed.is_empty() => {
                    let at = rng.below(changed.len());
                    changed[at] = rng.bytes(1)[0];
                }
                2 => changed.extend_from_slice(&plain),
                // An unknown field, a field repeated, a key of two bytes,
                // a non-minimal length.
                3 => changed.extend_from_slice(&[0x20, 0x01]),
                4 => changed.extend_from_slice(&[0x12, 0x02, 0x41, 0x00]),
                5 => changed.extend_from_slice(&[0x9a, 0x00, 0x01, 0x41]),
                _ => changed.extend_from_slice(&[0x0a, 0x81, 0x00, 0x41]),
            }
            if let Some(view) = TransferView::read(&changed) {
                let decoded = TransferContract::decode(changed.as_slice())
                    .unwrap_or_else(|e| panic!("{changed:02x?}: read in place, prost: {e}"));
                assert!(same(view, &decoded), "{changed:02x?}");
            }
        }
        assert!(read > 10_000, "{read}");
    }

    fn tx(nonce: u8) -> TransactionExtention {
        let raw = Raw {
            timestamp: i64::from(nonce),
            ..Raw::default()
        };
        TransactionExtention {
            txid: txid_of(&raw).to_vec(),
            transaction: Some(Transaction {
                raw_data: Some(raw),
                ..Transaction::default()
            }),
            ..TransactionExtention::default()
        }
    }

    fn info(tx: &TransactionExtention) -> TransactionInfo {
        TransactionInfo {
            id: tx.txid.clone(),
            block_number: 7,
            ..TransactionInfo::default()
        }
    }

    #[test]
    fn infos_in_block_order_pair_in_place_and_anything_else_by_id() {
        let txs: Vec<_> = (0..50).map(tx).collect();
        let infos: Vec<_> = txs.iter().map(info).collect();
        let in_order = pair_in_order(7, &txs, &infos).unwrap();
        assert_eq!(in_order, pair_by_id(7, &txs, &infos).unwrap());
        assert_eq!(pair(7, &txs, &infos).unwrap(), in_order);

        // Shuffled: the long way, to the same pairs.
        let mut shuffled = infos.clone();
        shuffled.swap(3, 40);
        shuffled.reverse();
        assert_eq!(pair_in_order(7, &txs, &shuffled), None);
        assert_eq!(pair(7, &txs, &shuffled).unwrap(), in_order);

        // A transaction twice, with its info twice in step: still refused.
        let mut twice = txs.clone();
        twice[9] = txs[30].clone();
        let twice_infos: Vec<_> = twice.iter().map(info).collect();
        assert_eq!(pair_in_order(7, &twice, &twice_infos), None);
        assert_eq!(
            pair(7, &twice, &twice_infos).unwrap_err(),
            ScanError::DuplicateTransaction {
                block: 7,
                tx: hex::encode(&txs[30].txid)
            }
        );

        // Without the node's txids the ids come from raw_data, as before.
        let bare: Vec<_> = txs
            .iter()
            .map(|t| TransactionExtention {
                txid: Vec::new(),
                ..t.clone()
            })
            .collect();
        assert_eq!(pair(7, &bare, &infos).unwrap(), in_order);

        // Another block's info, one missing: the errors pair_by_id gives.
        let mut foreign = infos.clone();
        foreign[5].block_number = 8;
        assert!(matches!(
            pair(7, &txs, &foreign).unwrap_err(),
            ScanError::ForeignInfo { theirs: 8, .. }
        ));
        assert_eq!(
            pair(7, &txs, &infos[..49]).unwrap_err(),
            ScanError::MissingInfo {
                block: 7,
                tx: hex::encode(&txs[49].txid)
            }
        );
    }
}

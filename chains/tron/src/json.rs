//! java-tron's HTTP API JSON (getblockbynum, gettransactionbyid,
//! gettransactioninfobyid, gettransactioninfobyblocknum) turned back into
//! the protobuf messages it renders, so recorded answers go through the
//! same scan as the watcher's gRPC ones. Errors are the reason only; the
//! caller names the file.

use alloy_primitives::hex;
use bitcoin::hashes::{sha256, Hash};
use prost::Message;
use serde::Deserialize;

use crate::address::parse_address;
use crate::proto::block_header::Raw as HeaderRaw;
use crate::proto::internal_transaction::CallValueInfo;
use crate::proto::transaction::result::ContractResult;
use crate::proto::transaction::{self, Raw};
use crate::proto::transaction_info::{Code, Log};
use crate::proto::{
    BlockExtention, BlockHeader, InternalTransaction, ResourceReceipt, Transaction,
    TransactionExtention, TransactionInfo,
};

/// What one JSON object in a file is.
#[derive(Debug)]
pub(crate) enum Answer {
    Block(u64, BlockExtention),
    Transaction(TransactionExtention),
    Info(TransactionInfo),
}

/// Tells the three shapes apart by the keys only each has.
pub(crate) fn answer(value: serde_json::Value) -> Result<Answer, String> {
    let serde_json::Value::Object(o) = &value else {
        return Err("neither a block, a transaction nor a transaction info".into());
    };
    if o.is_empty() {
        return Err(
            "an empty answer: the node knows no such transaction, or it is not confirmed yet"
                .into(),
        );
    }
    if o.contains_key("blockID") || o.contains_key("block_header") {
        let b: JsonBlock = serde_json::from_value(value)
            .map_err(|e| format!("not a block (getblockbynum answer): {e}"))?;
        let (number, block) = block(b)?;
        Ok(Answer::Block(number, block))
    } else if o.contains_key("txID") {
        let t: JsonTransaction = serde_json::from_value(value)
            .map_err(|e| format!("not a transaction (gettransactionbyid answer): {e}"))?;
        Ok(Answer::Transaction(transaction(t)?))
    } else if o.contains_key("id") {
        let i: JsonInfo = serde_json::from_value(value)
            .map_err(|e| format!("not a transaction info (gettransactioninfobyid answer): {e}"))?;
        Ok(Answer::Info(info(i)?))
    } else {
        Err(
            "neither a block (no blockID), a transaction (no txID) nor a transaction info (no id)"
                .into(),
        )
    }
}

#[derive(Debug, Deserialize)]
struct JsonBlock {
    #[serde(rename = "blockID")]
    block_id: String,
    block_header: JsonHeader,
    /// Absent when the block holds none.
    #[serde(default)]
    transactions: Vec<JsonTransaction>,
}

#[derive(Debug, Deserialize)]
struct JsonHeader {
    raw_data: JsonHeaderRaw,
}

/// Zero values are left out of the JSON (the genesis block has no number).
#[derive(Debug, Deserialize)]
struct JsonHeaderRaw {
    #[serde(default)]
    number: i64,
    #[serde(default)]
    timestamp: i64,
    #[serde(rename = "parentHash", default)]
    parent_hash: String,
}

#[derive(Debug, Deserialize)]
struct JsonTransaction {
    #[serde(rename = "txID")]
    tx_id: String,
    raw_data_hex: Option<String>,
    #[serde(default)]
    ret: Vec<JsonRet>,
}

#[derive(Debug, Deserialize)]
struct JsonRet {
    #[serde(rename = "contractRet")]
    contract_ret: Option<String>,
    #[serde(default)]
    fee: i64,
}

#[derive(Debug, Deserialize)]
struct JsonInfo {
    id: String,
    #[serde(default)]
    fee: i64,
    #[serde(rename = "blockNumber")]
    block_number: Option<i64>,
    #[serde(rename = "blockTimeStamp", default)]
    block_time_stamp: i64,
    #[serde(rename = "contractResult", default)]
    contract_result: Vec<String>,
    contract_address: Option<String>,
    #[serde(default)]
    receipt: JsonReceipt,
    #[serde(default)]
    log: Vec<JsonLog>,
    /// "FAILED", or absent when the transaction succeeded.
    result: Option<String>,
    #[serde(rename = "resMessage")]
    res_message: Option<String>,
    /// Only from a node with `vm.saveInternalTx = true`.
    #[serde(default)]
    internal_transactions: Vec<JsonInternal>,
}

/// An internal transaction: bytes in hex (`note` too: "63616c6c" is
/// "call"), addresses in hex or as T-addresses; zero values left out.
#[derive(Debug, Deserialize)]
struct JsonInternal {
    #[serde(default)]
    hash: String,
    #[serde(default)]
    caller_address: String,
    #[serde(rename = "transferTo_address", default)]
    transfer_to_address: String,
    #[serde(rename = "callValueInfo", default)]
    call_value_info: Vec<JsonCallValue>,
    #[serde(default)]
    note: String,
    #[serde(default)]
    rejected: bool,
    #[serde(default)]
    extra: String,
}

#[derive(Debug, Deserialize)]
struct JsonCallValue {
    #[serde(rename = "callValue", default)]
    call_value: i64,
    /// Absent for TRX; a TRC-10 token's id otherwise.
    #[serde(rename = "tokenId", default)]
    token_id: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct JsonReceipt {
    energy_usage: i64,
    energy_fee: i64,
    origin_energy_usage: i64,
    energy_usage_total: i64,
    net_usage: i64,
    net_fee: i64,
    /// Absent (DEFAULT) for transactions that run no contract code.
    result: Option<String>,
    energy_penalty_total: i64,
}

#[derive(Debug, Deserialize)]
struct JsonLog {
    #[serde(default)]
    address: String,
    #[serde(default)]
    topics: Vec<String>,
    #[serde(default)]
    data: String,
}

fn bytes(field: &str, text: &str) -> Result<Vec<u8>, String> {
    hex::decode(text).map_err(|e| format!("{field} {text:?} is not hex: {e}"))
}

fn id32(field: &str, text: &str) -> Result<[u8; 32], String> {
    let b = bytes(field, text)?;
    b.as_slice()
        .try_into()
        .map_err(|_| format!("{field} {text:?} is {} bytes, expected 32", b.len()))
}

/// An address field: hex of the protobuf bytes, or a T-address where the
/// answer was asked for with `visible: true`.
fn address(field: &str, text: &str) -> Result<Vec<u8>, String> {
    if text.starts_with('T') {
        let body = parse_address(text).map_err(|e| format!("{field}: {e}"))?;
        let mut out = vec![0x41];
        out.extend_from_slice(&body);
        return Ok(out);
    }
    bytes(field, text)
}

fn block(b: JsonBlock) -> Result<(u64, BlockExtention), String> {
    let id = id32("blockID", &b.block_id)?;
    let raw = b.block_header.raw_data;
    let number = u64::try_from(raw.number)
        .map_err(|_| format!("block number {} is negative", raw.number))?;
    // A block id is its number, then 24 bytes of the header hash.
    if id[..8] != number.to_be_bytes() {
        return Err(format!(
            "blockID {} does not begin with the block's number {number}",
            b.block_id
        ));
    }
    let transactions = b
        .transactions
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let tx = t.tx_id.clone();
            transaction(t).map_err(|e| format!("transaction {i} ({tx}): {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let parent_hash = match raw.parent_hash.as_str() {
        "" => Vec::new(),
        text => bytes("parentHash", text)?,
    };
    let header = BlockHeader {
        raw_data: Some(HeaderRaw {
            number: raw.number,
            timestamp: raw.timestamp,
            parent_hash,
            ..HeaderRaw::default()
        }),
        ..BlockHeader::default()
    };
    Ok((
        number,
        BlockExtention {
            transactions,
            block_header: Some(header),
            blockid: id.to_vec(),
        },
    ))
}

/// The signed bytes are `raw_data_hex`; `raw_data` is only their rendering.
fn transaction(t: JsonTransaction) -> Result<TransactionExtention, String> {
    let id = id32("txID", &t.tx_id)?;
    let raw_hex = t
        .raw_data_hex
        .ok_or_else(|| format!("transaction {} has no raw_data_hex", t.tx_id))?;
    let raw_bytes = bytes("raw_data_hex", &raw_hex)?;
    let hashed = sha256::Hash::hash(&raw_bytes).to_byte_array();
    if hashed != id {
        return Err(format!(
            "transaction {}: its txID is not the sha256 of its raw_data_hex ({}); the answer \
             was altered or mixes two transactions",
            t.tx_id,
            hex::encode(hashed)
        ));
    }
    let raw = Raw::decode(raw_bytes.as_slice()).map_err(|e| {
        format!(
            "transaction {}: raw_data_hex is not a transaction: {e}",
            t.tx_id
        )
    })?;
    let ret = t
        .ret
        .into_iter()
        .map(|r| {
            let contract_ret = match r.contract_ret.as_deref() {
                None => ContractResult::Default,
                Some(name) => ContractResult::from_str_name(name).ok_or_else(|| {
                    format!("transaction {}: unknown contractRet {name:?}", t.tx_id)
                })?,
            };
            Ok(transaction::Result {
                fee: r.fee,
                contract_ret: contract_ret as i32,
                ..transaction::Result::default()
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(TransactionExtention {
        transaction: Some(Transaction {
            raw_data: Some(raw),
            ret,
            ..Transaction::default()
        }),
        txid: id.to_vec(),
        ..TransactionExtention::default()
    })
}

fn info(i: JsonInfo) -> Result<TransactionInfo, String> {
    let id = id32("id", &i.id)?;
    let block_number = i.block_number.ok_or_else(|| {
        format!(
            "the info of {} names no blockNumber (not confirmed yet?)",
            i.id
        )
    })?;
    let result = match i.result.as_deref() {
        None | Some("SUCESS") | Some("SUCCESS") => Code::Sucess,
        Some("FAILED") => Code::Failed,
        Some(other) => return Err(format!("the info of {} has result {other:?}", i.id)),
    };
    let receipt_result = match i.receipt.result.as_deref() {
        None => ContractResult::Default,
        Some(name) => ContractResult::from_str_name(name)
            .ok_or_else(|| format!("the info of {} has receipt result {name:?}", i.id))?,
    };
    let log = i
        .log
        .iter()
        .enumerate()
        .map(|(n, l)| {
            let field = |f: &str| format!("log {n} {f}");
            Ok(Log {
                address: address(&field("address"), &l.address)?,
                topics: l
                    .topics
                    .iter()
                    .map(|t| bytes(&field("topic"), t))
                    .collect::<Result<_, String>>()?,
                data: bytes(&field("data"), &l.data)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let internal_transactions = i
        .internal_transactions
        .iter()
        .enumerate()
        .map(|(n, it)| internal(n, it))
        .collect::<Result<Vec<_>, String>>()?;
    let r = &i.receipt;
    Ok(TransactionInfo {
        id: id.to_vec(),
        fee: i.fee,
        block_number,
        block_time_stamp: i.block_time_stamp,
        contract_result: i
            .contract_result
            .iter()
            .map(|c| bytes("contractResult", c))
            .collect::<Result<_, String>>()?,
        contract_address: match &i.contract_address {
            Some(a) => address("contract_address", a)?,
            None => Vec::new(),
        },
        receipt: Some(ResourceReceipt {
            energy_usage: r.energy_usage,
            energy_fee: r.energy_fee,
            origin_energy_usage: r.origin_energy_usage,
            energy_usage_total: r.energy_usage_total,
            net_usage: r.net_usage,
            net_fee: r.net_fee,
            result: receipt_result as i32,
            energy_penalty_total: r.energy_penalty_total,
        }),
        log,
        internal_transactions,
        result: result as i32,
        res_message: match &i.res_message {
            Some(m) => bytes("resMessage", m)?,
            None => Vec::new(),
        },
        ..TransactionInfo::default()
    })
}

fn internal(n: usize, it: &JsonInternal) -> Result<InternalTransaction, String> {
    let field = |f: &str| format!("internal transaction {n} {f}");
    let optional = |f: &str, text: &str| match text {
        "" => Ok(Vec::new()),
        text => address(&field(f), text),
    };
    Ok(InternalTransaction {
        hash: bytes(&field("hash"), &it.hash)?,
        caller_address: optional("caller_address", &it.caller_address)?,
        transfer_to_address: optional("transferTo_address", &it.transfer_to_address)?,
        call_value_info: it
            .call_value_info
            .iter()
            .map(|v| CallValueInfo {
                call_value: v.call_value,
                token_id: v.token_id.clone(),
            })
            .collect(),
        note: bytes(&field("note"), &it.note)?,
        rejected: it.rejected,
        extra: it.extra.clone(),
    })
}

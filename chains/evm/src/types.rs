//! The parts of Ethereum JSON-RPC answers paywatch reads. Lean on purpose:
//! every other field is skipped while parsing, and an unknown transaction
//! type (blobs, L2 deposits) still parses, since only these fields count.

use alloy_primitives::{Address, Bytes, B256, U256, U64};
use serde::Deserialize;

/// A block header, from `eth_getBlockByNumber(n, false)`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RpcHeader {
    pub number: U64,
    pub hash: B256,
    pub parent_hash: B256,
    pub timestamp: U64,
}

/// A block with its transactions, from `eth_getBlockByNumber(n, true)`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RpcBlock {
    pub number: U64,
    pub hash: B256,
    pub parent_hash: B256,
    pub timestamp: U64,
    pub transactions: Vec<RpcTransaction>,
    /// What the block commits its logs to: an answer about them is checked
    /// against it.
    #[serde(default)]
    pub logs_bloom: Option<alloy_primitives::Bloom>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RpcTransaction {
    pub hash: B256,
    pub from: Address,
    /// None for contract creation.
    pub to: Option<Address>,
    pub value: U256,
    /// Absent in some nodes' pending answers; mined blocks carry it.
    #[serde(default)]
    pub block_hash: Option<B256>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RpcLog {
    pub address: Address,
    pub topics: Vec<B256>,
    pub data: Bytes,
    #[serde(default)]
    pub block_hash: Option<B256>,
    #[serde(default)]
    pub transaction_hash: Option<B256>,
    #[serde(default)]
    pub log_index: Option<U64>,
    #[serde(default)]
    pub removed: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RpcReceipt {
    pub transaction_hash: B256,
    #[serde(default)]
    pub block_hash: Option<B256>,
    /// 1 success, 0 failure; pre-Byzantium receipts have a state root instead.
    #[serde(default)]
    pub status: Option<U64>,
    pub from: Address,
    #[serde(default)]
    pub to: Option<Address>,
    #[serde(default)]
    pub logs: Vec<RpcLog>,
}

impl RpcReceipt {
    /// Pre-Byzantium receipts carry no status; none of those blocks is
    /// ever watched, so a missing status reads as failure, never as money.
    pub fn succeeded(&self) -> bool {
        self.status == Some(U64::from(1))
    }
}

/// One frame of geth's `callTracer` output.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallFrame {
    #[serde(rename = "type")]
    pub kind: String,
    pub from: Address,
    #[serde(default)]
    pub to: Option<Address>,
    #[serde(default)]
    pub value: Option<U256>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub calls: Vec<CallFrame>,
}

/// One transaction's entry in `debug_traceBlockByHash`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TxTrace {
    /// Newer geth and anvil name the transaction; older answers are in block order only.
    #[serde(default)]
    pub tx_hash: Option<B256>,
    #[serde(default)]
    pub result: Option<CallFrame>,
    #[serde(default)]
    pub error: Option<String>,
}

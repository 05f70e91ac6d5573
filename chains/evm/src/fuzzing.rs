//! One block's node answers, as the JSON text of each result, through the
//! source's own decoding and translation: the entry of the fuzz targets in
//! `fuzz/`, which have no node. Each result is decoded from its text as
//! alloy's client decodes one (serde_json into the same types), and the
//! answers meet in the order `fetch_batch` and `complete` bring them.

use std::collections::HashMap;

use paywatch_core::{SourceBlock, SourceError, WatchRead};
use serde::de::DeserializeOwned;

use crate::scan::{paying_transactions, BlockAnswers, Tokens};
use crate::source::{
    answers, logs_contradict_bloom, logs_of_receipts, record_receipt, translate, Fetched,
};
use crate::types::{RpcBlock, RpcLog, RpcReceipt, TxTrace};

/// The results a node gives for one block, as JSON text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answers<'a> {
    /// `eth_getBlockByNumber(n, true)`.
    pub block: &'a str,
    /// `eth_getLogs` for the block's hash and the Transfer topic.
    pub logs: &'a str,
    /// `eth_getTransactionReceipt`, in the order the source asks: first for
    /// the transactions paying a watched address, then for those only the
    /// traces show. One missing is the node answering `null`.
    pub receipts: &'a [&'a str],
    /// `debug_traceBlockByHash` with the callTracer, when traces are on.
    pub traces: Option<&'a str>,
    /// `eth_getBlockReceipts`, asked when the logs contradict the bloom.
    pub block_receipts: Option<&'a str>,
}

/// The block the answers make, as the source hands it to the watcher;
/// `None` when the node has no such block.
pub fn translate_answers(
    given: &Answers<'_>,
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<Option<SourceBlock>, SourceError> {
    let Some(block) = decode::<Option<RpcBlock>>("eth_getBlockByNumber", given.block)? else {
        return Ok(None);
    };
    let mut receipts = given.receipts.iter();
    let mut next_receipt = || match receipts.next() {
        Some(text) => decode::<Option<RpcReceipt>>("eth_getTransactionReceipt", text),
        None => Ok(None),
    };
    let mut succeeded = HashMap::new();
    let paying = paying_transactions(
        &BlockAnswers {
            hash: block.hash,
            transactions: Some(&block.transactions),
            logs: &[],
            succeeded: &HashMap::new(),
            traces: None,
        },
        watch,
    );
    for tx in paying {
        record_receipt(&mut succeeded, block.hash, tx, next_receipt()?)?;
    }
    let mut logs: Vec<RpcLog> = decode("eth_getLogs", given.logs)?;
    if let Some(why) = logs_contradict_bloom(&block, &logs, tokens) {
        let receipts = match given.block_receipts {
            Some(text) => decode::<Option<Vec<RpcReceipt>>>("eth_getBlockReceipts", text)?,
            None => None,
        };
        logs = logs_of_receipts(&block, receipts).map_err(|detail| {
            SourceError::Transient(format!("eth_getLogs gave {why}, and its receipts {detail}"))
        })?;
    }
    // As the source does: traces that cannot be the block's are no traces.
    let (traces, untraced) = match given.traces {
        Some(text) => {
            let txs: Vec<_> = block.transactions.iter().map(|t| t.hash).collect();
            match crate::untraced::fits(
                &txs,
                decode::<Vec<TxTrace>>("debug_traceBlockByHash", text)?,
            ) {
                Ok(t) => (Some(t), None),
                Err(why) => (None, Some(why)),
            }
        }
        None => (None, None),
    };
    let mut f = Fetched {
        block,
        logs,
        traces,
        untraced,
        succeeded,
    };
    let missing: Vec<_> = paying_transactions(&answers(&f), watch)
        .into_iter()
        .filter(|tx| !f.succeeded.contains_key(tx))
        .collect();
    for tx in missing {
        record_receipt(&mut f.succeeded, f.block.hash, tx, next_receipt()?)?;
    }
    translate(&f, tokens, watch).map(Some)
}

fn decode<T: DeserializeOwned>(method: &str, text: &str) -> Result<T, SourceError> {
    serde_json::from_str(text)
        .map_err(|e| SourceError::Transient(format!("{method}: unreadable answer: {e}")))
}

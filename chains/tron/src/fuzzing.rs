//! One block's gRPC answers, as protobuf bytes, through the source's own
//! decoding and translation: the entry of the fuzz targets in `fuzz/`,
//! which have no node. Each answer is decoded as tonic's prost codec
//! decodes it, and the answers meet as `fetch_range` and `complete` bring
//! them.

use paywatch_core::{SourceBlock, SourceError, WatchRead};
use prost::Message;
use tron_grpc::{BlockExtention, TransactionInfoList};

use crate::scan::{may_pay, Tokens};
use crate::source::{block_ref, translate, Fetched};

/// The block `block` (a `GetBlockByNum2` answer) and `infos` (its
/// `GetTransactionInfoByBlockNum` answer) make, as the source hands it to
/// the watcher; `None` when the node has no such block. The infos are read
/// only where the source would ask for them.
pub fn translate_answers(
    block: &[u8],
    infos: &[u8],
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<Option<SourceBlock>, SourceError> {
    let block = BlockExtention::decode(block)
        .map_err(|e| SourceError::Transient(format!("GetBlockByNum2: {e}")))?;
    // An empty answer is how java-tron says there is no such block.
    if block.block_header.is_none() {
        return Ok(None);
    }
    let height = block_ref(&block, None)?.height;
    let infos = if may_pay(&block.transactions, watch) {
        let list = TransactionInfoList::decode(infos)
            .map_err(|e| SourceError::Transient(format!("GetTransactionInfoByBlockNum: {e}")))?;
        Some(list.transaction_info)
    } else {
        None
    };
    if infos.as_ref().is_some_and(Vec::is_empty) && !block.transactions.is_empty() {
        return Err(SourceError::Transient(format!(
            "no transaction infos for block {height}, which has {} transactions",
            block.transactions.len()
        )));
    }
    translate(
        &Fetched {
            height,
            block,
            infos,
        },
        tokens,
        watch,
    )
    .map(Some)
}

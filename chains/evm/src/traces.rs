//! `debug_traceBlockByHash` with the callTracer: asked apart from blocks
//! and logs, in batches of its own, and never able to hold a block back.
//! A block the node cannot trace gets the reason instead of its traces;
//! the source hands it out with its tokens and top-level ETH and asks
//! again later (see `untraced.rs`).

use std::time::Duration;

use alloy_primitives::B256;
use serde_json::{json, Value};
use tracing::debug;

use crate::rpc::CallError;
use crate::source::{Refusal, Shared};
use crate::types::{RpcBlock, TxTrace};
use crate::untraced::fits;

const METHOD: &str = "debug_traceBlockByHash";

/// A block's traces, or why the node gave none.
pub(crate) type BlockTraces = Result<Vec<TxTrace>, String>;

/// The tracer's options. geth stops each transaction's tracer after 5 s
/// unless told otherwise, and a heavy transaction then fails the block's
/// trace; the timeout paywatch sends is per transaction, in Go's duration
/// form that geth, erigon, reth and nethermind all read.
pub(crate) fn tracer_options(timeout: Duration) -> Value {
    json!({ "tracer": "callTracer", "timeout": format!("{}s", timeout.as_secs().max(1)) })
}

/// The traces of `blocks` (empty for a block without transactions), in
/// batches of at most `trace_batch` calls: halved while the node refuses
/// or cannot serve them in time, grown back after. Only throttling is an
/// error: a block that cannot be traced even alone gets its reason.
pub(crate) async fn fetch_traces(
    shared: &Shared,
    blocks: &[RpcBlock],
) -> Result<Vec<BlockTraces>, Refusal> {
    let mut out: Vec<BlockTraces> = vec![Ok(Vec::new()); blocks.len()];
    let wanted: Vec<usize> = (0..blocks.len())
        .filter(|&i| !blocks[i].transactions.is_empty())
        .collect();
    let mut at = 0;
    while at < wanted.len() {
        let size = shared.trace_batch.get().min(wanted.len() - at);
        let chunk = &wanted[at..at + size];
        match trace_batch(shared, blocks, chunk).await {
            Ok(traces) => {
                for (&i, t) in chunk.iter().zip(traces) {
                    out[i] = t;
                }
                at += size;
                shared.trace_batch.accepted(size);
            }
            Err(Refusal::TooLarge(why) | Refusal::TimedOut(why)) if size > 1 => {
                let fewer = shared.trace_batch.refused(size);
                debug!(%why, traces = fewer, "node refused or could not serve the traces; asking for fewer");
            }
            Err(Refusal::TooLarge(why) | Refusal::TimedOut(why)) => {
                out[chunk[0]] = Err(why);
                at += size;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// One block's traces in a request of its own, for a retry.
pub(crate) async fn trace_block(shared: &Shared, hash: B256, txs: &[B256]) -> BlockTraces {
    let answer: Result<Vec<TxTrace>, CallError> = shared
        .rpc
        .call(METHOD, (hash, tracer_options(shared.tracer_timeout())))
        .await;
    match answer {
        Ok(traces) => fits(txs, traces),
        Err(e) => Err(format!("{METHOD} at {}: {e}", shared.rpc.host())),
    }
}

/// One batched request of `debug_traceBlockByHash` for `blocks[chunk]`.
/// The request as a whole refused (too large, too slow, throttled) is the
/// caller's to handle; one call's error is that block's reason.
async fn trace_batch(
    shared: &Shared,
    blocks: &[RpcBlock],
    chunk: &[usize],
) -> Result<Vec<BlockTraces>, Refusal> {
    let options = tracer_options(shared.tracer_timeout());
    let mut batch = shared.rpc.new_batch();
    let mut waiters = Vec::with_capacity(chunk.len());
    for &i in chunk {
        let params = (blocks[i].hash, &options);
        waiters.push(
            batch
                .add::<_, Vec<TxTrace>>(METHOD, &params)
                .map_err(|e| shared.refusal(METHOD, e))?,
        );
    }
    match batch.send().await.map_err(|e| shared.refusal(METHOD, e)) {
        Ok(()) => {}
        Err(Refusal::Other(e)) => {
            // Not about size or pace: a provider that will not serve these
            // calls at all (an HTTP 403 for debug_*, say).
            let why = e.to_string();
            return Ok(chunk.iter().map(|_| Err(why.clone())).collect());
        }
        Err(e) => return Err(e),
    }
    let mut answers = Vec::with_capacity(waiters.len());
    for w in waiters {
        answers.push(w.await.map_err(crate::rpc::classify_error));
    }
    if let Some(why) = crate::rpc::size_refusal(answers.iter().filter_map(|a| a.as_ref().err())) {
        return Err(Refusal::TooLarge(why));
    }
    let mut out = Vec::with_capacity(chunk.len());
    for (&i, answer) in chunk.iter().zip(answers) {
        let b = &blocks[i];
        out.push(match answer {
            Ok(traces) => {
                let txs: Vec<B256> = b.transactions.iter().map(|t| t.hash).collect();
                fits(&txs, traces)
            }
            Err(CallError::RateLimited(why)) => return Err(Refusal::RateLimited(why)),
            // Too slow in a batch may be served alone.
            Err(CallError::TimedOut(why)) if chunk.len() > 1 => return Err(Refusal::TimedOut(why)),
            Err(e) => Err(format!("{METHOD} at {}: {e}", shared.rpc.host())),
        });
    }
    Ok(out)
}

//! An Ethereum node as a [`BlockSource`]: blocks with their transactions,
//! Transfer logs by block hash, receipts and call traces where they decide
//! a payment, read ahead in batches while the watcher writes.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{B256, U64};
use async_trait::async_trait;
use paywatch_core::{
    AtHeight, BlockRef, BlockSource, FetchRange, Network, ReadAhead, SourceBlock, SourceError,
    WatchRead, WatchSet,
};
use serde_json::json;
use tokio::sync::{Mutex, Notify};
use tracing::{debug, warn};

use crate::batch_size::BatchSize;
use crate::heads::HeadTrigger;
use crate::rpc::{CallError, Rpc};
use crate::scan::{paying_transactions, scan, BlockAnswers, Tokens, TRANSFER_TOPIC};
use crate::tip_cache::TipCache;
use crate::types::{RpcBlock, RpcHeader, RpcLog, RpcReceipt, TxTrace};
use crate::untraced::{TraceBacklog, Untraced};

/// When a block counts as final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finality {
    /// The node's `finalized` block tag: two epochs behind, after Casper finality.
    FinalizedTag,
    /// This many blocks including the block itself, for nodes without the tag.
    Confirmations(u32),
}

#[derive(Debug, Clone)]
pub struct EvmConfig {
    /// http(s):// JSON-RPC endpoint; everything is fetched here.
    pub url: String,
    /// ws(s):// endpoint whose `newHeads` wakes the watcher; polling without it.
    pub ws_url: Option<String>,
    /// The chain the addresses are for (1 mainnet, 31337 anvil); the node must agree.
    pub chain_id: Option<u64>,
    pub finality: Finality,
    pub tokens: Tokens,
    /// Ask `debug_traceBlockByHash` (callTracer) for ETH sent by contracts.
    pub traces: bool,
    /// Most blocks per batched request; fewer after a node refuses the size.
    pub blocks_per_request: usize,
    /// Batches fetched ahead while the watcher writes.
    pub batches_in_flight: usize,
    pub request_timeout: Duration,
    /// HTTP requests started per second at most (a batch is one); 0: no
    /// limit of our own. A 429's `Retry-After` is honoured besides.
    pub requests_per_second: u32,
    /// Most `debug_traceBlockByHash` calls per batched request, apart from
    /// the blocks and logs: a trace costs a node far more than a block, so
    /// traces go in smaller batches of their own; fewer after a node
    /// refuses or cannot serve them in time.
    pub traces_per_request: usize,
    /// The tracer's timeout per transaction, sent with every trace call
    /// (geth's own is 5 s). At most three quarters of `request_timeout` is
    /// sent, so the node's answer comes before the request gives up.
    pub trace_timeout: Duration,
    /// How long a block's missing traces are asked for again before the
    /// block goes to the operator (`eth_traces_unavailable`).
    pub trace_retry_for: Duration,
}

impl Default for EvmConfig {
    fn default() -> Self {
        EvmConfig {
            url: String::new(),
            ws_url: None,
            chain_id: None,
            finality: Finality::FinalizedTag,
            tokens: Tokens::default(),
            traces: false,
            blocks_per_request: 50,
            batches_in_flight: 2,
            request_timeout: Duration::from_secs(30),
            requests_per_second: 0,
            traces_per_request: 8,
            trace_timeout: Duration::from_secs(20),
            trace_retry_for: Duration::from_secs(3600),
        }
    }
}

/// What the node said about one block, kept until the watcher asks for it.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub(crate) block: RpcBlock,
    pub(crate) logs: Vec<RpcLog>,
    pub(crate) traces: Option<Vec<TxTrace>>,
    /// With traces on, why the node gave none for the block.
    pub(crate) untraced: Option<String>,
    pub(crate) succeeded: HashMap<B256, bool>,
}

impl AtHeight for Fetched {
    fn height(&self) -> u64 {
        self.block.number.to::<u64>()
    }
}

#[derive(Debug)]
struct Ahead {
    reads: ReadAhead<Fetched>,
    /// The best block when the batches were asked for: read-ahead from
    /// another branch is dropped, not handed out and then disconnected.
    tip: Option<B256>,
}

#[derive(Debug)]
pub struct EvmSource {
    shared: Arc<Shared>,
    ahead: Mutex<Ahead>,
    chain_checked: AtomicBool,
    heads: Option<HeadTrigger>,
    seen: TipCache,
    untraced: Untraced,
}

impl Drop for EvmSource {
    fn drop(&mut self) {
        self.untraced.abandon(
            "the watcher stopped (or lost its lease) while waiting for these traces; \
             no one asks for them again",
        );
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) rpc: Rpc,
    pub(crate) cfg: EvmConfig,
    watch: Arc<WatchSet>,
    /// The node's height as last seen; read-ahead never passes it.
    known_tip: AtomicU64,
    /// Blocks per batch now: halved when the node refuses, grown back after.
    batch_size: BatchSize,
    /// Traces per batch now, likewise.
    pub(crate) trace_batch: BatchSize,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvmSetupError {
    #[error("url: {0}")]
    Url(String),
    #[error("ws_url: {0}")]
    WsUrl(String),
}

impl EvmSource {
    pub fn new(cfg: EvmConfig, watch: Arc<WatchSet>) -> Result<EvmSource, EvmSetupError> {
        let rpc = Rpc::http(&cfg.url, cfg.request_timeout, cfg.requests_per_second)
            .map_err(EvmSetupError::Url)?;
        let heads = match &cfg.ws_url {
            Some(url) => Some(HeadTrigger::new(url).map_err(EvmSetupError::WsUrl)?),
            None => None,
        };
        let reads = ReadAhead::new(cfg.batches_in_flight);
        let untraced = Untraced::new(cfg.trace_retry_for);
        Ok(EvmSource {
            shared: Arc::new(Shared {
                batch_size: BatchSize::new(cfg.blocks_per_request),
                trace_batch: BatchSize::new(cfg.traces_per_request),
                rpc,
                cfg,
                watch,
                known_tip: AtomicU64::new(0),
            }),
            ahead: Mutex::new(Ahead { reads, tip: None }),
            chain_checked: AtomicBool::new(false),
            heads,
            seen: TipCache::default(),
            untraced,
        })
    }

    /// The blocks read without some of their traces: waiting for them, and
    /// given up on (each an `eth_traces_unavailable` alert).
    pub fn trace_backlog(&self) -> TraceBacklog {
        self.untraced.backlog()
    }

    /// Asks again for the traces of blocks handed out without them, a few
    /// per step. Never fails the step: what is not got now is asked later.
    async fn retry_traces(&self) {
        for due in self.untraced.due() {
            match self.header(json!(U64::from(due.height))).await {
                Ok(Some(h)) if h.hash == due.hash => {}
                Ok(_) => {
                    self.untraced.left_chain(&due);
                    continue;
                }
                Err(_) => return, // the node is away; next step
            }
            let answer = crate::traces::trace_block(&self.shared, due.hash, &due.txs).await;
            self.untraced
                .retried(&due, answer, &self.shared.watch.read());
        }
    }

    /// Traces got on a retry fill in what the block's own answer lacked;
    /// what is still missing is noted to be asked again.
    fn with_recovered_traces(&self, f: &mut Fetched) {
        if !self.shared.cfg.traces {
            return;
        }
        if let Some(recovered) = self.untraced.take_recovered(&f.block.hash) {
            match &mut f.traces {
                Some(traces) => crate::untraced::merge_into(traces, recovered),
                None => f.traces = Some(recovered),
            }
            f.untraced = None;
        }
    }

    fn note_untraced(&self, f: &Fetched) {
        if !self.shared.cfg.traces || f.block.transactions.is_empty() {
            return;
        }
        let txs: Vec<B256> = f.block.transactions.iter().map(|t| t.hash).collect();
        let (untraced, why): (Vec<usize>, String) = match (&f.traces, &f.untraced) {
            (Some(traces), _) => {
                let failed: Vec<(usize, String)> = traces
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| crate::scan::trace_failure(t).map(|w| (i, w)))
                    .collect();
                let why = failed.first().map(|(_, w)| w.clone()).unwrap_or_default();
                (failed.into_iter().map(|(i, _)| i).collect(), why)
            }
            (None, why) => (
                (0..txs.len()).collect(),
                why.clone().unwrap_or_else(|| "no traces".into()),
            ),
        };
        self.untraced
            .note(f.block.number.to::<u64>(), f.block.hash, txs, untraced, why);
    }

    /// A node on another chain would mark nothing paid, or worse.
    async fn check_chain(&self) -> Result<(), SourceError> {
        let Some(ours) = self.shared.cfg.chain_id else {
            return Ok(());
        };
        if self.chain_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let theirs: U64 = self
            .shared
            .rpc
            .call("eth_chainId", ())
            .await
            .map_err(|e| self.shared.transient("eth_chainId", e))?;
        if theirs.to::<u64>() != ours {
            return Err(SourceError::Fatal(format!(
                "node at {} serves chain id {theirs}, but paywatch is configured for chain id {ours}",
                self.shared.rpc.host()
            )));
        }
        self.chain_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    async fn header(&self, tag: serde_json::Value) -> Result<Option<RpcHeader>, SourceError> {
        self.shared
            .rpc
            .call("eth_getBlockByNumber", (tag, false))
            .await
            .map_err(|e| self.shared.transient("eth_getBlockByNumber", e))
    }

    /// The block at `height` as fetched, from read-ahead when it is there.
    async fn fetched(&self, height: u64) -> Result<Option<Fetched>, SourceError> {
        let mut ahead = self.ahead.lock().await;
        ahead.reads.fetched(height, &self.shared).await
    }

    /// Receipts fetched for payments the read-ahead could not know of: an
    /// address issued since, or ETH found only in the traces.
    async fn complete(&self, f: &mut Fetched) -> Result<(), SourceError> {
        let missing: Vec<B256> = {
            let watch = self.shared.watch.read();
            let answers = answers(f);
            paying_transactions(&answers, &watch)
                .into_iter()
                .filter(|tx| !f.succeeded.contains_key(tx))
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        let receipts = self
            .shared
            .rpc
            .batch::<_, Option<RpcReceipt>>(
                "eth_getTransactionReceipt",
                &missing.iter().map(|h| (*h,)).collect::<Vec<_>>(),
            )
            .await
            .map_err(|e| self.shared.transient("eth_getTransactionReceipt", e))?;
        for (tx, answer) in missing.iter().zip(receipts) {
            let receipt =
                answer.map_err(|e| self.shared.transient("eth_getTransactionReceipt", e))?;
            record_receipt(&mut f.succeeded, f.block.hash, *tx, receipt)?;
        }
        Ok(())
    }

    fn translate(&self, f: &Fetched) -> Result<SourceBlock, SourceError> {
        translate(f, &self.shared.cfg.tokens, &self.shared.watch.read())
    }
}

/// A fetched block as the watcher gets it. Free of the source, so the
/// fuzz entry (`fuzzing.rs`) runs the very same steps.
pub(crate) fn translate(
    f: &Fetched,
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<SourceBlock, SourceError> {
    let transfers = scan(&answers(f), tokens, watch).map_err(|e| {
        SourceError::Transient(format!(
            "block {} at height {}: {e}",
            f.block.hash, f.block.number
        ))
    })?;
    Ok(SourceBlock {
        block: block_ref(f.block.number, f.block.hash, f.block.parent_hash),
        timestamp: i64::try_from(f.block.timestamp.to::<u64>()).unwrap_or(i64::MAX),
        transfers,
    })
}

pub(crate) fn answers(f: &Fetched) -> BlockAnswers<'_> {
    BlockAnswers {
        hash: f.block.hash,
        transactions: Some(&f.block.transactions),
        logs: &f.logs,
        succeeded: &f.succeeded,
        traces: f.traces.as_deref(),
    }
}

fn block_ref(number: U64, hash: B256, parent: B256) -> BlockRef {
    BlockRef {
        height: number.to::<u64>(),
        hash: format!("{hash:#x}"),
        parent: format!("{parent:#x}"),
    }
}

/// A receipt only decides for the block it was fetched with: one from
/// another block means the chain moved in between.
pub(crate) fn record_receipt(
    succeeded: &mut HashMap<B256, bool>,
    block: B256,
    tx: B256,
    receipt: Option<RpcReceipt>,
) -> Result<(), SourceError> {
    let Some(receipt) = receipt else {
        return Err(SourceError::Transient(format!(
            "no receipt for transaction {tx:#x} of block {block:#x}; the chain may have moved"
        )));
    };
    if receipt.transaction_hash != tx || receipt.block_hash.is_some_and(|h| h != block) {
        return Err(SourceError::Transient(format!(
            "the receipt for transaction {tx:#x} is from block {}, not {block:#x}; the chain moved",
            receipt
                .block_hash
                .map(|h| format!("{h:#x}"))
                .unwrap_or_default()
        )));
    }
    succeeded.insert(tx, receipt.succeeded());
    Ok(())
}

impl FetchRange<Fetched> for Arc<Shared> {
    fn fetch_range(
        &self,
        from: u64,
        count: usize,
    ) -> impl Future<Output = Result<Vec<Fetched>, SourceError>> + Send + 'static {
        fetch_range(self.clone(), from, count)
    }

    fn batch_len(&self, from: u64) -> usize {
        Shared::batch_len(self, from)
    }
}

impl Shared {
    /// The tracer timeout sent: the configured one, but short enough that a
    /// trace that runs out of time is still answered within the request.
    pub(crate) fn tracer_timeout(&self) -> Duration {
        let within = self.cfg.request_timeout.saturating_mul(3) / 4;
        self.cfg.trace_timeout.min(within)
    }

    fn transient(&self, method: &str, e: CallError) -> SourceError {
        SourceError::Transient(format!("{method} at {}: {e}", self.rpc.host()))
    }

    fn batch_len(&self, from: u64) -> usize {
        let tip = self.known_tip.load(Ordering::Relaxed);
        let left =
            usize::try_from(tip.saturating_add(1).saturating_sub(from)).unwrap_or(usize::MAX);
        left.min(self.batch_size.get())
    }
}

/// Heights `from..from+count`, as far as the node has them, with what each
/// block paid. Halves the batch while the node refuses its size, and still
/// covers the whole range (in smaller batches), so the read-ahead behind it
/// has no gap.
async fn fetch_range(
    shared: Arc<Shared>,
    from: u64,
    count: usize,
) -> Result<Vec<Fetched>, SourceError> {
    let want = count.max(1);
    let mut size = want;
    let mut throttled = 0u32;
    let mut out: Vec<Fetched> = Vec::with_capacity(want);
    while out.len() < want {
        let ask = size.min(want - out.len());
        match fetch_batch(&shared, from + out.len() as u64, ask).await {
            Ok(fetched) => {
                shared.batch_size.accepted(ask);
                let got = fetched.len();
                out.extend(fetched);
                if got < ask {
                    break; // the chain ends here
                }
            }
            // Too large or too slow: the same ask would fail for ever.
            Err(Refusal::TooLarge(why) | Refusal::TimedOut(why)) if ask > 1 => {
                size = shared.batch_size.refused(ask);
                debug!(%why, blocks = size, "node refused or could not serve the batch; asking for fewer blocks");
            }
            Err(Refusal::TooLarge(why)) => {
                return Err(SourceError::Transient(format!(
                    "node at {} refuses even one block's answers ({why}); raise its limits",
                    shared.rpc.host()
                )))
            }
            Err(Refusal::TimedOut(why)) => {
                return Err(SourceError::Transient(format!(
                    "node at {} cannot serve even one block's answers in time ({why}); raise \
                     rpc.timeout_secs, or use a faster node",
                    shared.rpc.host()
                )))
            }
            // Throttled: not a size problem. Wait and ask the same again,
            // a few times, before the watcher's own backoff takes over.
            Err(Refusal::RateLimited(why)) => {
                throttled += 1;
                if throttled > RATE_LIMIT_RETRIES {
                    return Err(SourceError::Transient(format!(
                        "node at {} keeps throttling ({why}); set rpc.requests_per_second to \
                         the plan's rate, lower rpc.batches_in_flight, or raise the plan's limits",
                        shared.rpc.host()
                    )));
                }
                let wait = Duration::from_millis(500 << throttled.min(5));
                debug!(%why, wait_ms = wait.as_millis() as u64, "node throttles; waiting");
                tokio::time::sleep(wait).await;
            }
            Err(Refusal::Other(e)) => return Err(e),
        }
    }
    Ok(out)
}

/// How often one range waits out a throttling provider before giving the
/// error to the watcher (whose backoff then shows it `degraded`).
const RATE_LIMIT_RETRIES: u32 = 5;

pub(crate) enum Refusal {
    TooLarge(String),
    TimedOut(String),
    RateLimited(String),
    Other(SourceError),
}

impl Shared {
    pub(crate) fn refusal(&self, method: &str, e: CallError) -> Refusal {
        match e {
            CallError::TooLarge(why) => Refusal::TooLarge(why),
            CallError::TimedOut(why) => Refusal::TimedOut(why),
            CallError::Timeout(after) => Refusal::TimedOut(format!("no answer within {after:?}")),
            CallError::RateLimited(why) => Refusal::RateLimited(why),
            other => Refusal::Other(self.transient(method, other)),
        }
    }
}

async fn fetch_batch(shared: &Shared, from: u64, count: usize) -> Result<Vec<Fetched>, Refusal> {
    let heights: Vec<(U64, bool)> = (0..count as u64)
        .map(|i| (U64::from(from + i), true))
        .collect();
    let answers = shared
        .rpc
        .batch::<_, Option<RpcBlock>>("eth_getBlockByNumber", &heights)
        .await
        .map_err(|e| shared.refusal("eth_getBlockByNumber", e))?;
    if let Some(why) = crate::rpc::size_refusal(answers.iter().filter_map(|a| a.as_ref().err())) {
        return Err(Refusal::TooLarge(why));
    }
    let mut blocks = Vec::with_capacity(count);
    for (i, answer) in answers.into_iter().enumerate() {
        let wanted = from + i as u64;
        match answer.map_err(|e| shared.refusal("eth_getBlockByNumber", e))? {
            Some(b) if b.number.to::<u64>() == wanted => blocks.push(b),
            Some(b) => {
                return Err(Refusal::Other(SourceError::Transient(format!(
                "eth_getBlockByNumber: asked for block {wanted}, the node answered with block {}",
                b.number
            ))))
            }
            None => break,
        }
    }
    if blocks.is_empty() {
        return Ok(Vec::new());
    }

    let mut batch = shared.rpc.new_batch();
    let add = |e| shared.refusal("batch", e);
    let mut logs = Vec::with_capacity(blocks.len());
    let mut receipts = Vec::new();
    {
        let watch = shared.watch.read();
        for b in &blocks {
            if b.transactions.is_empty() {
                logs.push(None);
                continue;
            }
            let filter = json!([{ "blockHash": b.hash, "topics": [TRANSFER_TOPIC] }]);
            logs.push(Some(
                batch
                    .add::<_, Vec<RpcLog>>("eth_getLogs", &filter)
                    .map_err(add)?,
            ));
            let answers = BlockAnswers {
                hash: b.hash,
                transactions: Some(&b.transactions),
                logs: &[],
                succeeded: &HashMap::new(),
                traces: None,
            };
            for tx in paying_transactions(&answers, &watch) {
                let w = batch
                    .add::<_, Option<RpcReceipt>>("eth_getTransactionReceipt", &(tx,))
                    .map_err(add)?;
                receipts.push((b.hash, tx, w));
            }
        }
    }
    // Blocks without transactions need no second round trip.
    if logs.iter().any(Option::is_some) {
        batch.send().await.map_err(|e| shared.refusal("batch", e))?;
    }

    // Every answer first, judged together: geth refuses a big batch by
    // answering one call with "batch too large" and leaving the rest
    // unanswered, which must read as too large, not as a broken connection.
    let mut receipt_answers = Vec::with_capacity(receipts.len());
    for (block, tx, w) in receipts {
        receipt_answers.push((block, tx, w.await.map_err(crate::rpc::classify_error)));
    }
    let mut log_answers = Vec::with_capacity(logs.len());
    for w in logs {
        log_answers.push(match w {
            Some(w) => w.await.map_err(crate::rpc::classify_error),
            None => Ok(Vec::new()),
        });
    }
    let errors = receipt_answers
        .iter()
        .filter_map(|(_, _, a)| a.as_ref().err())
        .chain(log_answers.iter().filter_map(|a| a.as_ref().err()));
    if let Some(why) = crate::rpc::size_refusal(errors) {
        return Err(Refusal::TooLarge(why));
    }
    let trace_answers: Vec<Option<crate::traces::BlockTraces>> = if shared.cfg.traces {
        crate::traces::fetch_traces(shared, &blocks)
            .await?
            .into_iter()
            .map(Some)
            .collect()
    } else {
        vec![None; blocks.len()]
    };

    let mut succeeded: HashMap<B256, HashMap<B256, bool>> = HashMap::new();
    for (block, tx, answer) in receipt_answers {
        let receipt = answer.map_err(|e| shared.refusal("eth_getTransactionReceipt", e))?;
        record_receipt(succeeded.entry(block).or_default(), block, tx, receipt)
            .map_err(Refusal::Other)?;
    }
    let mut out = Vec::with_capacity(blocks.len());
    for ((block, logs), traces) in blocks.into_iter().zip(log_answers).zip(trace_answers) {
        let mut logs = logs.map_err(|e| shared.refusal("eth_getLogs", e))?;
        if let Some(why) = logs_contradict_bloom(&block, &logs, &shared.cfg.tokens) {
            // A node that did not know the block yet (behind a load
            // balancer, reth and Besu by hash, Erigon's race) answers
            // nothing rather than an error. The receipts say what is there.
            debug!(block = %block.hash, %why, "eth_getLogs answer refused; reading the block's receipts");
            logs = transfer_logs_from_receipts(shared, &block, &why).await?;
        }
        let (traces, untraced) = match traces {
            Some(Ok(t)) => (Some(t), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        out.push(Fetched {
            succeeded: succeeded.remove(&block.hash).unwrap_or_default(),
            block,
            logs,
            traces,
            untraced,
        });
    }
    Ok(out)
}

/// Why an `eth_getLogs` answer cannot be the block's Transfer logs, by what
/// the block's `logsBloom` says: none at all where the bloom has the
/// Transfer event, or none from a configured token contract the bloom names.
/// `None` when the answer fits (or the node gave no bloom).
pub(crate) fn logs_contradict_bloom(
    block: &RpcBlock,
    logs: &[RpcLog],
    tokens: &Tokens,
) -> Option<String> {
    use alloy_primitives::BloomInput;
    let bloom = block.logs_bloom.as_ref()?;
    if !bloom.contains_input(BloomInput::Raw(TRANSFER_TOPIC.as_slice())) {
        return None;
    }
    if logs.is_empty() {
        return Some("no Transfer log, where the block's logsBloom has the Transfer event".into());
    }
    tokens.contracts().find_map(|(contract, asset)| {
        (bloom.contains_input(BloomInput::Raw(contract.as_slice()))
            && !logs.iter().any(|l| l.address == *contract))
        .then(|| {
            format!(
                "no log of the {asset} contract {contract:#x}, which the block's logsBloom names"
            )
        })
    })
}

/// The block's Transfer logs, read from its receipts
/// (`eth_getBlockReceipts`), when its `eth_getLogs` answer was refused.
async fn transfer_logs_from_receipts(
    shared: &Shared,
    block: &RpcBlock,
    why: &str,
) -> Result<Vec<RpcLog>, Refusal> {
    let receipts: Option<Vec<RpcReceipt>> = shared
        .rpc
        .call("eth_getBlockReceipts", (block.hash,))
        .await
        .map_err(|e| shared.refusal("eth_getBlockReceipts", e))?;
    logs_of_receipts(block, receipts).map_err(|detail| {
        Refusal::Other(SourceError::Transient(format!(
            "node at {}: eth_getLogs for block {:#x} gave {why}, and its receipts {detail}; \
             asking again",
            shared.rpc.host(),
            block.hash
        )))
    })
}

/// The Transfer logs of `block`'s receipts; why not, when they cannot be
/// its receipts.
pub(crate) fn logs_of_receipts(
    block: &RpcBlock,
    receipts: Option<Vec<RpcReceipt>>,
) -> Result<Vec<RpcLog>, String> {
    let receipts = receipts.ok_or_else(|| "are not served".to_owned())?;
    if receipts.len() != block.transactions.len()
        || receipts
            .iter()
            .any(|r| r.block_hash.is_some_and(|h| h != block.hash))
    {
        return Err(format!(
            "do not match it ({} for {} transactions)",
            receipts.len(),
            block.transactions.len()
        ));
    }
    // A failed transaction emits no logs, so every log here is from a
    // successful one, as eth_getLogs would have said.
    Ok(receipts
        .into_iter()
        .flat_map(|r| r.logs)
        .filter(|l| l.topics.first() == Some(&TRANSFER_TOPIC))
        .collect())
}

#[async_trait]
impl BlockSource for EvmSource {
    fn network(&self) -> Network {
        Network::Ethereum
    }

    fn unread_blocks(&self) -> Option<paywatch_core::UnreadBlocks> {
        let backlog = self.untraced.backlog();
        self.shared
            .cfg
            .traces
            .then_some(paywatch_core::UnreadBlocks {
                waiting: backlog.waiting,
                given_up: backlog.given_up,
                lowest: backlog.lowest,
            })
    }

    fn balance_backstop(&self) -> Option<paywatch_core::BalanceReads> {
        let backlog = self.untraced.backlog();
        crate::balance::backstop_needed(self.shared.cfg.traces, backlog.waiting, backlog.given_up)
            .then_some(paywatch_core::BalanceReads::AtHeight)
    }

    async fn native_balances(
        &self,
        addresses: &[String],
        at_height: u64,
    ) -> Result<Option<Vec<paywatch_core::NativeBalance>>, SourceError> {
        crate::balance::native_balances(&self.shared.rpc, addresses, at_height)
            .await
            .map(Some)
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        self.check_chain().await?;
        if let Some(heads) = &self.heads {
            heads.ensure_running();
        }
        let number: U64 = self
            .shared
            .rpc
            .call("eth_blockNumber", ())
            .await
            .map_err(|e| self.shared.transient("eth_blockNumber", e))?;
        if let Some(same) = self.seen.tip_at(number.to::<u64>()) {
            self.retry_traces().await;
            return Ok(same);
        }
        let tip = self.header(json!("latest")).await?.ok_or_else(|| {
            SourceError::Transient(format!(
                "node at {} has no latest block",
                self.shared.rpc.host()
            ))
        })?;
        self.shared
            .known_tip
            .store(tip.number.to::<u64>(), Ordering::Relaxed);
        let mut ahead = self.ahead.lock().await;
        if let Some(seen) = ahead.tip.replace(tip.hash) {
            if seen != tip.hash && seen != tip.parent_hash {
                // Not a plain extension: what was read ahead may be another branch.
                ahead.reads.clear();
            }
        }
        drop(ahead);
        let tip = block_ref(tip.number, tip.hash, tip.parent_hash);
        self.seen.set_tip(&tip);
        self.retry_traces().await;
        Ok(tip)
    }

    /// Read again only once the tip has moved (see [`TipCache`]): finality
    /// comes with new blocks, so a poll that found none would read the same.
    async fn final_height(&self) -> Result<u64, SourceError> {
        let tip = self.shared.known_tip.load(Ordering::Relaxed);
        match self.shared.cfg.finality {
            Finality::FinalizedTag => {
                if let Some(f) = self.seen.finalized_at(tip).filter(|_| tip > 0) {
                    return Ok(f);
                }
                let f = match self.header(json!("finalized")).await? {
                    Some(h) => h.number.to::<u64>(),
                    None => 0,
                };
                self.seen.set_finalized(tip, f);
                Ok(f)
            }
            Finality::Confirmations(n) => {
                let tip = match tip {
                    0 => self
                        .header(json!("latest"))
                        .await?
                        .ok_or_else(|| {
                            SourceError::Transient("the node has no latest block".into())
                        })?
                        .number
                        .to::<u64>(),
                    known => known,
                };
                Ok(tip.saturating_add(1).saturating_sub(u64::from(n.max(1))))
            }
        }
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        let Some(mut f) = self.fetched(height).await? else {
            return Ok(None);
        };
        self.with_recovered_traces(&mut f);
        let done = match self.complete(&mut f).await {
            Ok(()) => self.translate(&f),
            Err(e) => Err(e),
        };
        if done.is_ok() {
            self.note_untraced(&f);
        }
        if let Err(e) = &done {
            warn!(error = %e, height, "unusable answer; nothing from it is recorded");
            // Nothing read ahead after a bad answer is trusted either.
            self.ahead.lock().await.reads.clear();
        }
        done.map(Some)
    }

    /// A final block is read once (see [`TipCache`]).
    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, SourceError> {
        if let Some(known) = self.seen.final_block(height) {
            return Ok(Some(known));
        }
        let found = self
            .header(json!(U64::from(height)))
            .await?
            .filter(|h| h.number.to::<u64>() == height)
            .map(|h| block_ref(h.number, h.hash, h.parent_hash));
        if let Some(b) = &found {
            self.seen.set_final_block(b);
        }
        Ok(found)
    }

    fn head_signal(&self) -> Option<Arc<Notify>> {
        self.heads.as_ref().map(HeadTrigger::signal)
    }

    /// A block handed out without some traces, whose traces since show ETH
    /// sent by a contract to a watched address.
    fn missed_from(&self) -> Option<u64> {
        self.untraced.missed_from()
    }

    fn missed_queued(&self, from: u64) {
        self.untraced.missed_queued(from)
    }
}

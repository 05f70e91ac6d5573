//! A bitcoind or litecoind node as a [`BlockSource`]: raw blocks over RPC,
//! read ahead in batches while the watcher writes, and the mempool.

use std::collections::{HashMap, HashSet, VecDeque};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bitcoin::BlockHash;
use paywatch_core::{
    BlockRef, BlockSource, Network, SourceBlock, SourceError, Unconfirmed, WatchSet,
};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::block::{from_hex, transaction_outputs, RawBlock};
use crate::params::Params;
use crate::rpc::{NodeRpc, RpcError, RPC_INVALID_ADDRESS_OR_KEY, RPC_INVALID_PARAMETER};
use crate::scan::{mature_coinbase, scan_block, scan_outputs};
use crate::wallet_mempool::WalletMempool;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub params: Params,
    /// A block with this many confirmations is final (3 for BTC, 6 for LTC by default).
    pub confirmations: u32,
    /// Blocks fetched per batched request while catching up.
    pub blocks_per_request: usize,
    /// Follow the mempool, so payments show as `confirming` at zero confirmations.
    pub mempool: bool,
    /// Follow it through this watch-only wallet on the node, which lists only
    /// what pays a watched address, instead of the whole `getrawmempool`.
    /// The watch set must be [`listing`](WatchSet::listing).
    pub mempool_wallet: Option<String>,
}

pub struct NodeSource {
    rpc: Arc<NodeRpc>,
    cfg: NodeConfig,
    watch: Arc<WatchSet>,
    /// The node's height as last seen; read-ahead never passes it.
    known_tip: Arc<AtomicU64>,
    /// The size of the largest block of the last batch, to size the next.
    block_bytes: AtomicU64,
    chain_checked: std::sync::atomic::AtomicBool,
    ahead: Mutex<ReadAhead>,
    mempool: Mutex<HashMap<String, Vec<OwnedOutput>>>,
    wallet: Option<WalletMempool>,
    /// The best block as last read, and the final block read while it was
    /// best: an idle poll asks only whether the best block is still it.
    memo: std::sync::Mutex<TipMemo>,
    /// Where the node's P2P announcements are heard (`with_p2p`), and the
    /// listener, started by the watcher's first look at `head_signal`
    /// (inside the runtime; a source is also built outside one, by
    /// `config check`).
    p2p: Option<(
        crate::p2p::Target,
        std::sync::OnceLock<crate::p2p::P2pTrigger>,
    )>,
}

#[derive(Default)]
struct TipMemo {
    tip: Option<BlockRef>,
    settled: Option<BlockRef>,
}

impl std::fmt::Debug for NodeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSource")
            .field("rpc", &self.rpc)
            .field("cfg", &self.cfg)
            .finish()
    }
}

type Fetched = Vec<(u64, String, Vec<u8>)>;

/// Raw block bytes one batched request aims at (the hex answer is twice that).
const BATCH_BYTES: usize = 16 << 20;

#[derive(Default)]
struct ReadAhead {
    ready: VecDeque<(u64, String, Vec<u8>)>,
    pending: Option<(u64, JoinHandle<Result<Fetched, SourceError>>)>,
    /// The best block when the batches were asked for: read-ahead from
    /// another branch is dropped, not handed out and then disconnected.
    tip: Option<String>,
    last_served: Option<u64>,
}

impl ReadAhead {
    fn clear(&mut self) {
        self.ready.clear();
        self.last_served = None;
        if let Some((_, h)) = self.pending.take() {
            h.abort();
        }
    }
}

struct OwnedOutput {
    index: u32,
    value: u64,
    script: bitcoin::ScriptBuf,
}

#[derive(Deserialize)]
struct HeaderInfo {
    height: u64,
    hash: String,
    previousblockhash: Option<String>,
}

impl NodeSource {
    pub fn new(rpc: NodeRpc, cfg: NodeConfig, watch: Arc<WatchSet>) -> NodeSource {
        let rpc = Arc::new(rpc);
        NodeSource {
            watch,
            known_tip: Arc::new(AtomicU64::new(0)),
            // Until a batch says otherwise, assume full mainnet blocks.
            block_bytes: AtomicU64::new(2 << 20),
            chain_checked: std::sync::atomic::AtomicBool::new(false),
            ahead: Mutex::new(ReadAhead::default()),
            mempool: Mutex::new(HashMap::new()),
            wallet: cfg
                .mempool_wallet
                .as_deref()
                .map(|name| WalletMempool::new(rpc.clone(), name)),
            memo: std::sync::Mutex::new(TipMemo::default()),
            p2p: None,
            rpc,
            cfg,
        }
    }

    /// Hears the node's P2P announcements of new blocks and transactions,
    /// so the watcher looks the moment the node knows rather than at its
    /// next poll: at `address` (host:port), or at the RPC host on the
    /// chain's P2P port. Polling stands in while the port cannot be used.
    /// Needs a Tokio runtime; listens until the source is dropped.
    pub fn with_p2p(mut self, address: Option<String>) -> NodeSource {
        let target = crate::p2p::Target {
            rpc: self.rpc.clone(),
            network: self.cfg.params.network,
            address,
        };
        self.p2p = Some((target, std::sync::OnceLock::new()));
        self
    }

    /// The listener, started on first use (needs a Tokio runtime).
    fn p2p(&self) -> Option<&crate::p2p::P2pTrigger> {
        let (target, trigger) = self.p2p.as_ref()?;
        Some(trigger.get_or_init(|| crate::p2p::spawn(target.clone())))
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, TipMemo> {
        self.memo.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn params(&self) -> &Params {
        &self.cfg.params
    }

    /// The node must serve the chain the addresses are for: a mainnet
    /// watcher on a testnet node would mark nothing paid, or worse.
    async fn check_chain(&self) -> Result<(), SourceError> {
        if self.chain_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let info: Value = self
            .rpc
            .call("getblockchaininfo", json!([]))
            .await
            .map_err(transient)?;
        let Some(chain) = info.get("chain").and_then(Value::as_str) else {
            return Err(SourceError::Transient(format!(
                "getblockchaininfo: unreadable answer from {}: no chain name",
                self.rpc.url()
            )));
        };
        let theirs = crate::params::Chain::from_str(chain)
            .map_err(|e| SourceError::Fatal(format!("node at {}: {e}", self.rpc.url())))?;
        if theirs != self.cfg.params.chain {
            return Err(SourceError::Fatal(format!(
                "node at {} serves {} chain '{chain}', but paywatch is configured for {} {}",
                self.rpc.url(),
                self.cfg.params.network,
                self.cfg.params.network,
                self.cfg.params.chain
            )));
        }
        self.chain_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    async fn header(&self, hash: &str) -> Result<Option<BlockRef>, SourceError> {
        match self
            .rpc
            .call::<HeaderInfo>("getblockheader", json!([hash, true]))
            .await
        {
            Ok(h) if h.hash != hash => Err(SourceError::Transient(format!(
                "getblockheader: asked for block {hash}, the node answered with {}",
                h.hash
            ))),
            Ok(h) => Ok(Some(BlockRef {
                height: h.height,
                hash: h.hash,
                parent: h.previousblockhash.unwrap_or_default(),
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(transient(e)),
        }
    }

    /// The raw block at `height`, from read-ahead when it is there.
    async fn raw_block(&self, height: u64) -> Result<Option<(String, Vec<u8>)>, SourceError> {
        let mut ahead = self.ahead.lock().await;
        // A reorg walk asks downwards: one block each, nothing read ahead.
        if ahead.last_served.is_some_and(|last| height <= last) {
            ahead.clear();
            let fetched = fetch_range(self.rpc.clone(), height, 1).await?;
            return Ok(fetched
                .into_iter()
                .next()
                .map(|(_, hash, bytes)| (hash, bytes)));
        }
        if ahead.ready.front().is_none_or(|(h, _, _)| *h != height) {
            ahead.ready.clear();
            match ahead.pending.take() {
                Some((from, handle)) if from == height => {
                    let fetched = handle
                        .await
                        .map_err(|e| SourceError::Transient(format!("read-ahead task: {e}")))??;
                    ahead.ready.extend(fetched);
                }
                other => {
                    if let Some((_, h)) = other {
                        h.abort();
                    }
                    // Asked for directly, the block is fetched even when the
                    // tip as last seen is below it: it may be stale.
                    let count = self.batch_len(height).max(1);
                    let fetched = fetch_range(self.rpc.clone(), height, count).await?;
                    ahead.ready.extend(fetched);
                }
            }
        }
        if let Some(largest) = ahead.ready.iter().map(|(_, _, b)| b.len()).max() {
            self.block_bytes.store(
                u64::try_from(largest).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
        let Some((_, hash, bytes)) = ahead.ready.pop_front() else {
            return Ok(None);
        };
        ahead.last_served = Some(height);
        // Keep one batch in flight behind the one being handed out.
        if ahead.pending.is_none() {
            let next = ahead.ready.back().map_or(height, |(h, _, _)| *h) + 1;
            let count = self.batch_len(next);
            if count > 0 {
                let rpc = self.rpc.clone();
                let handle = tokio::spawn(fetch_range(rpc, next, count));
                ahead.pending = Some((next, handle));
            }
        }
        Ok(Some((hash, bytes)))
    }

    /// Up to `blocks_per_request` blocks, but about [`BATCH_BYTES`] at most:
    /// regtest blocks of kilobytes go a hundred at a time, mainnet blocks of
    /// megabytes a few, so one answer never holds hundreds of megabytes.
    fn batch_len(&self, from: u64) -> usize {
        let tip = self.known_tip.load(Ordering::Relaxed);
        let left =
            usize::try_from(tip.saturating_add(1).saturating_sub(from)).unwrap_or(usize::MAX);
        let typical =
            usize::try_from(self.block_bytes.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        let by_size = BATCH_BYTES / typical.clamp(1, BATCH_BYTES);
        // Nothing past the tip: a block read there on speculation comes
        // back empty, and the block mined meanwhile would be missed until
        // the next poll. The next tip finds it.
        left.min(by_size).min(self.cfg.blocks_per_request.max(1))
    }

    fn translate(&self, height: u64, hash: &str, bytes: &[u8]) -> Result<SourceBlock, SourceError> {
        let bad = |why: String| {
            SourceError::Transient(format!(
                "{} block {hash} at height {height} is unusable: {why}",
                self.cfg.params.network
            ))
        };
        let wanted = BlockHash::from_str(hash).map_err(|e| bad(format!("block hash: {e}")))?;
        let block = RawBlock::parse(bytes).map_err(|e| bad(e.to_string()))?;
        block.verify(Some(wanted)).map_err(|e| bad(e.to_string()))?;
        let mut transfers = scan_block(&block, &self.cfg.params, &self.watch.read());
        mature_coinbase(&block, &mut transfers, height, self.cfg.confirmations);
        Ok(SourceBlock {
            block: BlockRef {
                height,
                hash: hash.to_owned(),
                parent: block.header.prev_blockhash.to_string(),
            },
            timestamp: i64::from(block.header.time),
            transfers,
        })
    }
}

/// Heights `from..from+count` (as far as the node has them), as raw blocks.
async fn fetch_range(rpc: Arc<NodeRpc>, from: u64, count: usize) -> Result<Fetched, SourceError> {
    let heights: Vec<Value> = (0..count as u64).map(|i| json!([from + i])).collect();
    let mut hashes = Vec::with_capacity(count);
    for (i, answer) in rpc
        .batch::<String>("getblockhash", &heights)
        .await
        .map_err(transient)?
        .into_iter()
        .enumerate()
    {
        match answer {
            Ok(hash) => hashes.push((from + i as u64, hash)),
            Err(e) if is_not_found(&e) => break,
            Err(e) => return Err(transient(e)),
        }
    }
    let params: Vec<Value> = hashes.iter().map(|(_, h)| json!([h, 0])).collect();
    let mut out = Vec::with_capacity(hashes.len());
    for ((height, hash), answer) in hashes.into_iter().zip(
        rpc.batch::<String>("getblock", &params)
            .await
            .map_err(transient)?,
    ) {
        match answer {
            Ok(hex) => {
                let bytes = from_hex(&hex).map_err(|e| {
                    SourceError::Transient(format!("block {hash} at height {height}: {e}"))
                })?;
                out.push((height, hash, bytes));
            }
            // Replaced between the two calls: hand out what came before it.
            Err(e) if is_not_found(&e) => break,
            // Asking again never brings a pruned block back.
            Err(e) if is_pruned(&e) => {
                return Err(SourceError::Fatal(format!(
                    "the node pruned block {hash} at height {height} ({e}): paywatch needs every \
                     block from height {height} on. Run the node unpruned, or with a prune depth \
                     that keeps more than paywatch's lag behind the tip, or point paywatch at a \
                     node that still has the block; the watcher stays halted until then"
                )))
            }
            Err(e) => return Err(transient(e)),
        }
    }
    Ok(out)
}

/// Bitcoin Core's and Litecoin Core's answer for a block a pruned node
/// deleted: RPC_MISC_ERROR, "Block not available (pruned data)".
fn is_pruned(e: &RpcError) -> bool {
    matches!(e, RpcError::Node { code: -1, message, .. } if message.contains("pruned"))
}

fn is_not_found(e: &RpcError) -> bool {
    matches!(e, RpcError::Node { code, .. } if *code == RPC_INVALID_PARAMETER || *code == RPC_INVALID_ADDRESS_OR_KEY)
}

fn transient(e: RpcError) -> SourceError {
    match e {
        RpcError::Unauthorized(_) => {
            SourceError::Transient(format!("{e}; check the RPC credentials"))
        }
        other => SourceError::Transient(other.to_string()),
    }
}

#[async_trait]
impl BlockSource for NodeSource {
    fn network(&self) -> Network {
        self.cfg.params.network
    }

    fn head_signal(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.p2p().map(|p| p.signal.clone())
    }

    fn push_fallback(&self) -> Option<String> {
        self.p2p.as_ref()?.1.get()?.state.fallback()
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        self.check_chain().await?;
        let best: String = self
            .rpc
            .call("getbestblockhash", json!([]))
            .await
            .map_err(transient)?;
        let known = self.memo().tip.clone().filter(|t| t.hash == best);
        let tip = match known {
            Some(tip) => tip,
            None => {
                let tip = self.header(&best).await?.ok_or_else(|| {
                    SourceError::Transient(format!("the best block {best} vanished; retrying"))
                })?;
                *self.memo() = TipMemo {
                    tip: Some(tip.clone()),
                    settled: None,
                };
                tip
            }
        };
        self.known_tip.store(tip.height, Ordering::Relaxed);
        let mut ahead = self.ahead.lock().await;
        if let Some(seen) = ahead.tip.replace(tip.hash.clone()) {
            if seen != tip.hash && seen != tip.parent {
                // Not a plain extension: what was read ahead may be another branch.
                ahead.clear();
            }
        }
        Ok(tip)
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        let count: u64 = self
            .rpc
            .call("getblockcount", json!([]))
            .await
            .map_err(transient)?;
        // Heights are stored as signed 64-bit; beyond that it is garbage.
        if i64::try_from(count).is_err() {
            return Err(SourceError::Transient(format!(
                "getblockcount: unreadable answer: height {count} is out of range"
            )));
        }
        Ok(count
            .saturating_add(1)
            .saturating_sub(u64::from(self.cfg.confirmations.max(1))))
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        let Some((hash, bytes)) = self.raw_block(height).await? else {
            return Ok(None);
        };
        match self.translate(height, &hash, &bytes) {
            Ok(b) => Ok(Some(b)),
            Err(e) => {
                // Nothing read ahead after a bad answer is trusted either.
                self.ahead.lock().await.clear();
                Err(e)
            }
        }
    }

    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, SourceError> {
        // Read again only when the best block moved since it was read: the
        // chain below an unchanged best block is unchanged.
        if let Some(settled) = self.memo().settled.as_ref().filter(|b| b.height == height) {
            return Ok(Some(settled.clone()));
        }
        let best = self.memo().tip.as_ref().map(|t| t.hash.clone());
        let hash = match self
            .rpc
            .call::<String>("getblockhash", json!([height]))
            .await
        {
            Ok(h) => h,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(transient(e)),
        };
        let found = self.header(&hash).await?.filter(|b| b.height == height);
        let mut memo = self.memo();
        if best.is_some() && memo.tip.as_ref().map(|t| &t.hash) == best.as_ref() {
            memo.settled.clone_from(&found);
        }
        Ok(found)
    }

    async fn unconfirmed(&self) -> Result<Option<Unconfirmed>, SourceError> {
        if !self.cfg.mempool {
            return Ok(None);
        }
        // A node that just started answers before it has reloaded its saved
        // mempool: a partial pool would make waiting payments look dropped.
        let info: Value = self
            .rpc
            .call("getmempoolinfo", json!([]))
            .await
            .map_err(transient)?;
        if info.get("loaded").and_then(Value::as_bool) == Some(false) {
            debug!("the node is still loading its mempool; not read this round");
            return Ok(None);
        }
        // The watcher reads the mempool right after the tip, so that read is
        // the "before" of this snapshot; without one, a block read first.
        let known = self.memo().tip.as_ref().map(|t| t.hash.clone());
        let before = match known {
            Some(hash) => hash,
            None => self.tip().await?.hash,
        };
        let txids: Vec<String> = match &self.wallet {
            Some(wallet) => wallet.waiting_txids(&self.watch).await?,
            None => self
                .rpc
                .call("getrawmempool", json!([false]))
                .await
                .map_err(transient)?,
        };
        let mut cache = self.mempool.lock().await;
        let current: HashSet<&str> = txids.iter().map(String::as_str).collect();
        cache.retain(|txid, _| current.contains(txid.as_str()));
        let new: Vec<&String> = txids.iter().filter(|t| !cache.contains_key(*t)).collect();
        for chunk in new.chunks(500) {
            let params: Vec<Value> = chunk.iter().map(|t| json!([t, false])).collect();
            let answers = self
                .rpc
                .batch::<String>("getrawtransaction", &params)
                .await
                .map_err(transient)?;
            for (txid, answer) in chunk.iter().zip(answers) {
                let hex = match answer {
                    Ok(hex) => hex,
                    Err(e) if is_not_found(&e) => continue, // left the pool meanwhile
                    Err(e) => return Err(transient(e)),
                };
                let outputs = match from_hex(&hex).map_err(|e| e.to_string()).and_then(|b| {
                    transaction_outputs(&b)
                        .map(|outs| {
                            outs.iter()
                                .map(|o| OwnedOutput {
                                    index: o.index,
                                    value: o.value,
                                    script: o.script.to_owned(),
                                })
                                .collect::<Vec<_>>()
                        })
                        .map_err(|e| e.to_string())
                }) {
                    Ok(o) => o,
                    Err(why) => {
                        warn!(%txid, %why, "unreadable mempool transaction; it is seen once mined");
                        Vec::new()
                    }
                };
                cache.insert((*txid).clone(), outputs);
            }
        }
        let after: String = self
            .rpc
            .call("getbestblockhash", json!([]))
            .await
            .map_err(transient)?;
        let watch = self.watch.read();
        let mut transfers = Vec::new();
        for (txid, outputs) in cache.iter() {
            let borrowed: Vec<crate::block::Output<'_>> = outputs
                .iter()
                .map(|o| crate::block::Output {
                    index: o.index,
                    value: o.value,
                    script: &o.script,
                })
                .collect();
            transfers.extend(scan_outputs(txid, &borrowed, &self.cfg.params, &watch));
        }
        debug!(
            pool = cache.len(),
            watched = transfers.len(),
            "mempool read"
        );
        Ok(Some(Unconfirmed {
            // A block in between moved transactions out: not a full picture.
            tip: if before == after {
                before
            } else {
                String::new()
            },
            transfers,
        }))
    }
}

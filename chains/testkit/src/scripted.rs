use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use paywatch_core::{
    Activity, Amount, AssetId, BlockRef, BlockSource, Network, Probe, SourceBlock, SourceError,
    Transfer, Unconfirmed, WatchSet,
};

/// A chain driven by the test: mine, pay, reorg, fail on demand.
///
/// Clones share one chain, so a test keeps a handle while the watcher owns
/// a [`ScriptedSource`] over the same state.
#[derive(Debug, Clone)]
pub struct ScriptedChain {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    network: Network,
    base_height: u64,
    blocks: Vec<Mined>,
    mempool: Vec<Transfer>,
    /// Coinbase outputs for the next block, each with the blocks after its
    /// own at which it is final (`matures_at`): never in the mempool.
    coinbase: Vec<(Transfer, u64)>,
    next_id: u64,
    confirmations: u64,
    final_height_override: Option<u64>,
    failures_left: u32,
    /// Once the block at this height is served, the next final height
    /// question fails (`ScriptedChain::fail_final_height_after_block`).
    final_height_fails_after: Option<u64>,
    final_height_fails_now: bool,
    block_time: i64,
    block_interval: i64,
    /// Leads every hash and txid, so two chains never share one.
    namespace: u64,
    /// The parent of the first block.
    genesis_parent: String,
    /// Transactions the node leaves out of the blocks it serves.
    withheld: HashSet<String>,
    /// The source shows the mempool, as a node with `mempool = true` does.
    mempool_visible: bool,
    /// What the source says it learned late (`BlockSource::missed_from`).
    missed_from: Option<u64>,
    /// The source answers per address, as an Electrum server does.
    looks_up: bool,
    /// Look-ups still to fail, as a server refusing them would.
    look_up_failures: u32,
}

#[derive(Debug, Clone)]
struct Mined {
    block: BlockRef,
    timestamp: i64,
    transfers: Vec<Transfer>,
}

impl ScriptedChain {
    /// A chain holding only its first block, at `base_height`.
    pub fn new(network: Network, base_height: u64) -> ScriptedChain {
        ScriptedChain::build(network, base_height, "0".repeat(64), 0)
    }

    /// A chain whose first block builds on `parent`, with hashes and txids
    /// in `namespace` (e.g. a dev chain picking up where an earlier run of
    /// it stopped, so a restart is not a reorg).
    pub fn continuing(network: Network, parent: &BlockRef, namespace: u64) -> ScriptedChain {
        ScriptedChain::build(network, parent.height + 1, parent.hash.clone(), namespace)
    }

    fn build(
        network: Network,
        base_height: u64,
        genesis_parent: String,
        namespace: u64,
    ) -> ScriptedChain {
        let chain = ScriptedChain {
            state: Arc::new(Mutex::new(State {
                network,
                base_height,
                blocks: Vec::new(),
                mempool: Vec::new(),
                coinbase: Vec::new(),
                next_id: 1,
                confirmations: 1,
                final_height_override: None,
                failures_left: 0,
                final_height_fails_after: None,
                final_height_fails_now: false,
                block_time: 1_700_000_000,
                block_interval: 60,
                namespace,
                genesis_parent,
                withheld: HashSet::new(),
                mempool_visible: false,
                missed_from: None,
                looks_up: false,
                look_up_failures: 0,
            })),
        };
        chain.mine();
        chain
    }

    /// A source over this chain that reports only transfers to `watch`.
    pub fn source(&self, watch: Arc<WatchSet>) -> ScriptedSource {
        ScriptedSource {
            chain: self.clone(),
            watch: Some(watch),
        }
    }

    /// A source that reports every transfer, as the stream tests want.
    pub fn unfiltered_source(&self) -> ScriptedSource {
        ScriptedSource {
            chain: self.clone(),
            watch: None,
        }
    }

    pub fn network(&self) -> Network {
        self.lock().network
    }

    /// Finality by confirmations: a block with `n` confirmations is final.
    pub fn set_confirmations(&self, n: u64) {
        self.lock().confirmations = n.max(1);
    }

    /// Finality by a reported height, like Ethereum's `finalized` tag.
    pub fn set_final_height(&self, height: Option<u64>) {
        self.lock().final_height_override = height;
    }

    /// Sets the timestamp of the next block, unix seconds.
    pub fn set_block_time(&self, unix_seconds: i64) {
        self.lock().block_time = unix_seconds;
    }

    /// The next `n` source calls fail as a node outage would.
    pub fn fail_next(&self, n: u32) {
        self.lock().failures_left = n;
    }

    /// The first question for the final height after the block at
    /// `height` was served fails, as a node timing out between two calls
    /// would: the watcher holds that block and does not know yet what is
    /// final.
    pub fn fail_final_height_after_block(&self, height: u64) {
        let mut s = self.lock();
        s.final_height_fails_after = Some(height);
        s.final_height_fails_now = false;
    }

    /// The node leaves transaction `txid` out of every block it serves,
    /// under the same block hash, as a provider answering with incomplete
    /// logs or an indexer that has not caught up does, until
    /// [`ScriptedChain::serve_everything`].
    pub fn withhold(&self, txid: &str) {
        self.lock().withheld.insert(txid.to_owned());
    }

    /// Its sources look addresses up
    /// ([`BlockSource::activity_after`]), as an Electrum server does: from
    /// the whole chain and the mempool, withheld transactions left out.
    pub fn answer_look_ups(&self, yes: bool) {
        self.lock().looks_up = yes;
    }

    /// The next `n` look-ups fail (transient), blocks still served.
    pub fn fail_look_ups(&self, n: u32) {
        self.lock().look_up_failures = n;
    }

    /// The node serves whole blocks again.
    pub fn serve_everything(&self) {
        self.lock().withheld.clear();
    }

    /// The source says the block at `height`, handed out before, lacked a
    /// transfer: as the Electrum source does when an address's news comes
    /// after its block was read. Cleared once the watcher queued a rescan.
    pub fn report_missed(&self, height: u64) {
        self.lock().missed_from = Some(height);
    }

    /// What the source still says it missed.
    pub fn missed(&self) -> Option<u64> {
        self.lock().missed_from
    }

    /// The source serves the mempool ([`BlockSource::unconfirmed`]), as a
    /// Bitcoin or Litecoin node does: payments show before they are mined.
    pub fn show_mempool(&self) {
        self.lock().mempool_visible = true;
    }

    /// Takes a transaction out of the mempool unmined, as a replacement
    /// (RBF) or an eviction does; true when it was there.
    pub fn drop_from_mempool(&self, txid: &str) -> bool {
        let mut s = self.lock();
        let before = s.mempool.len();
        s.mempool.retain(|t| t.txid != txid);
        s.mempool.len() != before
    }

    /// Queues a transfer for the next block; returns its txid.
    pub fn pay(&self, to: &str, asset: AssetId, amount: u128) -> String {
        self.pay_with(to, asset, amount, true)
    }

    /// Queues a transfer whose transaction failed on chain.
    pub fn pay_failed(&self, to: &str, asset: AssetId, amount: u128) -> String {
        self.pay_with(to, asset, amount, false)
    }

    fn pay_with(&self, to: &str, asset: AssetId, amount: u128, success: bool) -> String {
        let mut s = self.lock();
        let mut transfer = s.new_transfer("ff", to, asset, amount);
        transfer.success = success;
        transfer.from = Some("scripted-payer".to_owned());
        let txid = transfer.txid.clone();
        s.mempool.push(transfer);
        txid
    }

    /// A coinbase output of the next block, final only `final_after` blocks
    /// above it (Litecoin's maturity less the confirmations counted, as
    /// `paywatch_utxo` reads a real one); returns its txid. It never
    /// passes through the mempool, and a reorg takes it away for good.
    pub fn pay_coinbase(&self, to: &str, asset: AssetId, amount: u128, final_after: u64) -> String {
        let mut s = self.lock();
        let transfer = s.new_transfer("cb", to, asset, amount);
        let txid = transfer.txid.clone();
        s.coinbase.push((transfer, final_after));
        txid
    }

    /// Mines one block holding the whole mempool (and the coinbase outputs
    /// queued for it).
    pub fn mine(&self) -> BlockRef {
        let mut s = self.lock();
        let height = s.base_height + s.blocks.len() as u64;
        let parent = s
            .blocks
            .last()
            .map_or_else(|| s.genesis_parent.clone(), |b| b.block.hash.clone());
        let id = s.take_id();
        let hash = format!("{:016x}{id:048x}", s.namespace);
        let timestamp = s.block_time;
        s.block_time += s.block_interval;
        let mut transfers: Vec<Transfer> = std::mem::take(&mut s.coinbase)
            .into_iter()
            .map(|(mut t, final_after)| {
                t.matures_at = Some(height + final_after);
                t
            })
            .collect();
        transfers.append(&mut s.mempool);
        let block = BlockRef {
            height,
            hash,
            parent,
        };
        s.blocks.push(Mined {
            block: block.clone(),
            timestamp,
            transfers,
        });
        block
    }

    pub fn mine_n(&self, n: usize) -> BlockRef {
        let mut last = self.tip();
        for _ in 0..n {
            last = self.mine();
        }
        last
    }

    /// Drops the top `depth` blocks and their transactions for good, as
    /// `anvil_reorg` or `invalidateblock` plus empty blocks do. Mine afterwards
    /// to build the replacement branch.
    pub fn reorg(&self, depth: usize) -> Vec<Transfer> {
        let mut s = self.lock();
        let keep = s.blocks.len().saturating_sub(depth).max(1);
        s.blocks.drain(keep..).flat_map(|b| b.transfers).collect()
    }

    /// Drops the top `depth` blocks but returns their transactions to the
    /// mempool, so the next block re-mines them elsewhere.
    pub fn reorg_keeping_transactions(&self, depth: usize) {
        // A coinbase belongs to its block: gone with it.
        let dropped: Vec<Transfer> = self
            .reorg(depth)
            .into_iter()
            .filter(|t| t.matures_at.is_none())
            .collect();
        self.lock().mempool.splice(0..0, dropped);
    }

    /// Puts transactions back in the mempool, as their sender does who
    /// broadcasts again what a reorg dropped: the next block mines them.
    pub fn rebroadcast(&self, transfers: Vec<Transfer>) {
        self.lock().mempool.extend(transfers);
    }

    pub fn tip(&self) -> BlockRef {
        self.lock()
            .blocks
            .last()
            .expect("a chain always has a block")
            .block
            .clone()
    }

    pub fn height(&self) -> u64 {
        self.tip().height
    }

    /// The height of the block holding transaction `txid`, on the current
    /// chain; `None` while it is unmined (or gone).
    pub fn height_of(&self, txid: &str) -> Option<u64> {
        self.lock()
            .blocks
            .iter()
            .find(|b| b.transfers.iter().any(|t| t.txid == txid))
            .map(|b| b.block.height)
    }

    /// Whether coinbase output `txid` waits for the next block.
    pub fn coinbase_queued(&self, txid: &str) -> bool {
        self.lock().coinbase.iter().any(|(t, _)| t.txid == txid)
    }

    /// Whether transaction `txid` waits in the mempool.
    pub fn in_mempool(&self, txid: &str) -> bool {
        self.lock().mempool.iter().any(|t| t.txid == txid)
    }

    /// The whole current chain, ascending.
    pub fn blocks(&self) -> Vec<BlockRef> {
        self.lock().blocks.iter().map(|b| b.block.clone()).collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A successful transfer with a fresh txid (`kind` marks how it was
    /// made: `ff` a payment, `cb` a coinbase), from no one in particular.
    fn new_transfer(&mut self, kind: &str, to: &str, asset: AssetId, amount: u128) -> Transfer {
        let id = self.take_id();
        // Spelled as each network's watcher records it: Ethereum's
        // `0x`-prefixed, as its source writes a hash.
        let prefix = if self.network == Network::Ethereum {
            "0x"
        } else {
            ""
        };
        Transfer {
            network: self.network,
            asset,
            txid: format!("{prefix}{:016x}{kind}{id:046x}", self.namespace),
            index: 0,
            to: to.to_owned(),
            from: None,
            amount: Amount(amount),
            success: true,
            matures_at: None,
        }
    }

    fn maybe_fail(&mut self) -> Result<(), SourceError> {
        if self.failures_left > 0 {
            self.failures_left -= 1;
            return Err(SourceError::Transient("scripted node outage".into()));
        }
        Ok(())
    }
}

/// [`BlockSource`] over a [`ScriptedChain`].
#[derive(Debug, Clone)]
pub struct ScriptedSource {
    chain: ScriptedChain,
    watch: Option<Arc<WatchSet>>,
}

#[async_trait]
impl BlockSource for ScriptedSource {
    fn network(&self) -> Network {
        self.chain.network()
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        let mut s = self.chain.lock();
        s.maybe_fail()?;
        Ok(s.blocks
            .last()
            .expect("a chain always has a block")
            .block
            .clone())
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        let mut s = self.chain.lock();
        s.maybe_fail()?;
        if s.final_height_fails_now {
            s.final_height_fails_now = false;
            s.final_height_fails_after = None;
            return Err(SourceError::Transient(
                "scripted node: the final height question timed out".into(),
            ));
        }
        let tip = s.base_height + s.blocks.len() as u64 - 1;
        Ok(match s.final_height_override {
            Some(h) => h.min(tip),
            None => (tip + 1).saturating_sub(s.confirmations),
        })
    }

    async fn unconfirmed(&self) -> Result<Option<Unconfirmed>, SourceError> {
        let mut s = self.chain.lock();
        if !s.mempool_visible {
            return Ok(None);
        }
        s.maybe_fail()?;
        let tip = s
            .blocks
            .last()
            .expect("a chain always has a block")
            .block
            .hash
            .clone();
        let transfers = s
            .mempool
            .iter()
            .filter(|t| self.watch.as_ref().is_none_or(|w| w.contains(&t.to)))
            .cloned()
            .collect();
        Ok(Some(Unconfirmed { tip, transfers }))
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        let mut s = self.chain.lock();
        s.maybe_fail()?;
        let Some(index) = height.checked_sub(s.base_height) else {
            return Ok(None);
        };
        if s.final_height_fails_after == Some(height) && s.blocks.get(index as usize).is_some() {
            s.final_height_fails_now = true;
        }
        let Some(mined) = s.blocks.get(index as usize) else {
            return Ok(None);
        };
        let transfers = mined
            .transfers
            .iter()
            .filter(|t| self.watch.as_ref().is_none_or(|w| w.contains(&t.to)))
            .filter(|t| !s.withheld.contains(&t.txid))
            .cloned()
            .collect();
        Ok(Some(SourceBlock {
            block: mined.block.clone(),
            timestamp: mined.timestamp,
            transfers,
        }))
    }

    fn missed_from(&self) -> Option<u64> {
        self.chain.lock().missed_from
    }

    fn missed_queued(&self, from: u64) {
        let mut s = self.chain.lock();
        if s.missed_from == Some(from) {
            s.missed_from = None;
        }
    }

    fn looks_up_addresses(&self) -> bool {
        self.chain.lock().looks_up
    }

    async fn activity_after(&self, probes: &[Probe]) -> Result<Vec<Activity>, SourceError> {
        let mut s = self.chain.lock();
        if !s.looks_up {
            return Err(SourceError::Fatal(
                "this scripted node looks nothing up".into(),
            ));
        }
        s.maybe_fail()?;
        if s.look_up_failures > 0 {
            s.look_up_failures -= 1;
            return Err(SourceError::Transient("scripted look-up refused".into()));
        }
        let network = s.network;
        let pays = |t: &Transfer, address: &str| {
            network.normalize_address(&t.to) == network.normalize_address(address)
                && !s.withheld.contains(&t.txid)
        };
        Ok(probes
            .iter()
            .map(|p| {
                let mined = s
                    .blocks
                    .iter()
                    .filter(|b| b.block.height > p.watched_to)
                    .find(|b| b.transfers.iter().any(|t| pays(t, &p.address)));
                match mined {
                    Some(b) => Activity::InBlock(b.block.height),
                    None if s.mempool.iter().any(|t| pays(t, &p.address)) => Activity::Unconfirmed,
                    None => Activity::Quiet,
                }
            })
            .collect())
    }
}

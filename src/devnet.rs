//! Local dev chains, in process, for `paywatch run` on a fresh machine: a
//! scripted chain per network that mines on a timer. Never a production source.
//!
//! A dev chain lives only as long as the process, but the database outlives
//! it. So that a restart does not look like a reorg of everything recorded
//! before (which would reverse every payment), each start continues the
//! stored chain: its first block sits on top of the last block the database
//! holds, and this run's block hashes and txids carry a tag of their own, so
//! they never collide with an earlier run's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use paywatch_core::{
    AssetId, BlockRef, BlockSource, Network, SourceBlock, SourceError, Transfer, WatchSet,
};
use paywatch_testkit::{ScriptedChain, ScriptedSource};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::info;

use crate::settings::{DevchainSettings, NetworkSettings};
use crate::store::Store;

#[derive(Debug, Default, Clone)]
pub struct DevChains {
    chains: Arc<Mutex<HashMap<Network, DevChain>>>,
}

/// One dev chain: a scripted chain continuing the stored one.
#[derive(Debug, Clone)]
pub struct DevChain {
    chain: ScriptedChain,
    ids: Ids,
}

/// How this run's chain is presented: above the stored tip, with its own tag.
#[derive(Debug, Clone)]
struct Ids {
    tag: u64,
    base_height: u64,
    /// The stored tip this run's first block builds on.
    anchor_hash: Option<String>,
}

impl Ids {
    fn tagged(&self, id: &str) -> String {
        format!("{:016x}{}", self.tag, id.get(16..).unwrap_or(id))
    }

    fn block(&self, b: BlockRef) -> BlockRef {
        let parent = match (&self.anchor_hash, b.height == self.base_height) {
            (Some(anchor), true) => anchor.clone(),
            (None, true) => b.parent,
            (_, false) => self.tagged(&b.parent),
        };
        BlockRef {
            height: b.height,
            hash: self.tagged(&b.hash),
            parent,
        }
    }
}

impl DevChain {
    /// A source over this chain reporting transfers to `watch`.
    pub fn source(&self, watch: Arc<WatchSet>) -> DevSource {
        DevSource {
            inner: self.chain.source(watch),
            ids: self.ids.clone(),
        }
    }

    /// Queues a payment for the next block; returns its txid as watchers see it.
    pub fn pay(&self, to: &str, asset: AssetId, amount: u128) -> String {
        self.ids.tagged(&self.chain.pay(to, asset, amount))
    }
}

/// [`BlockSource`] over a [`DevChain`].
#[derive(Debug, Clone)]
pub struct DevSource {
    inner: ScriptedSource,
    ids: Ids,
}

#[async_trait]
impl BlockSource for DevSource {
    fn network(&self) -> Network {
        self.inner.network()
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        Ok(self.ids.block(self.inner.tip().await?))
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        self.inner.final_height().await
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        Ok(self.inner.block(height).await?.map(|b| SourceBlock {
            block: self.ids.block(b.block),
            timestamp: b.timestamp,
            transfers: b
                .transfers
                .into_iter()
                .map(|t| Transfer {
                    txid: self.ids.tagged(&t.txid),
                    ..t
                })
                .collect(),
        }))
    }
}

impl DevChains {
    /// Starts a dev chain for `network` that mines every `block_secs`, on top
    /// of `stored_tip` (the database's last block on this network) if any.
    pub fn start(
        &self,
        network: Network,
        ns: &NetworkSettings,
        dev: &DevchainSettings,
        stored_tip: Option<BlockRef>,
        tasks: &mut JoinSet<()>,
        mut stop: watch::Receiver<bool>,
    ) -> DevChain {
        let base_height = stored_tip
            .as_ref()
            .map_or(ns.start_height.unwrap_or(0), |t| t.height + 1);
        let chain = ScriptedChain::new(network, base_height);
        chain.set_confirmations(ns.confirmations);
        chain.set_block_time(crate::store::now_ms() / 1000);
        let dev_chain = DevChain {
            chain: chain.clone(),
            ids: Ids {
                tag: u64::try_from(crate::store::now_ms()).unwrap_or(0),
                base_height,
                anchor_hash: stored_tip.map(|t| t.hash),
            },
        };
        self.chains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(network, dev_chain.clone());
        let miner = chain;
        let every = Duration::from_secs(dev.block_secs.max(1));
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {
                        miner.set_block_time(crate::store::now_ms() / 1000);
                        miner.mine();
                    }
                    _ = stop.changed() => break,
                }
            }
        });
        dev_chain
    }

    /// Dev only: a simulated customer pays each open intent on a dev chain
    /// exactly what it is due, once.
    pub fn spawn_autopay(
        &self,
        store: Store,
        tasks: &mut JoinSet<()>,
        mut stop: watch::Receiver<bool>,
    ) {
        let chains = self.chains.clone();
        tasks.spawn(async move {
            let mut paid: HashSet<i64> = HashSet::new();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.changed() => break,
                }
                let networks: Vec<(Network, DevChain)> =
                    chains.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(n, c)| (*n, c.clone())).collect();
                for (network, chain) in networks {
                    let Ok(open) = store.open_intents(network).await else { continue };
                    for intent in open.into_iter().filter(|i| paid.insert(i.id)) {
                        let txid = chain.pay(&intent.address, AssetId::Known(intent.method.asset()), intent.amount_due.0);
                        info!(intent = intent.id, %txid, amount = %intent.amount_due, "devchain customer paid");
                    }
                }
            }
        });
    }
}

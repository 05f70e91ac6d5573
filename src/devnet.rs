//! Local dev chains, in process, for `paywatch run` on a fresh machine: a
//! scripted chain per network that mines on a timer. Never a production source.
//!
//! A dev chain lives only as long as the process, but the database outlives
//! it. So that a restart does not look like a reorg of everything recorded
//! before (which would reverse every payment), each start continues the
//! stored chain: its first block sits on top of the last block the database
//! holds, and this run's hashes and txids live in a namespace of their own.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paywatch_core::{AssetId, BlockRef, Network};
use paywatch_testkit::ScriptedChain;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::info;

use crate::settings::{DevchainSettings, NetworkSettings};
use crate::store::Store;

#[derive(Debug, Default, Clone)]
pub struct DevChains {
    chains: Arc<Mutex<HashMap<Network, ScriptedChain>>>,
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
    ) -> ScriptedChain {
        let chain = match &stored_tip {
            Some(tip) => ScriptedChain::continuing(
                network,
                tip,
                u64::try_from(crate::store::now_ms()).unwrap_or(0),
            ),
            None => ScriptedChain::new(network, ns.start_height.unwrap_or(0)),
        };
        chain.set_confirmations(ns.confirmations);
        chain.set_block_time(crate::store::now_ms() / 1000);
        self.chains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(network, chain.clone());
        let miner = chain.clone();
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
        chain
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
                let networks: Vec<(Network, ScriptedChain)> =
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

    /// Dev only: on a local regtest node (`source = "node"`, `chain =
    /// "regtest"`), the node's own wallet is the customer: it pays each open
    /// intent exactly what it is due, once, and a block is mined every
    /// `block_secs`. Off with `devchain.regtest_customer = false`, as
    /// `deploy/devnet.sh` runs it: there the devnet script pays and mines.
    pub fn spawn_regtest_customer(
        network: Network,
        ns: &NetworkSettings,
        dev: &DevchainSettings,
        store: Store,
        tasks: &mut JoinSet<()>,
        mut stop: watch::Receiver<bool>,
    ) {
        // Built the same way as the watcher's source, which already checked it.
        let Ok(rpc) = crate::chains::node_rpc(network, ns) else {
            return;
        };
        let every = Duration::from_secs(dev.block_secs.max(1));
        tasks.spawn(async move {
            let mut paid: HashSet<i64> = HashSet::new();
            let mut miner: Option<String> = None;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => break,
                }
                if let Ok(open) = store.open_intents(network).await {
                    let unpaid: Vec<_> = open.into_iter().filter(|i| !paid.contains(&i.id)).collect();
                    for intent in unpaid {
                        // A string amount: the node reads it exactly.
                        let coins = intent.amount_due.to_decimal_string(intent.method.decimals());
                        match rpc
                            .call::<String>("sendtoaddress", serde_json::json!([intent.address, coins]))
                            .await
                        {
                            Ok(txid) => {
                                paid.insert(intent.id);
                                info!(intent = intent.id, %txid, amount = %coins, "regtest wallet paid");
                            }
                            Err(e) => tracing::warn!(intent = intent.id, error = %e, "regtest wallet could not pay"),
                        }
                    }
                }
                if miner.is_none() {
                    miner = rpc
                        .call::<String>("getnewaddress", serde_json::json!([]))
                        .await
                        .ok();
                }
                if let Some(address) = &miner {
                    if let Err(e) = rpc
                        .call::<Vec<String>>("generatetoaddress", serde_json::json!([1, address]))
                        .await
                    {
                        tracing::warn!(%network, error = %e, "regtest block not mined");
                    }
                }
            }
        });
    }
}

//! The mempool as a watch-only wallet on the node sees it.
//!
//! `getrawmempool` lists every waiting transaction: on a busy chain that is
//! megabytes each poll, almost all of it paying someone else. Litecoin Core
//! and Bitcoin Core without ZMQ have no call that lists only what changed,
//! but a wallet does the filtering inside the node: the watched addresses
//! are imported into a wallet without keys, and `listunspent 0 0` then
//! names only the waiting transactions that pay them.
//!
//! The wallet is paywatch's alone (a wallet holding keys is refused), is
//! created on first use and loaded with the node from then on. Importing
//! rescans nothing: money already waiting for an address when it is
//! imported is seen once mined, as blocks see everything anyway.

use std::sync::Arc;

use paywatch_core::{SourceError, WatchSet};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tracing::{info, warn};

use crate::rpc::{NodeRpc, RpcError};

/// RPC_WALLET_NOT_FOUND: no such wallet, or it is not loaded.
const WALLET_NOT_FOUND: i64 = -18;
/// RPC_METHOD_NOT_FOUND: the node runs with `-disablewallet`.
const METHOD_NOT_FOUND: i64 = -32601;
/// Addresses imported per poll, so a first start with a long watch list
/// spreads its imports over several polls instead of holding one up.
const IMPORTS_PER_POLL: usize = 2_000;
const IMPORTS_PER_REQUEST: usize = 500;

pub(crate) struct WalletMempool {
    /// The source's own client, for the node-wide calls.
    node: Arc<NodeRpc>,
    /// The same node at `/wallet/NAME`, for calls to this wallet.
    wallet: NodeRpc,
    name: String,
    state: Mutex<Imports>,
}

#[derive(Default)]
struct Imports {
    /// The wallet was found (or made) watch-only and is loaded.
    open: bool,
    /// How many of the watch set's addresses, in order, were imported.
    imported: usize,
}

#[derive(Deserialize)]
struct WalletInfo {
    #[serde(default)]
    descriptors: bool,
    private_keys_enabled: bool,
}

#[derive(Deserialize)]
struct Unspent {
    txid: String,
}

#[derive(Deserialize)]
struct ImportResult {
    success: bool,
    #[serde(default)]
    error: Option<Value>,
}

impl WalletMempool {
    pub(crate) fn new(node: Arc<NodeRpc>, name: &str) -> WalletMempool {
        WalletMempool {
            wallet: node.at_path(&format!("/wallet/{name}")),
            node,
            name: name.to_owned(),
            state: Mutex::new(Imports::default()),
        }
    }

    /// The txids of waiting transactions that pay a watched address, after
    /// importing the addresses watched since the last poll.
    pub(crate) async fn waiting_txids(&self, watch: &WatchSet) -> Result<Vec<String>, SourceError> {
        let mut state = self.state.lock().await;
        if !state.open {
            self.open().await?;
            // Imports are kept by the wallet, but which of them a new wallet
            // file or another instance made is unknown: import all again.
            *state = Imports {
                open: true,
                imported: 0,
            };
        }
        let fresh = watch.addresses_from(state.imported);
        for chunk in fresh
            .chunks(IMPORTS_PER_REQUEST)
            .take(IMPORTS_PER_POLL / IMPORTS_PER_REQUEST)
        {
            match self.import(chunk).await {
                Ok(()) => state.imported += chunk.len(),
                Err(e) => {
                    state.open = !is_unloaded(&e);
                    return Err(self.failed("importmulti", e));
                }
            }
        }
        let unspent: Vec<Unspent> = match self
            .wallet
            .call("listunspent", json!([0, 0, [], true]))
            .await
        {
            Ok(u) => u,
            Err(e) => {
                state.open = !is_unloaded(&e);
                return Err(self.failed("listunspent", e));
            }
        };
        let mut txids: Vec<String> = unspent.into_iter().map(|u| u.txid).collect();
        txids.sort_unstable();
        txids.dedup();
        Ok(txids)
    }

    /// Loads the wallet, or makes it when the node has none by that name,
    /// and refuses one that is not a legacy watch-only wallet.
    async fn open(&self) -> Result<(), SourceError> {
        let loaded: Vec<String> = self
            .node
            .call("listwallets", json!([]))
            .await
            .map_err(|e| self.failed("listwallets", e))?;
        if !loaded.contains(&self.name) {
            match self
                .node
                .call::<Value>("loadwallet", json!([self.name, true]))
                .await
            {
                Ok(_) => info!(wallet = %self.name, "mempool wallet loaded"),
                Err(RpcError::Node { code, .. }) if code == WALLET_NOT_FOUND => {
                    self.node
                        .call::<Value>(
                            "createwallet",
                            json!({
                                "wallet_name": self.name,
                                "disable_private_keys": true,
                                "blank": true,
                                "load_on_startup": true,
                            }),
                        )
                        .await
                        .map_err(|e| self.failed("createwallet", e))?;
                    info!(wallet = %self.name, "mempool wallet created");
                }
                Err(e) => return Err(self.failed("loadwallet", e)),
            }
        }
        let info: WalletInfo = self
            .wallet
            .call("getwalletinfo", json!([]))
            .await
            .map_err(|e| self.failed("getwalletinfo", e))?;
        if info.private_keys_enabled {
            return Err(self.refused(
                "holds private keys; name a wallet for paywatch alone (it is created without keys)",
            ));
        }
        if info.descriptors {
            return Err(self.refused(
                "is a descriptor wallet; paywatch imports addresses into a legacy watch-only \
                 wallet (Litecoin Core 0.21; Bitcoin Core up to 28). Unset rpc.mempool_wallet \
                 to read the whole mempool instead",
            ));
        }
        Ok(())
    }

    async fn import(&self, addresses: &[String]) -> Result<(), RpcError> {
        let requests: Vec<Value> = addresses
            .iter()
            .map(|a| json!({"scriptPubKey": {"address": a}, "timestamp": "now", "watchonly": true}))
            .collect();
        let results: Vec<ImportResult> = self
            .wallet
            .call("importmulti", json!([requests, {"rescan": false}]))
            .await?;
        for (address, result) in addresses.iter().zip(&results) {
            if !result.success {
                // One address the node cannot take must not hold up the rest;
                // blocks still see payments to it.
                let error = result.error.clone().unwrap_or(Value::Null);
                warn!(%address, %error, "the node refused to watch this address in its mempool wallet");
            }
        }
        Ok(())
    }

    fn failed(&self, method: &str, e: RpcError) -> SourceError {
        let hint = match &e {
            RpcError::Node { code, .. } if *code == METHOD_NOT_FOUND => {
                "; the node has no wallet support (-disablewallet): enable it, or unset \
                 rpc.mempool_wallet to read the whole mempool"
            }
            RpcError::Http { status: 404, .. } => {
                "; the node serves no wallet endpoint (-disablewallet?): enable wallets, or \
                 unset rpc.mempool_wallet"
            }
            _ if is_unloaded(&e) => "; it is loaded again at the next poll",
            _ => "",
        };
        SourceError::Transient(format!(
            "mempool wallet '{}' (rpc.mempool_wallet): {method}: {e}{hint}",
            self.name
        ))
    }

    fn refused(&self, why: &str) -> SourceError {
        SourceError::Transient(format!(
            "mempool wallet '{}' (rpc.mempool_wallet) {why}",
            self.name
        ))
    }
}

/// The wallet was unloaded, or the node restarted without it.
fn is_unloaded(e: &RpcError) -> bool {
    matches!(e, RpcError::Node { code, .. } if *code == WALLET_NOT_FOUND)
}

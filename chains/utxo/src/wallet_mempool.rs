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
//! created on first use and loaded with the node from then on. It is of the
//! kind the node makes by default: a legacy wallet, whose addresses go in
//! with `importmulti`, on Litecoin Core and Bitcoin Core before 23; a
//! descriptor wallet, whose addresses go in as `addr(...)` descriptors with
//! `importdescriptors`, on Bitcoin Core 23 and later (26 refuses a new
//! legacy wallet without `-deprecatedrpc=create_bdb`, later releases have
//! none). A wallet of either kind made earlier is used as it is. Importing
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
/// RPC_WALLET_ERROR: among others, a wallet kind the node cannot make.
const WALLET_ERROR: i64 = -4;
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
    /// The wallet was found (or made) watch-only and is loaded: its kind.
    open: Option<Kind>,
    /// How many of the watch set's addresses, in order, were imported.
    imported: usize,
}

/// How addresses go into the wallet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `importmulti` with a watch-only script.
    Legacy,
    /// `importdescriptors` with `addr(...)`.
    Descriptors,
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
struct DescriptorInfo {
    checksum: String,
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
        let kind = match state.open {
            Some(kind) => kind,
            None => {
                let kind = self.open().await?;
                // Imports are kept by the wallet, but which of them a new
                // wallet file or another instance made is unknown: import
                // all again.
                *state = Imports {
                    open: Some(kind),
                    imported: 0,
                };
                kind
            }
        };
        let fresh = watch.addresses_from(state.imported);
        for chunk in fresh
            .chunks(IMPORTS_PER_REQUEST)
            .take(IMPORTS_PER_POLL / IMPORTS_PER_REQUEST)
        {
            let imported = match kind {
                Kind::Legacy => self.import(chunk).await,
                Kind::Descriptors => self.import_descriptors(chunk).await,
            };
            match imported {
                Ok(()) => state.imported += chunk.len(),
                Err((method, e)) => {
                    if is_unloaded(&e) {
                        state.open = None;
                    }
                    return Err(self.failed(method, e));
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
                if is_unloaded(&e) {
                    state.open = None;
                }
                return Err(self.failed("listunspent", e));
            }
        };
        let mut txids: Vec<String> = unspent.into_iter().map(|u| u.txid).collect();
        txids.sort_unstable();
        txids.dedup();
        Ok(txids)
    }

    /// Loads the wallet, or makes it when the node has none by that name,
    /// and refuses one that holds keys; returns its kind.
    async fn open(&self) -> Result<Kind, SourceError> {
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
                    self.create().await?;
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
        Ok(if info.descriptors {
            Kind::Descriptors
        } else {
            Kind::Legacy
        })
    }

    /// A watch-only wallet of the kind the node makes by default: `descriptors`
    /// is left out, since Bitcoin Core 26 refuses `false` (a legacy wallet)
    /// and a node built without SQLite refuses `true`. Only a node whose
    /// default it cannot make (a descriptor default without SQLite) is asked
    /// for a legacy wallet instead.
    async fn create(&self) -> Result<(), SourceError> {
        let mut args = json!({
            "wallet_name": self.name,
            "disable_private_keys": true,
            "blank": true,
            "load_on_startup": true,
        });
        let made = match self.node.call::<Value>("createwallet", args.clone()).await {
            Err(RpcError::Node { code, message, .. })
                if code == WALLET_ERROR && message.contains("sqlite") =>
            {
                args["descriptors"] = Value::Bool(false);
                self.node.call::<Value>("createwallet", args).await
            }
            other => other,
        };
        made.map_err(|e| self.failed("createwallet", e))?;
        info!(wallet = %self.name, "mempool wallet created");
        Ok(())
    }

    async fn import(&self, addresses: &[String]) -> Result<(), (&'static str, RpcError)> {
        let requests: Vec<Value> = addresses
            .iter()
            .map(|a| json!({"scriptPubKey": {"address": a}, "timestamp": "now", "watchonly": true}))
            .collect();
        let results: Vec<ImportResult> = self
            .wallet
            .call("importmulti", json!([requests, {"rescan": false}]))
            .await
            .map_err(|e| ("importmulti", e))?;
        warn_refused(addresses, &results);
        Ok(())
    }

    /// Each address as an `addr(...)` descriptor: the node wants each with
    /// its checksum, which `getdescriptorinfo` gives (one batch), and a
    /// timestamp of "now" rescans nothing.
    async fn import_descriptors(
        &self,
        addresses: &[String],
    ) -> Result<(), (&'static str, RpcError)> {
        let asked: Vec<Value> = addresses
            .iter()
            .map(|a| json!([format!("addr({a})")]))
            .collect();
        let infos = self
            .node
            .batch::<DescriptorInfo>("getdescriptorinfo", &asked)
            .await
            .map_err(|e| ("getdescriptorinfo", e))?;
        let mut requests = Vec::with_capacity(addresses.len());
        let mut taken = Vec::with_capacity(addresses.len());
        for (address, info) in addresses.iter().zip(infos) {
            match info {
                Ok(info) => {
                    requests.push(json!({
                        "desc": format!("addr({address})#{}", info.checksum),
                        "timestamp": "now",
                    }));
                    taken.push(address.clone());
                }
                // Not an address this node reads: blocks still see it.
                Err(e) => {
                    warn!(%address, error = %e, "the node refused to watch this address in its mempool wallet")
                }
            }
        }
        if requests.is_empty() {
            return Ok(());
        }
        let results: Vec<ImportResult> = self
            .wallet
            .call("importdescriptors", json!([requests]))
            .await
            .map_err(|e| ("importdescriptors", e))?;
        warn_refused(&taken, &results);
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

/// One address the node cannot take must not hold up the rest; blocks still
/// see payments to it.
fn warn_refused(addresses: &[String], results: &[ImportResult]) {
    for (address, result) in addresses.iter().zip(results) {
        if !result.success {
            let error = result.error.clone().unwrap_or(Value::Null);
            warn!(%address, %error, "the node refused to watch this address in its mempool wallet");
        }
    }
}

/// The wallet was unloaded, or the node restarted without it.
fn is_unloaded(e: &RpcError) -> bool {
    matches!(e, RpcError::Node { code, .. } if *code == WALLET_NOT_FOUND)
}

//! The daemon over a real anvil node with two 6-decimal ERC-20s standing in
//! for USDT and USDC, a third token no method accepts, and a contract that
//! pays ETH onward by internal call.

use bitcoin::bip32::{ChildNumber, DerivationPath, Xpriv, Xpub};
use bitcoin::secp256k1::Secp256k1;
use paywatch::settings::{Secret, Settings};
use paywatch_testkit::anvil::{ACCOUNTS, CHAIN_ID};
use paywatch_testkit::trace_proxy::TraceProxy;
use paywatch_testkit::{AnvilNode, AnvilOptions};

#[allow(unused_imports)]
pub use super::daemon::Daemon;
use super::{Backend, TestDb};

/// 100 USD at the fixed test rate of 2,000 USD per ETH.
pub const ETH_FOR_100_USD: u128 = 50_000_000_000_000_000;
/// 100 USD in a 6-decimal stablecoin.
pub const STABLE_FOR_100_USD: u128 = 100_000_000;
/// Who pays: anvil's unlocked dev accounts (0 deployed and holds the tokens).
pub const TOKEN_HOLDER: &str = ACCOUNTS[0];
pub const ETH_PAYER: &str = ACCOUNTS[1];
/// anvil's `finalized` block is 64 behind its latest.
pub const FINALITY_DEPTH: u64 = 64;

/// An account key m/44'/60'/0' of a fixed seed, as an operator configures it.
pub fn account_xpub() -> String {
    let secp = Secp256k1::new();
    let master = Xpriv::new_master(bitcoin::NetworkKind::Main, &[9u8; 32]).unwrap();
    let path: DerivationPath = vec![
        ChildNumber::from_hardened_idx(44).unwrap(),
        ChildNumber::from_hardened_idx(60).unwrap(),
        ChildNumber::from_hardened_idx(0).unwrap(),
    ]
    .into();
    Xpub::from_priv(&secp, &master.derive_priv(&secp, &path).unwrap()).to_string()
}

#[derive(Debug, Clone)]
pub struct EthOptions {
    pub backend: Backend,
    pub expiry_secs: i64,
    pub traces: bool,
    pub anvil: AnvilOptions,
    /// `None`: finality by the `finalized` tag.
    pub confirmations: Option<u64>,
    pub poll_interval_ms: u64,
    /// Subscribe to newHeads over the node's websocket.
    pub ws: bool,
    /// Also enable Tron (an in-process dev chain) with derived addresses,
    /// so Tron intents can be paid on Ethereum by mistake.
    pub with_tron: bool,
    /// Reach anvil through a [`TraceProxy`] (no fault until one is set), so
    /// a test can make the node unable to trace.
    pub trace_proxy: bool,
}

impl Default for EthOptions {
    fn default() -> Self {
        EthOptions {
            backend: Backend::Sqlite,
            expiry_secs: 600,
            traces: true,
            anvil: AnvilOptions::default(),
            confirmations: None,
            poll_interval_ms: 100,
            ws: false,
            with_tron: false,
            trace_proxy: false,
        }
    }
}

/// The contracts a world deploys before the daemon starts.
#[derive(Debug, Clone)]
pub struct Contracts {
    pub usdt: String,
    pub usdc: String,
    /// A token that is no payment method.
    pub other: String,
    pub forwarder: String,
}

pub struct EthWorld {
    pub node: AnvilNode,
    pub contracts: Contracts,
    pub daemon: Daemon,
    /// With `EthOptions::trace_proxy`: what the daemon reaches anvil through.
    pub proxy: Option<TraceProxy>,
}

pub async fn deploy_contracts(node: &AnvilNode) -> Contracts {
    let supply = 1_000_000_000 * 1_000_000;
    Contracts {
        usdt: node
            .deploy_token("Tether USD", "USDT", supply)
            .await
            .unwrap(),
        usdc: node.deploy_token("USD Coin", "USDC", supply).await.unwrap(),
        other: node.deploy_token("Other", "OTH", supply).await.unwrap(),
        forwarder: node.deploy_forwarder().await.unwrap(),
    }
}

pub fn eth_settings(
    db_url: &str,
    node: &AnvilNode,
    contracts: &Contracts,
    o: &EthOptions,
) -> Settings {
    let mut s = Settings::load(None).expect("defaults load");
    s.database.url = db_url.to_owned();
    s.intents.expiry_secs = o.expiry_secs;
    s.rates.fixed.insert("ETH".into(), "2000".into());
    s.reconcile.interval_ms = 100;
    let n = s.networks.get_mut("ethereum").expect("ethereum settings");
    n.enabled = true;
    n.source = "node".into();
    n.rpc.url = node.url();
    n.chain_id = Some(CHAIN_ID);
    n.traces = o.traces;
    n.poll_interval_ms = o.poll_interval_ms;
    if o.ws {
        n.rpc.ws_url = Some(node.ws_url());
    }
    if let Some(c) = o.confirmations {
        n.finality = "confirmations".into();
        n.confirmations = c;
    }
    n.account_key = Some(Secret(account_xpub()));
    n.contracts.insert("USDT".into(), contracts.usdt.clone());
    n.contracts.insert("USDC".into(), contracts.usdc.clone());
    if o.with_tron {
        let t = s.networks.get_mut("tron").expect("tron settings");
        t.enabled = true;
        t.source = "devchain".into();
        t.account_key = Some(Secret(super::tron::account_xpub()));
        s.devchain.enabled = true;
    }
    s
}

pub async fn eth_world(o: EthOptions) -> EthWorld {
    let node = AnvilNode::start(o.anvil.clone())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"));
    let contracts = deploy_contracts(&node).await;
    let db = TestDb::new(o.backend).await;
    let mut settings = eth_settings(&db.url, &node, &contracts, &o);
    let proxy = match o.trace_proxy {
        true => Some(
            TraceProxy::start(node.url(), None)
                .await
                .expect("trace proxy"),
        ),
        false => None,
    };
    if let Some(p) = &proxy {
        let n = settings
            .networks
            .get_mut("ethereum")
            .expect("ethereum settings");
        n.rpc.url = p.url();
    }
    let daemon = Daemon::start(db, settings).await;
    // A fresh database starts at the node's tip: pay only once it is read.
    daemon.wait_cursor(node.block_number().await.unwrap()).await;
    EthWorld {
        node,
        contracts,
        daemon,
        proxy,
    }
}

impl EthWorld {
    pub async fn pay_eth(&self, to: &str, wei: u128) -> String {
        self.node
            .send_eth(ETH_PAYER, to, wei)
            .await
            .expect("ETH sent")
    }

    pub async fn pay_usdt(&self, to: &str, units: u128) -> String {
        self.pay_token(&self.contracts.usdt.clone(), to, units)
            .await
    }

    pub async fn pay_usdc(&self, to: &str, units: u128) -> String {
        self.pay_token(&self.contracts.usdc.clone(), to, units)
            .await
    }

    pub async fn pay_token(&self, token: &str, to: &str, units: u128) -> String {
        self.node
            .token_transfer(token, TOKEN_HOLDER, to, units)
            .await
            .expect("token sent")
    }

    /// Mines until every block so far is `finalized` on anvil.
    pub async fn finalize(&self) {
        self.wait_sent_mined().await;
        self.node.mine(FINALITY_DEPTH).await.expect("mines");
    }

    /// anvil answers eth_sendTransaction before its automine task has mined
    /// the transaction: mined blocks asked for meanwhile may take it in
    /// (seen once in CI: a payment in the first of the 64 blocks meant to
    /// finalize it, so one short of final). Waits until none is pending.
    pub async fn wait_sent_mined(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let status = self
                .node
                .rpc("txpool_status", serde_json::json!([]))
                .await
                .expect("txpool_status");
            let pending = status
                .get("pending")
                .and_then(|p| {
                    p.as_str()
                        .map(str::to_owned)
                        .or_else(|| p.as_u64().map(|n| format!("{n:#x}")))
                })
                .unwrap_or_default();
            if pending == "0x0" {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "transactions still pending after 10 s: {status}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    pub async fn tip(&self) -> u64 {
        self.node.block_number().await.unwrap()
    }

    /// `address` spends `wei` of what it holds back to the payer, as a
    /// merchant sweeping a deposit address does (anvil signs for it).
    pub async fn sweep(&self, address: &str, wei: u128) -> String {
        self.node
            .rpc("anvil_impersonateAccount", serde_json::json!([address]))
            .await
            .expect("impersonated");
        let tx = self
            .node
            .send_eth(address, ETH_PAYER, wei)
            .await
            .expect("swept");
        self.node
            .rpc(
                "anvil_stopImpersonatingAccount",
                serde_json::json!([address]),
            )
            .await
            .expect("impersonation ended");
        tx
    }
}

/// `GET /v1/review-queue` as an operator sees it, served over `daemon`'s
/// own context.
#[allow(dead_code)]
pub async fn review_queue(daemon: &Daemon) -> serde_json::Value {
    let (status, queue) = operator_client(daemon)
        .await
        .call(
            reqwest::Method::GET,
            "/v1/review-queue",
            Some(super::api::OPERATOR),
            None,
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{queue}");
    queue
}

/// The daemon's API, served with the operator's token known.
pub async fn operator_client(daemon: &Daemon) -> super::api::ApiClient {
    let mut ctx = daemon.ctx.clone();
    ctx.settings.api.tokens.insert(
        "operator".into(),
        vec![paywatch::api::TokenTable::hash_token(super::api::OPERATOR)],
    );
    super::api::ApiClient::serve(ctx).await
}

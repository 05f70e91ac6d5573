//! The daemon over the Tron test node from testkit: real gRPC, real protobuf
//! blocks signed like mainnet's, a TRC-20 standing in for USDT at mainnet's
//! contract address, and a second token no method accepts.

use bitcoin::bip32::{ChildNumber, DerivationPath, Xpriv, Xpub};
use bitcoin::secp256k1::Secp256k1;
use paywatch::settings::{Secret, Settings};
use paywatch_core::Network;
use paywatch_testkit::tron::{TronAccount, TronContract, TxId};
use paywatch_testkit::{TronNode, TronNodeOptions};

#[allow(unused_imports)]
pub use super::daemon::Daemon;
use super::{Backend, TestDb};

/// 100 USD at the fixed test rate of 0.25 USD per TRX, in sun.
pub const TRX_FOR_100_USD: u64 = 400_000_000;
/// 100 USD in 6-decimal USDT.
pub const USDT_FOR_100_USD: u128 = 100_000_000;
/// Mainnet's USDT contract: the test node deploys its token there, so the
/// daemon runs with its default contract.
pub const USDT_CONTRACT: &str = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t";
/// Circle's USDC on Tron: another method's asset (USDC is a method on
/// Ethereum), recognised by its mainnet contract, where the test node
/// deploys it too.
pub const USDC_CONTRACT: &str = "TEkxiTehnzSmSe2XqrBj4w32RUN966rdz8";

/// An account key m/44'/195'/0' of a fixed seed, as an operator configures it.
pub fn account_xpub() -> String {
    xpub_at(&[7u8; 32], 195)
}

/// The same for Ethereum (m/44'/60'/0'), for the wrong-network stories.
pub fn ethereum_account_xpub() -> String {
    xpub_at(&[8u8; 32], 60)
}

fn xpub_at(seed: &[u8], coin: u32) -> String {
    let secp = Secp256k1::new();
    let master = Xpriv::new_master(bitcoin::NetworkKind::Main, seed).unwrap();
    let path: DerivationPath = vec![
        ChildNumber::from_hardened_idx(44).unwrap(),
        ChildNumber::from_hardened_idx(coin).unwrap(),
        ChildNumber::from_hardened_idx(0).unwrap(),
    ]
    .into();
    Xpub::from_priv(&secp, &master.derive_priv(&secp, &path).unwrap()).to_string()
}

#[derive(Debug, Clone)]
pub struct TronOptions {
    pub backend: Backend,
    pub expiry_secs: i64,
    pub node: TronNodeOptions,
    /// Also enable Ethereum (an in-process dev chain) with derived
    /// addresses, so Ethereum intents can be paid on Tron by mistake.
    pub with_ethereum: bool,
    /// `rpc.metadata`: what a hosted provider's node wants (an API key).
    pub metadata: Vec<(String, String)>,
    /// `rpc.requests_per_second`.
    pub requests_per_second: Option<u32>,
}

impl Default for TronOptions {
    fn default() -> Self {
        TronOptions {
            backend: Backend::Sqlite,
            expiry_secs: 600,
            node: TronNodeOptions::default(),
            with_ethereum: false,
            metadata: Vec::new(),
            requests_per_second: None,
        }
    }
}

pub struct TronWorld {
    pub node: TronNode,
    pub usdt: TronContract,
    /// USDC at its mainnet contract: no method on Tron, but real money.
    pub usdc: TronContract,
    /// A TRC-20 that is no payment method.
    pub other: TronContract,
    /// A contract that pays tokens onward from its own balance.
    pub payer: TronContract,
    pub payer_account: TronAccount,
    pub daemon: Daemon,
}

pub fn tron_settings(db_url: &str, node: &TronNode, o: &TronOptions) -> Settings {
    let mut s = Settings::load(None).expect("defaults load");
    s.database.url = db_url.to_owned();
    s.intents.expiry_secs = o.expiry_secs;
    s.rates.fixed.insert("TRX".into(), "0.25".into());
    s.reconcile.interval_ms = 100;
    let n = s.networks.get_mut("tron").expect("tron settings");
    n.enabled = true;
    n.source = "node".into();
    n.rpc.url = node.url();
    n.rpc.solidity_url = Some(node.solidity_url());
    n.rpc.timeout_secs = 5;
    n.rpc.metadata = o
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), Secret(v.clone())))
        .collect();
    n.rpc.requests_per_second = o.requests_per_second;
    if node.url().starts_with("https://") {
        // The test node's certificate is signed by the testkit's own CA.
        let ca = std::env::temp_dir().join(format!("paywatch-test-ca-{}.pem", std::process::id()));
        std::fs::write(&ca, paywatch_testkit::tron::TEST_CA_PEM).unwrap();
        n.rpc.ca_file = Some(ca.display().to_string());
    }
    n.poll_interval_ms = 100;
    n.account_key = Some(Secret(account_xpub()));
    if o.with_ethereum {
        let e = s.networks.get_mut("ethereum").expect("ethereum settings");
        e.enabled = true;
        e.source = "devchain".into();
        e.account_key = Some(Secret(ethereum_account_xpub()));
        s.devchain.enabled = true;
    }
    s
}

pub async fn tron_world(o: TronOptions) -> TronWorld {
    let node = TronNode::start(o.node.clone())
        .await
        .unwrap_or_else(|e| panic!("tron node: {e}"));
    let usdt = node
        .deploy_trc20_at("Tether USD", USDT_CONTRACT)
        .expect("USDT at its mainnet address");
    let usdc = node
        .deploy_trc20_at("USD Coin", USDC_CONTRACT)
        .expect("USDC at its mainnet address");
    let other = node.deploy_trc20("Other");
    let payer = node.deploy_contract("Payout");
    node.mine(25).expect("mines");
    let db = TestDb::new(o.backend).await;
    let settings = tron_settings(&db.url, &node, &o);
    let mut daemon = Daemon::start(db, settings).await;
    daemon.network = Network::Tron;
    // A fresh database starts at the node's tip: pay only once it is read.
    daemon.wait_cursor(node.tip()).await;
    TronWorld {
        node,
        usdt,
        usdc,
        other,
        payer,
        payer_account: TronAccount::dev(9),
        daemon,
    }
}

impl TronWorld {
    pub fn payer(&self) -> TronAccount {
        TronAccount::dev(1)
    }

    pub fn pay_trx(&self, to: &str, sun: u64) -> TxId {
        self.node
            .send_trx(&self.payer(), to, sun)
            .expect("TRX sent")
    }

    pub fn pay_usdt(&self, to: &str, units: u128) -> TxId {
        self.node
            .trc20_transfer(&self.usdt, &self.payer(), to, units)
            .expect("USDT sent")
    }

    pub fn pay_usdc(&self, to: &str, units: u128) -> TxId {
        self.node
            .trc20_transfer(&self.usdc, &self.payer(), to, units)
            .expect("USDC sent")
    }

    pub fn pay_other(&self, to: &str, units: u128) -> TxId {
        self.node
            .trc20_transfer(&self.other, &self.payer(), to, units)
            .expect("token sent")
    }

    /// Mines one block holding what was sent, then enough for it to be
    /// solidified.
    pub fn solidify(&self) {
        self.node
            .mine(self.node.tip() - self.node.solidified() + 1)
            .expect("mines");
    }
}

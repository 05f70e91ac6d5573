//! The daemon as `paywatch run` wires it (settings → Context → app), over a
//! real Litecoin Core regtest node, directly or through a real ElectrumX.

use bitcoin::bip32::{ChildNumber, DerivationPath, Xpriv, Xpub};
use bitcoin::secp256k1::Secp256k1;
use paywatch::settings::{Secret, Settings};
use paywatch_testkit::{ElectrumX, LitecoinNode};

#[allow(unused_imports)]
pub use super::daemon::Daemon;
use super::Backend;

/// Which backend the daemon reads the node through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Node,
    Electrum,
}

/// A regtest BIP84 account key (m/84'/1'/0' of a fixed seed), as an
/// operator would configure it.
pub fn account_tpub() -> String {
    let secp = Secp256k1::new();
    let master = Xpriv::new_master(bitcoin::NetworkKind::Test, &[7u8; 32]).unwrap();
    let path: DerivationPath = vec![
        ChildNumber::from_hardened_idx(84).unwrap(),
        ChildNumber::from_hardened_idx(1).unwrap(),
        ChildNumber::from_hardened_idx(0).unwrap(),
    ]
    .into();
    Xpub::from_priv(&secp, &master.derive_priv(&secp, &path).unwrap()).to_string()
}

pub struct Options {
    pub backend: Backend,
    pub via: Via,
    pub expiry_secs: i64,
    pub confirmations: u64,
    pub start_height: Option<u64>,
    /// Through ElectrumX: (max_subscriptions, dormant_after_secs,
    /// sweep_every_secs) instead of the defaults.
    pub electrum_limits: Option<(usize, u64, u64)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backend: Backend::Sqlite,
            via: Via::Node,
            expiry_secs: 600,
            confirmations: 6,
            start_height: None,
            electrum_limits: None,
        }
    }
}

pub fn settings_for(
    db_url: &str,
    node: &LitecoinNode,
    electrum: Option<&ElectrumX>,
    o: &Options,
) -> Settings {
    let mut s = Settings::load(None).expect("defaults load");
    s.database.url = db_url.to_owned();
    s.intents.expiry_secs = o.expiry_secs;
    s.rates.fixed.insert("LTC".into(), "100".into());
    s.reconcile.interval_ms = 100;
    let n = s.networks.get_mut("litecoin").expect("litecoin settings");
    n.enabled = true;
    n.chain = "regtest".into();
    n.confirmations = o.confirmations;
    n.poll_interval_ms = 100;
    n.start_height = o.start_height;
    n.account_key = Some(Secret(account_tpub()));
    match o.via {
        Via::Node => {
            n.source = "node".into();
            n.rpc.url = node.rpc_url();
            match node.auth() {
                paywatch_testkit::Auth::Cookie => {
                    n.rpc.cookie_file = Some(node.cookie_file().display().to_string())
                }
                _ => {
                    n.rpc.user = Some(node.rpc_user().to_owned());
                    n.rpc.password = Some(Secret(node.rpc_password().to_owned()));
                }
            }
        }
        Via::Electrum => {
            n.source = "electrum".into();
            n.electrum.url = electrum.expect("an ElectrumX for Via::Electrum").tcp_url();
            if let Some((limit, dormant_after, sweep_every)) = o.electrum_limits {
                n.electrum.max_subscriptions = limit;
                n.electrum.dormant_after_secs = dormant_after;
                n.electrum.sweep_every_secs = sweep_every;
                // Addresses paid within the reorg window stay watched; a
                // shallow window lets a paid one go dormant in seconds.
                n.max_reorg_depth = 6;
            }
        }
    }
    s
}

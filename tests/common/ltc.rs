//! The daemon as `paywatch run` wires it (settings → Context → app), over a
//! real Litecoin Core regtest node, directly or through a real ElectrumX.

use std::time::{Duration, Instant};

use bitcoin::bip32::{ChildNumber, DerivationPath, Xpriv, Xpub};
use bitcoin::secp256k1::Secp256k1;
use paywatch::app::{self, Context};
use paywatch::intents::NewIntent;
use paywatch::settings::{Secret, Settings};
use paywatch::store::{ChainStatus, IntentRecord};
use paywatch_core::Network;
use paywatch_testkit::{ElectrumX, LitecoinNode};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Backend, TestDb};

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

pub struct Daemon {
    pub db: TestDb,
    pub settings: Settings,
    pub ctx: Context,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

pub struct Options {
    pub backend: Backend,
    pub via: Via,
    pub expiry_secs: i64,
    pub confirmations: u64,
    pub start_height: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backend: Backend::Sqlite,
            via: Via::Node,
            expiry_secs: 600,
            confirmations: 6,
            start_height: None,
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
        }
    }
    s
}

impl Daemon {
    pub async fn start(db: TestDb, settings: Settings) -> Daemon {
        let ctx = Context::build(settings.clone())
            .await
            .expect("context builds");
        let mut d = Daemon {
            db,
            settings,
            ctx,
            stop: None,
            task: None,
        };
        d.spawn();
        d
    }

    fn spawn(&mut self) {
        let (tx, rx) = oneshot::channel::<()>();
        let ctx = self.ctx.clone();
        self.stop = Some(tx);
        self.task = Some(tokio::spawn(async move {
            app::run_until(ctx, async {
                let _ = rx.await;
            })
            .await
            .expect("daemon runs");
        }));
    }

    /// Stops every task the way SIGTERM does, and waits for them.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.expect("daemon task");
        }
    }

    /// A new process: settings read again, everything rebuilt from the database.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.ctx = Context::build(self.settings.clone())
            .await
            .expect("context builds");
        self.spawn();
    }

    /// Stops the daemon abruptly, like a killed process: tasks are dropped
    /// wherever they are.
    pub fn crash(&mut self) {
        self.stop = None;
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }

    pub async fn start_again(&mut self) {
        self.ctx = Context::build(self.settings.clone())
            .await
            .expect("context builds");
        self.spawn();
    }

    pub async fn order(&self, reference: &str, usd: &str) -> IntentRecord {
        self.create("order", reference, usd).await
    }

    pub async fn create(&self, kind: &str, reference: &str, usd: &str) -> IntentRecord {
        self.ctx
            .intents
            .create(&NewIntent {
                kind: kind.into(),
                reference: reference.into(),
                account: "acct-1".into(),
                asset: "LTC".into(),
                network: "litecoin".into(),
                usd_amount: usd.into(),
            })
            .await
            .expect("intent created")
    }

    pub async fn intent(&self, id: i64) -> IntentRecord {
        self.ctx
            .store
            .intent(id)
            .await
            .unwrap()
            .expect("intent exists")
    }

    /// Polls until `want` holds for the intent, or fails naming `what`.
    pub async fn wait_for(
        &self,
        id: i64,
        what: &str,
        want: impl Fn(&IntentRecord) -> bool,
    ) -> IntentRecord {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let i = self.intent(id).await;
            if want(&i) {
                return i;
            }
            if Instant::now() > deadline {
                let status = self
                    .ctx
                    .store
                    .chain_status(Network::Litecoin)
                    .await
                    .unwrap();
                panic!("intent {id} never became {what}: {i:?}\nwatcher: {status:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the watcher's cursor reaches `height`.
    pub async fn wait_cursor(&self, height: u64) {
        self.wait_chain(&format!("height {height}"), |s| {
            s.cursor_height >= Some(height)
        })
        .await
    }

    /// Waits until the watcher's cursor is block `hash`.
    pub async fn wait_cursor_at(&self, hash: &str) {
        self.wait_chain(&format!("block {hash}"), |s| {
            s.cursor_hash.as_deref() == Some(hash)
        })
        .await
    }

    async fn wait_chain(&self, what: &str, done: impl Fn(&ChainStatus) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let s = self
                .ctx
                .store
                .chain_status(Network::Litecoin)
                .await
                .unwrap();
            if s.as_ref().is_some_and(&done) {
                return;
            }
            if Instant::now() > deadline {
                panic!("the watcher never reached {what}: {s:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every recorded transfer, one line each, for failure messages.
    pub async fn transfers_table(&self) -> String {
        self.ctx
            .store
            .transfers(Some(Network::Litecoin), None, 100)
            .await
            .unwrap()
            .iter()
            .map(|t| {
                format!(
                    "{}:{} {} h={} block_time={} first_seen={} orphaned={:?}\n",
                    t.txid,
                    t.index,
                    t.amount,
                    t.block_height,
                    t.block_time_ms,
                    t.first_seen_ms,
                    t.orphaned_at_ms
                )
            })
            .collect()
    }

    pub async fn count(&self, sql: &str) -> i64 {
        self.ctx.store.count_raw(sql).await.unwrap()
    }
}

//! The daemon as `paywatch run` wires it (settings → Context → app), with
//! the waits and reads the chain stories share.

use std::time::{Duration, Instant};

use paywatch::app::{self, Context};
use paywatch::intents::NewIntent;
use paywatch::settings::Settings;
use paywatch::store::{ChainStatus, IntentRecord};
use paywatch_core::Network;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::TestDb;

pub struct Daemon {
    pub db: TestDb,
    pub settings: Settings,
    pub ctx: Context,
    /// The one enabled network; intents default to its native coin.
    pub network: Network,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// The task a crash aborted, until its futures are dropped.
    aborted: Option<JoinHandle<()>>,
}

impl Daemon {
    pub async fn start(db: TestDb, mut settings: Settings) -> Daemon {
        // A crashed daemon's lease on PostgreSQL runs out before a restarted
        // one may watch (on SQLite the run lock lets it take it at once):
        // seconds here rather than the default ten.
        settings.leases.ttl_ms = 2_000;
        settings.leases.renew_ms = 500;
        settings.leases.retry_ms = 100;
        let ctx = Context::build(settings.clone())
            .await
            .expect("context builds");
        let network = *settings
            .enabled_networks()
            .first()
            .expect("one network enabled");
        let mut d = Daemon {
            db,
            settings,
            ctx,
            network,
            stop: None,
            task: None,
            aborted: None,
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
            self.aborted = Some(t);
        }
    }

    pub async fn start_again(&mut self) {
        // A killed process's connections die with it, and SQLite's locks
        // with them. Here the dropped tasks' connections outlive them in
        // the old pool, one perhaps inside a transaction whose rollback
        // waits for the connection's next use: a write lock the new
        // process would meet as "database is locked" (seen in CI). Closing
        // the pool ends them as the process's end would, once the aborted
        // task is gone: its set of tasks, dropped with it, aborts the
        // watcher and reconciler and returns their connections (a close
        // begun before that could time out with one still checked out, a
        // write lock held, seen in CI again).
        if let Some(t) = self.aborted.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.ctx.store.close()).await;
        self.ctx = Context::build(self.settings.clone())
            .await
            .expect("context builds");
        self.spawn();
    }

    pub async fn order(&self, reference: &str, usd: &str) -> IntentRecord {
        self.create("order", reference, usd).await
    }

    pub async fn create(&self, kind: &str, reference: &str, usd: &str) -> IntentRecord {
        let native = match self.network {
            Network::Bitcoin => "BTC",
            Network::Litecoin => "LTC",
            Network::Ethereum => "ETH",
            Network::Tron => "TRX",
            _ => "SOL",
        };
        self.create_in(native, kind, reference, usd).await
    }

    /// An intent paid in `asset` on the daemon's network.
    pub async fn create_in(
        &self,
        asset: &str,
        kind: &str,
        reference: &str,
        usd: &str,
    ) -> IntentRecord {
        self.ctx
            .intents
            .create(&NewIntent {
                kind: kind.into(),
                reference: reference.into(),
                account: "acct-1".into(),
                asset: asset.into(),
                network: self.network.as_str().into(),
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
                let status = self.ctx.store.chain_status(self.network).await.unwrap();
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
        .await;
    }

    /// Waits until the watcher's cursor is block `hash`.
    pub async fn wait_cursor_at(&self, hash: &str) {
        self.wait_chain(&format!("block {hash}"), |s| {
            s.cursor_hash.as_deref() == Some(hash)
        })
        .await;
    }

    /// Waits until the watcher reports `state` (running, degraded, halted).
    pub async fn wait_chain_state(&self, state: &str) -> ChainStatus {
        self.wait_chain(&format!("state {state}"), |s| s.watcher_state == state)
            .await
    }

    async fn wait_chain(&self, what: &str, done: impl Fn(&ChainStatus) -> bool) -> ChainStatus {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let s = self.ctx.store.chain_status(self.network).await.unwrap();
            if let Some(s) = s.as_ref().filter(|s| done(s)) {
                return s.clone();
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
            .transfers(Some(self.network), None, 100)
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

    /// The money rules hold (`paywatch check`): no top-up credited twice or
    /// unsettled, none settled uncredited, the ledger's sum right. Run after
    /// every fault a story injects.
    pub async fn assert_money_rules(&self) {
        let check = self.ctx.store.check_invariants().await.unwrap();
        assert!(
            check.violations.is_empty(),
            "money rules broken: {:#?}",
            check.violations
        );
        assert_eq!(check.ledger_topup_cents, check.settled_topup_cents);
    }
}

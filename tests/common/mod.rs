//! The test harness: a real database (SQLite file or a fresh PostgreSQL
//! database), a scripted chain, and the daemon's own components wired the
//! way `paywatch run` wires them.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use paywatch::clock::{Clock, ManualClock};
use paywatch::ingest::Ingest;
use paywatch::intents::{
    AddressDeriver, FixedRates, IntentError, IntentPolicy, IntentService, NewIntent, RateBook,
};
use paywatch::reconcile::{PassReport, Reconciler, Tolerance};
use paywatch::store::{IntentRecord, Store};
use paywatch_core::{
    Amount, Asset, AssetId, BlockSource, CanonicalStream, Method, Network, WatchSet,
};
use paywatch_testkit::{ScriptedChain, ScriptedSource};
use rust_decimal::Decimal;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Column, Row as _, TypeInfo};

/// Runs each named scenario `async fn name(b: Backend)` once on SQLite and
/// once on PostgreSQL: `on_both_databases!(a, b, c);`.
#[allow(unused_macros)]
macro_rules! on_both_databases {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Backend::Sqlite).await })+
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Backend::Postgres).await })+
        }
    };
}

pub mod api;
pub mod backlog;
pub mod browser;
pub mod contract;
pub mod daemon;
pub mod eth;
pub mod ltc;
pub mod private_postgres;
pub mod proxy;
pub mod replica;
pub mod schemathesis;
pub mod solana;
pub mod sse;
pub mod tron;
pub mod world;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Where the test PostgreSQL lives; CI and dev machines run one on loopback.
pub fn postgres_admin_url() -> String {
    std::env::var("PAYWATCH_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}_{}_{}_{}", std::process::id(), n, nanos)
}

/// A fresh, migrated, empty database. PostgreSQL missing is a failure, never a skip.
pub struct TestDb {
    pub url: String,
    pub store: Store,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// A fresh, migrated SQLite database at `path`, in a directory the test
    /// owns (a small filesystem, say).
    pub async fn sqlite_at(path: &std::path::Path) -> TestDb {
        TestDb::at(&format!("sqlite://{}", path.display())).await
    }

    /// The database at `url` (a server of the test's own), migrated.
    pub async fn at(url: &str) -> TestDb {
        let url = url.to_owned();
        let store = Store::connect(&url).await.expect("connect");
        store.migrate().await.expect("migrate");
        TestDb {
            url,
            store,
            _dir: None,
        }
    }

    pub async fn new(backend: Backend) -> TestDb {
        let db = TestDb::empty(backend).await;
        db.store.migrate().await.expect("migrate");
        db
    }

    /// A fresh database with no schema yet.
    pub async fn empty(backend: Backend) -> TestDb {
        let (url, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                (
                    format!("sqlite://{}", dir.path().join("paywatch.db").display()),
                    Some(dir),
                )
            }
            Backend::Postgres => {
                let admin = postgres_admin_url();
                let name = unique_name("pwtest");
                let admin_store = Store::connect(&format!("{admin}/postgres")).await.unwrap_or_else(|e| {
                    panic!("PostgreSQL is required for these tests ({admin}): {e}. Start it or set PAYWATCH_TEST_POSTGRES.")
                });
                admin_store
                    .execute_raw(&format!("CREATE DATABASE {name}"))
                    .await
                    .expect("create test database");
                admin_store.close().await;
                (format!("{admin}/{name}"), None)
            }
        };
        let store = Store::connect(&url).await.expect("connect");
        TestDb {
            url,
            store,
            _dir: dir,
        }
    }
}

pub const T0_MS: i64 = 1_700_000_000_000;

/// Rates used across scenarios: round numbers so amounts are easy to read.
pub fn rates() -> HashMap<Asset, Decimal> {
    [
        ("BTC", "50000"),
        ("LTC", "100"),
        ("ETH", "2500"),
        ("TRX", "0.25"),
        ("SOL", "200"),
    ]
    .into_iter()
    .map(|(a, r)| (Asset::from_str(a).unwrap(), Decimal::from_str(r).unwrap()))
    .collect()
}

pub struct Harness {
    pub db: TestDb,
    pub store: Store,
    pub clock: Arc<ManualClock>,
    pub chain: ScriptedChain,
    pub network: Network,
    pub watch: Arc<WatchSet>,
    pub intents: IntentService,
    pub ingest: Ingest,
    pub reconciler: Reconciler,
    pub stream: CanonicalStream<ScriptedSource>,
    pub max_depth: usize,
    /// Where the first stream started: the watcher's configured `start_height`.
    pub start_height: u64,
    pool_counter: u64,
    /// Chain events per ingest transaction, as `events_per_transaction`.
    pub events_per_transaction: usize,
    /// Reconcile after every ingest transaction, as a concurrent reconciler may.
    pub reconcile_between_writes: bool,
    tolerance: HashMap<Method, Tolerance>,
    rates: HashMap<Asset, Decimal>,
    reader: sqlx::AnyPool,
}

impl Harness {
    /// A chain on `network` whose blocks are final after `confirmations`.
    pub async fn new(backend: Backend, network: Network, confirmations: u64) -> Harness {
        Harness::with_policy(backend, network, confirmations, HashMap::new()).await
    }

    pub async fn with_policy(
        backend: Backend,
        network: Network,
        confirmations: u64,
        tolerance: HashMap<Method, Tolerance>,
    ) -> Harness {
        Harness::build(backend, network, confirmations, tolerance, rates()).await
    }

    /// Like [`Harness::new`], quoting with `rates` instead of [`rates()`].
    pub async fn with_rates(
        backend: Backend,
        network: Network,
        confirmations: u64,
        rates: HashMap<Asset, Decimal>,
    ) -> Harness {
        Harness::build(backend, network, confirmations, HashMap::new(), rates).await
    }

    async fn build(
        backend: Backend,
        network: Network,
        confirmations: u64,
        tolerance: HashMap<Method, Tolerance>,
        rates: HashMap<Asset, Decimal>,
    ) -> Harness {
        let db = TestDb::new(backend).await;
        Harness::build_on(db, network, confirmations, tolerance, rates).await
    }

    /// Like [`Harness::new`], on a database the test made itself (a server
    /// of its own, say, with production's roles).
    pub async fn on(db: TestDb, network: Network, confirmations: u64) -> Harness {
        Harness::build_on(db, network, confirmations, HashMap::new(), rates()).await
    }

    async fn build_on(
        db: TestDb,
        network: Network,
        confirmations: u64,
        tolerance: HashMap<Method, Tolerance>,
        rates: HashMap<Asset, Decimal>,
    ) -> Harness {
        let store = db.store.clone();
        let clock = Arc::new(ManualClock::new(T0_MS));
        let chain = ScriptedChain::new(network, 100);
        chain.set_confirmations(confirmations);
        chain.set_block_time(T0_MS / 1000);
        let watch = Arc::new(WatchSet::new(network));
        let (intents, ingest, reconciler) = components(
            &store,
            &clock,
            network,
            &watch,
            &tolerance,
            &rates,
            HashMap::new(),
        );
        store.ensure_chain_state(network, T0_MS).await.unwrap();
        let max_depth = 20;
        let start_height = chain.height();
        let stream = CanonicalStream::new(
            chain.source(watch.clone()),
            Vec::new(),
            start_height,
            max_depth,
        );
        let reader = AnyPoolOptions::new()
            .max_connections(1)
            .connect(&db.url)
            .await
            .expect("reader connection");
        Harness {
            db,
            store,
            clock,
            chain,
            network,
            watch,
            intents,
            ingest,
            reconciler,
            stream,
            max_depth,
            start_height,
            pool_counter: 0,
            events_per_transaction: 50,
            reconcile_between_writes: false,
            tolerance,
            rates,
            reader,
        }
    }

    /// Stops the "process" and starts a new one on the same database URL:
    /// the old connections close, and a new store, watch set (reloaded from
    /// the issued addresses), intent service, ingest, reconciler and stream
    /// (from the persisted cursor) are built, as `paywatch run` would at
    /// start. The chain and the clock carry on.
    pub async fn restart_process(&mut self) {
        self.store.close().await;
        let store = Store::connect(&self.db.url).await.expect("reconnect");
        store
            .migrate()
            .await
            .expect("migrations are safe at each start");
        store
            .ensure_chain_state(self.network, self.clock.now_ms())
            .await
            .unwrap();
        let watch = Arc::new(WatchSet::new(self.network));
        let issued = store.issued_addresses(self.network, 0).await.unwrap();
        watch.extend(issued.iter().map(|(a, _)| a.as_str()));
        // As the watcher does: the twins of the other network's addresses
        // (money sent on the wrong network) are watched too.
        if let Some(other) = paywatch::twin::twin_network(self.network) {
            for (address, _) in store.issued_addresses(other, 0).await.unwrap() {
                if let Some((_, mine)) = paywatch::twin::twin(other, &address) {
                    watch.insert(&mine);
                }
            }
        }
        // And the destinations of open and recently refunded refunds, whose
        // transactions are checked on chain.
        for (destination, _) in store
            .refund_destinations(self.network, 0, self.clock.now_ms())
            .await
            .unwrap()
        {
            watch.insert(&destination);
        }
        let (intents, ingest, reconciler) = components(
            &store,
            &self.clock,
            self.network,
            &watch,
            &self.tolerance,
            &self.rates,
            self.intents.derivers().clone(),
        );
        self.db.store = store.clone();
        self.store = store;
        self.watch = watch;
        self.intents = intents;
        self.ingest = ingest;
        self.reconciler = reconciler;
        self.restart_stream().await;
    }

    /// Issues this network's addresses from `deriver` instead of its pool,
    /// from now on and after restarts.
    pub fn use_deriver(&mut self, deriver: Arc<dyn AddressDeriver>) {
        let (intents, _, _) = components(
            &self.store,
            &self.clock,
            self.network,
            &self.watch,
            &self.tolerance,
            &self.rates,
            HashMap::from([(self.network, deriver)]),
        );
        self.intents = intents;
    }

    /// Stops the "process" and starts a new one on the database at `url`
    /// (a restored copy, say), as [`Harness::restart_process`] does; the
    /// test's own reader moves there too. The chain and the clock carry on.
    pub async fn restart_on(&mut self, url: &str) {
        self.db.url = url.to_owned();
        self.reader.close().await;
        self.reader = AnyPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .expect("reader connection");
        self.restart_process().await;
    }

    /// A second, independent connection pool on the same database, as another
    /// worker process would have.
    pub async fn another_store(&self) -> Store {
        Store::connect(&self.db.url)
            .await
            .expect("second connection")
    }

    /// An ingest worker of another process on the same database.
    pub async fn another_ingest(&self) -> Ingest {
        Ingest::new(self.another_store().await, self.clock.clone())
    }

    /// An operator changed the tolerance (`paywatch config apply`): this
    /// process decides with `tolerance` from here on, the next restart too.
    pub fn set_tolerance(&mut self, tolerance: HashMap<Method, Tolerance>) {
        let clock: Arc<dyn Clock> = self.clock.clone();
        self.reconciler = Reconciler::new(self.store.clone(), clock, tolerance.clone(), 500);
        self.tolerance = tolerance;
    }

    /// A reconciler of another process on the same database.
    pub async fn another_reconciler(&self, batch_size: i64) -> Reconciler {
        Reconciler::new(
            self.another_store().await,
            self.clock.clone(),
            self.tolerance.clone(),
            batch_size,
        )
    }

    /// Imports `n` fresh addresses of this network's shape into its pool.
    pub async fn import_pool(&mut self, n: usize) -> Vec<String> {
        let addresses: Vec<String> = (0..n)
            .map(|_| {
                self.pool_counter += 1;
                fake_address(self.network, self.pool_counter)
            })
            .collect();
        self.store
            .import_addresses(self.network, &addresses, self.clock.now_ms())
            .await
            .unwrap();
        addresses
    }

    pub fn request(&self, kind: &str, reference: &str, asset: &str, usd: &str) -> NewIntent {
        NewIntent {
            kind: kind.into(),
            reference: reference.into(),
            account: "acct-1".into(),
            asset: asset.into(),
            network: self.network.as_str().into(),
            usd_amount: usd.into(),
        }
    }

    pub async fn try_create(
        &self,
        kind: &str,
        reference: &str,
        asset: &str,
        usd: &str,
    ) -> Result<IntentRecord, IntentError> {
        self.intents
            .create(&self.request(kind, reference, asset, usd))
            .await
    }

    pub async fn create(
        &self,
        kind: &str,
        reference: &str,
        asset: &str,
        usd: &str,
    ) -> IntentRecord {
        self.try_create(kind, reference, asset, usd)
            .await
            .expect("intent created")
    }

    /// Queues a payment of `amount` base units of `asset` to `to`.
    pub fn pay(&self, to: &str, asset: Asset, amount: Amount) -> String {
        self.chain.pay(to, AssetId::Known(asset), amount.0)
    }

    /// Mines `n` blocks, moving block time and the clock along by a minute each.
    pub fn mine(&self, n: usize) {
        for _ in 0..n {
            self.chain.set_block_time(self.clock.now_ms() / 1000);
            self.chain.mine();
            self.clock.advance_secs(60);
        }
    }

    /// Drives the watcher's path once to the tip: stream → ingest → progress,
    /// then reconcile until idle.
    pub async fn sync(&mut self) -> PassReport {
        self.follow_chain().await;
        self.reconciler.run_until_idle().await.expect("reconcile")
    }

    pub async fn follow_chain(&mut self) {
        loop {
            let events = self.stream.next_batch(50).await.expect("stream");
            if events.is_empty() {
                break;
            }
            // As the watcher writes a batch: a reorg whole, with the final
            // height it implies; other events `events_per_transaction` at a
            // time, each with the final height it makes, reconcile free to
            // run between two transactions.
            let final_height = self
                .stream
                .confirmed_final_height()
                .await
                .expect("final height")
                .unwrap_or(0);
            let tip = self.chain.height();
            for chunk in paywatch::watcher::transactions_for(&events, self.events_per_transaction) {
                self.ingest
                    .apply_with_progress(
                        self.network,
                        chunk.events,
                        Some((tip, chunk.final_height(final_height))),
                    )
                    .await
                    .expect("ingest");
                if self.reconcile_between_writes {
                    self.reconciler.run_until_idle().await.expect("reconcile");
                }
            }
        }
        let tip = self.chain.height();
        // As the watcher does: only a final height that covers blocks we
        // applied and the node still has.
        let final_height = self
            .stream
            .confirmed_final_height()
            .await
            .unwrap()
            .unwrap_or(0);
        self.store
            .record_chain_progress(self.network, tip, final_height, self.clock.now_ms())
            .await
            .unwrap();
        self.follow_mempool().await;
    }

    /// As the watcher does once caught up: records what waits in the node's
    /// mempool (only where the chain shows it: `chain.show_mempool()`).
    pub async fn follow_mempool(&mut self) {
        let Some(snapshot) = self.stream.source().unconfirmed().await.expect("mempool") else {
            return;
        };
        if self.stream.cursor_tip().map(|c| c.hash.as_str()) != Some(snapshot.tip.as_str()) {
            return;
        }
        self.ingest
            .apply_unconfirmed(self.network, &snapshot.tip, &snapshot.transfers)
            .await
            .expect("mempool ingest");
    }

    /// Reads the block holding `address`'s newest live transfer again, as a
    /// rescan does: the transfer is offered to ingest once more (recording
    /// nothing new) and the address is queued. Returns the rows newly
    /// recorded; `None` when the address has no live transfer in a block.
    pub async fn rescan_newest(&self, address: &str) -> Option<u64> {
        let rows = self
            .rows(&format!(
                "SELECT t.txid, CAST(t.idx AS BIGINT) AS idx, t.block_hash, \
                 CAST(t.block_height AS BIGINT) AS height, b.parent, CAST(t.block_time AS BIGINT) AS block_time, \
                 CAST(t.amount AS TEXT) AS amount, t.asset \
                 FROM transfers t JOIN blocks b ON b.network = t.network AND b.hash = t.block_hash \
                 WHERE t.to_address = '{address}' AND t.orphaned_at IS NULL AND b.orphaned_at IS NULL \
                 ORDER BY t.id DESC"
            ))
            .await;
        let row = rows.first()?;
        let block = paywatch_core::BlockRef {
            height: row.int("height") as u64,
            hash: row.get("block_hash").unwrap().to_owned(),
            parent: row.get("parent").unwrap().to_owned(),
        };
        let transfer = paywatch_core::Transfer {
            network: self.network,
            asset: AssetId::from_code(row.get("asset").unwrap()),
            txid: row.get("txid").unwrap().to_owned(),
            index: row.int("idx") as u32,
            to: address.to_owned(),
            from: None,
            amount: Amount(row.get("amount").unwrap().parse().unwrap()),
            success: true,
            matures_at: None,
        };
        Some(
            self.ingest
                .backfill(
                    self.network,
                    &block,
                    row.int("block_time") / 1000,
                    &[transfer],
                )
                .await
                .expect("backfill"),
        )
    }

    /// Ends the harness and, on PostgreSQL, drops its database: for tests
    /// that make thousands (the model-based test), which would fill the disk.
    pub async fn dispose(self) {
        self.store.close().await;
        self.reader.close().await;
        if let Some((admin, name)) = self.db.url.rsplit_once('/') {
            if self.db.url.starts_with("postgres") {
                let admin_store = Store::connect(&format!("{admin}/postgres"))
                    .await
                    .expect("admin connection");
                admin_store
                    .execute_raw(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .expect("drop the test database");
                admin_store.close().await;
            }
        }
    }

    /// A new stream from the persisted cursor, as after a restart.
    pub async fn restart_stream(&mut self) {
        let cursor = self
            .store
            .load_cursor(self.network, self.max_depth + 1)
            .await
            .unwrap();
        // As the watcher opens its stream: from the stored start height,
        // else the cursor's first block, else the configured start.
        let stored = self
            .store
            .chain_status(self.network)
            .await
            .unwrap()
            .and_then(|s| s.start_height);
        let start = stored
            .or(cursor.first().map(|b| b.height))
            .unwrap_or(self.start_height);
        self.stream = CanonicalStream::new(
            self.chain.source(self.watch.clone()),
            cursor,
            start,
            self.max_depth,
        );
    }

    pub async fn intent(&self, id: i64) -> IntentRecord {
        self.store.intent(id).await.unwrap().expect("intent exists")
    }

    pub async fn balance(&self, account: &str) -> i64 {
        self.store.balance_cents(account).await.unwrap()
    }

    pub async fn count(&self, sql: &str) -> i64 {
        self.store.count_raw(sql).await.unwrap()
    }

    /// Every row of `sql`, read through a connection of its own, as the
    /// storefront reads the views. Cast NUMERIC columns to TEXT in `sql`:
    /// the `Any` driver does not read PostgreSQL NUMERIC.
    pub async fn rows(&self, sql: &str) -> Vec<Row> {
        sqlx::query(sql)
            .fetch_all(&self.reader)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(Row::from_any)
            .collect()
    }

    /// The one row of `sql`.
    pub async fn row(&self, sql: &str) -> Row {
        let mut rows = self.rows(sql).await;
        assert_eq!(
            rows.len(),
            1,
            "expected exactly one row from {sql}: {rows:?}"
        );
        rows.remove(0)
    }

    /// The intent's row in the storefront's `paywatch_intents` view.
    pub async fn intent_view(&self, id: i64) -> Row {
        self.row(&format!(
            "SELECT intent_id, kind, reference, status, exception, reason, \
             CAST(amount_due AS TEXT) AS amount_due, \
             CAST(amount_received_final AS TEXT) AS amount_received_final, \
             CAST(amount_received_pending AS TEXT) AS amount_received_pending, \
             CAST(amount_excess AS TEXT) AS amount_excess, \
             paid_at, reversed_at, declared_paid_at \
             FROM paywatch_intents WHERE intent_id = {id}"
        ))
        .await
    }

    /// The reference's row in the storefront's `paywatch_payment_status` view.
    pub async fn payment_status(&self, kind: &str, reference: &str) -> Row {
        self.row(&format!(
            "SELECT kind, reference, account, payment_status, paid_intent_id, paid_at, paid_usd_cents, \
             latest_intent_id, latest_status, latest_exception, intent_count, needs_review_count \
             FROM paywatch_payment_status WHERE kind = '{kind}' AND reference = '{reference}'"
        ))
        .await
    }

    /// The intent's rows in the storefront's `paywatch_intent_transfers` view, oldest first.
    pub async fn intent_transfers(&self, id: i64) -> Vec<Row> {
        self.rows(&format!(
            "SELECT intent_id, transfer_id, asset, txid, CAST(amount AS TEXT) AS amount, \
             CAST(counts_toward_intent AS BIGINT) AS counts_toward_intent, tx_status, orphaned_at, \
             CAST(confirmations AS BIGINT) AS confirmations, CAST(is_final AS BIGINT) AS is_final \
             FROM paywatch_intent_transfers WHERE intent_id = {id} ORDER BY transfer_id"
        ))
        .await
    }

    /// The account's row in `paywatch_balances`, if it has ledger entries.
    pub async fn balance_view(&self, account: &str) -> Option<Row> {
        self.rows(&format!(
            "SELECT account, available_usd_cents, entries FROM paywatch_balances WHERE account = '{account}'"
        ))
        .await
        .pop()
    }

    /// The statuses an intent went through, from its history.
    pub async fn status_history(&self, id: i64) -> Vec<String> {
        self.store
            .intent_events(id)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|e| e.status)
            .collect()
    }

    /// What intent creation and reconcile write, counted: a request that
    /// fails must leave every one of these as it was.
    pub async fn footprint(&self) -> Footprint {
        Footprint {
            intents: self.count("SELECT COUNT(*) FROM intents").await,
            issued_addresses: self
                .count("SELECT COUNT(*) FROM addresses WHERE issued_at IS NOT NULL")
                .await,
            linked_addresses: self
                .count("SELECT COUNT(*) FROM addresses WHERE intent_id IS NOT NULL")
                .await,
            intent_events: self.count("SELECT COUNT(*) FROM intent_events").await,
            outbox: self.count("SELECT COUNT(*) FROM outbox").await,
            settlements: self.count("SELECT COUNT(*) FROM settlements").await,
            ledger_entries: self.count("SELECT COUNT(*) FROM ledger_entries").await,
        }
    }

    /// Moves the clock a minute past the intent's expiry.
    pub fn pass_expiry(&self, intent: &IntentRecord) {
        let target = intent.expires_at_ms + 60_000;
        assert!(self.clock.now_ms() <= target, "the clock never goes back");
        self.clock.set(target);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    pub intents: i64,
    pub issued_addresses: i64,
    pub linked_addresses: i64,
    pub intent_events: i64,
    pub outbox: i64,
    pub settlements: i64,
    pub ledger_entries: i64,
}

/// One row read back as text, by column name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row(Vec<(String, Option<String>)>);

impl Row {
    fn from_any(row: &AnyRow) -> Row {
        Row(row
            .columns()
            .iter()
            .map(|c| {
                let i = c.ordinal();
                let value = if let Ok(v) = row.try_get::<Option<String>, _>(i) {
                    v
                } else if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
                    v.map(|v| v.to_string())
                } else if let Ok(v) = row.try_get::<Option<i32>, _>(i) {
                    v.map(|v| v.to_string())
                } else if let Ok(v) = row.try_get::<Option<bool>, _>(i) {
                    v.map(|v| v.to_string())
                } else {
                    panic!(
                        "column {} has a type the test reader does not decode: {}",
                        c.name(),
                        c.type_info().name()
                    )
                };
                (c.name().to_owned(), value)
            })
            .collect())
    }

    /// The column's value as text; `None` for SQL NULL. Panics on an unknown column.
    pub fn get(&self, column: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| name == column)
            .unwrap_or_else(|| panic!("no column {column} in {self:?}"))
            .1
            .as_deref()
    }

    /// The column's value as an integer. Panics on NULL.
    pub fn int(&self, column: &str) -> i64 {
        let text = self
            .get(column)
            .unwrap_or_else(|| panic!("{column} is NULL in {self:?}"));
        text.parse()
            .unwrap_or_else(|_| panic!("{column} is '{text}', not an integer"))
    }
}

/// The intent service, ingest and reconciler, wired as `paywatch run` wires them.
fn components(
    store: &Store,
    clock: &Arc<ManualClock>,
    network: Network,
    watch: &Arc<WatchSet>,
    tolerance: &HashMap<Method, Tolerance>,
    rates: &HashMap<Asset, Decimal>,
    derivers: HashMap<Network, Arc<dyn AddressDeriver>>,
) -> (IntentService, Ingest, Reconciler) {
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let policy = IntentPolicy {
        enabled: Network::ALL.into_iter().collect::<HashSet<_>>(),
        expiry_secs: 1800,
        topup_amounts_cents: vec![10_000, 50_000, 200_000, 1_000_000],
        quote_decimals: HashMap::new(),
        confirm_window_secs: HashMap::new(),
        max_open_per_reference: paywatch::intents::DEFAULT_MAX_OPEN_PER_REFERENCE,
    };
    let rate_book = RateBook::new(
        Arc::new(FixedRates::new(rates.clone(), dyn_clock.clone())),
        true,
        dyn_clock.clone(),
    );
    let intents = IntentService::new(
        store.clone(),
        rate_book,
        policy,
        derivers,
        [(network, watch.clone())].into_iter().collect(),
        dyn_clock.clone(),
    );
    let ingest = Ingest::new(store.clone(), dyn_clock.clone());
    let reconciler = Reconciler::new(store.clone(), dyn_clock, tolerance.clone(), 500);
    (intents, ingest, reconciler)
}

/// A syntactically valid address for `network`, unique per `n`.
pub fn fake_address(network: Network, n: u64) -> String {
    const B58: &[u8] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    let b58 = |len: usize, mut v: u64| -> String {
        (0..len)
            .map(|_| {
                let c = B58[(v % 58) as usize] as char;
                v /= 58;
                c
            })
            .collect()
    };
    match network {
        Network::Ethereum => format!("0x{:040x}", 0xabc0_0000_0000u64 + n),
        Network::Tron => format!("T{}", b58(33, n.wrapping_mul(0x9e37_79b9_7f4a_7c15))),
        Network::Solana => b58(44, n.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        Network::Bitcoin => format!("bcrt1q{:038x}", n),
        Network::Litecoin => format!("rltc1q{:038x}", n),
        _ => unreachable!("no other networks"),
    }
}

/// A stand-in for the chain crates' BIP44 Ethereum deriver: index i derives
/// `0x…d00d` + i, so a test can name the address at any index.
#[derive(Debug)]
pub struct Counting;

impl AddressDeriver for Counting {
    fn network(&self) -> Network {
        Network::Ethereum
    }

    fn derive(&self, index: u32) -> Result<String, String> {
        Ok(format!("0x{:040x}", 0xd00d_0000u64 + u64::from(index)))
    }
}

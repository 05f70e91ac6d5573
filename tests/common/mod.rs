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
    FixedRates, IntentError, IntentPolicy, IntentService, NewIntent, RateBook,
};
use paywatch::reconcile::{PassReport, Reconciler};
use paywatch::store::{IntentRecord, Store};
use paywatch_core::{Amount, Asset, AssetId, CanonicalStream, Method, Network, WatchSet};
use paywatch_testkit::{ScriptedChain, ScriptedSource};
use rust_decimal::Decimal;

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
    pub async fn new(backend: Backend) -> TestDb {
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
        store.migrate().await.expect("migrate");
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
    pool_counter: u64,
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
        tolerance: HashMap<Method, Amount>,
    ) -> Harness {
        let db = TestDb::new(backend).await;
        let store = db.store.clone();
        let clock = Arc::new(ManualClock::new(T0_MS));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let chain = ScriptedChain::new(network, 100);
        chain.set_confirmations(confirmations);
        chain.set_block_time(T0_MS / 1000);
        let watch = Arc::new(WatchSet::new(network));
        let policy = IntentPolicy {
            enabled: Network::ALL.into_iter().collect::<HashSet<_>>(),
            expiry_secs: 1800,
            topup_amounts_cents: vec![10_000, 50_000, 200_000, 1_000_000],
            quote_decimals: HashMap::new(),
        };
        let rate_book = RateBook::new(
            Arc::new(FixedRates::new(rates(), dyn_clock.clone())),
            true,
            dyn_clock.clone(),
        );
        let intents = IntentService::new(
            store.clone(),
            rate_book,
            policy,
            HashMap::new(),
            [(network, watch.clone())].into_iter().collect(),
            dyn_clock.clone(),
        );
        let ingest = Ingest::new(store.clone(), dyn_clock.clone());
        let reconciler = Reconciler::new(store.clone(), dyn_clock.clone(), tolerance, 500);
        store.ensure_chain_state(network, T0_MS).await.unwrap();
        let max_depth = 20;
        let stream = CanonicalStream::new(
            chain.source(watch.clone()),
            Vec::new(),
            chain.height(),
            max_depth,
        );
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
            pool_counter: 0,
        }
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
        use paywatch_core::BlockSource;
        loop {
            let events = self.stream.next_batch(50).await.expect("stream");
            if events.is_empty() {
                break;
            }
            self.ingest
                .apply(self.network, &events)
                .await
                .expect("ingest");
        }
        let tip = self.chain.height();
        let final_height = self.stream.source().final_height().await.unwrap();
        self.store
            .record_chain_progress(self.network, tip, final_height, self.clock.now_ms())
            .await
            .unwrap();
    }

    /// A new stream from the persisted cursor, as after a restart.
    pub async fn restart_stream(&mut self) {
        let cursor = self
            .store
            .load_cursor(self.network, self.max_depth + 1)
            .await
            .unwrap();
        let start = cursor.first().map_or(self.chain.height(), |b| b.height);
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

//! A year of production beside a fresh install (issue 21: growth that stays
//! fast). Two PostgreSQL databases: one with `--intents` settled intents
//! (default 3,650,000: 10,000 a day for a year), each with its address,
//! transfer, block, two history events and two feed events; one with 100.
//! On each it times every hot query (the store's own, from
//! `paywatch::store::hot_queries`, which the index-use test checks are
//! planned on their indexes), what a takeover loads (every live address
//! into the watch set, and the cursor) with the set's memory, the same once
//! the addresses quiet for three days went dormant (as an Electrum watcher
//! leaves them, issue 21 found 2), and reconcile throughput (2,000 top-ups
//! paid and credited through ingest and reconcile).
//!
//!   cargo run --example year_of_data [-- --intents N] [--samples S] [--keep]
//!
//! On `PAYWATCH_BENCH_POSTGRES` (default `postgres://postgres@127.0.0.1:5432`);
//! the databases are dropped at the end unless `--keep`. The history is made
//! in SQL (generate_series), not through paywatch. Query times are the
//! database's; takeover and reconcile include this (debug) client.

#![allow(clippy::float_arithmetic)] // figures for people, never money

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use paywatch::clock::{Clock, ManualClock};
use paywatch::ingest::Ingest;
use paywatch::intents::{FixedRates, IntentPolicy, IntentService, NewIntent, RateBook};
use paywatch::reconcile::Reconciler;
use paywatch::store::hot_queries::{history_sql, hot_queries, HotQuery};
use paywatch::store::Store;
use paywatch_core::{Asset, AssetId, CanonicalStream, Network, WatchSet};
use paywatch_testkit::ScriptedChain;
use rust_decimal::Decimal;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

struct Args {
    intents: i64,
    samples: usize,
    keep: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        intents: 3_650_000,
        samples: 200,
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--intents" => a.intents = it.next().context("--intents N")?.parse()?,
            "--samples" => a.samples = it.next().context("--samples N")?.parse()?,
            "--keep" => a.keep = true,
            other => bail!("unknown argument {other}: --intents N, --samples N, --keep"),
        }
    }
    if a.intents < 10_000 {
        bail!("--intents: at least 10000");
    }
    Ok(a)
}

/// Beyond [`history_sql`]: each intent's two history events and two feed
/// events, as reconcile writes them (creation and settlement).
fn events_sql(rows: i64) -> Vec<String> {
    vec![
        "ALTER TABLE outbox DISABLE TRIGGER outbox_enrol_webhook".to_owned(),
        format!(
            "INSERT INTO intent_events (intent_id, at, kind, status) \
             SELECT n, n + e, 'status', CASE WHEN e = 0 THEN 'awaiting_payment' ELSE 'paid' END \
             FROM generate_series(1, {rows}) n, generate_series(0, 1) e"
        ),
        format!(
            "INSERT INTO outbox (seq, topic, intent_id, kind, reference, payload, created_at) \
             SELECT 2 * n - 1 + e, 'intent.status', n, 'order', 'order-' || n, \
               '{{\"event\":\"intent.status\",\"intent_id\":' || n || '}}', n \
             FROM generate_series(1, {rows}) n, generate_series(0, 1) e"
        ),
        format!("SELECT setval('outbox_seq', 2 * {rows} + 1)"),
        "ALTER TABLE outbox ENABLE TRIGGER outbox_enrol_webhook".to_owned(),
        "ANALYZE".to_owned(),
    ]
}

struct Db {
    name: String,
    url: String,
}

async fn make_db(root: &PgPool, admin: &str, label: &str, rows: i64) -> anyhow::Result<Db> {
    let name = format!("pwbench_year_{label}_{}", std::process::id());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(root)
        .await?;
    let url = format!("{admin}/{name}");
    let store = Store::connect(&url).await?;
    store.migrate().await?;
    store.close().await;
    let mut conn = PgConnection::connect(&url).await?;
    let started = Instant::now();
    for sql in history_sql(rows).into_iter().chain(events_sql(rows)) {
        sqlx::query(&sql)
            .execute(&mut conn)
            .await
            .with_context(|| format!("loading: {sql}"))?;
    }
    let size: String =
        sqlx::query_scalar("SELECT pg_size_pretty(pg_database_size(current_database()))")
            .fetch_one(&mut conn)
            .await?;
    conn.close().await?;
    println!(
        "{label}: {rows} settled intents with their addresses, transfers and blocks, {} history and {} feed events, loaded in {} s ({size})",
        2 * rows,
        2 * rows,
        started.elapsed().as_secs()
    );
    Ok(Db { name, url })
}

fn percentile(sorted: &[Duration], per_mille: usize) -> Duration {
    sorted[(sorted.len() * per_mille / 1000).min(sorted.len() - 1)]
}

/// p50 and p99 of `q`, each run in a transaction rolled back (one of them
/// writes the reconcile queue).
async fn time_query(
    conn: &mut PgConnection,
    q: &HotQuery,
    samples: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let mut took = Vec::with_capacity(samples);
    for _ in 0..samples {
        let mut tx = conn.begin().await?;
        let mut query = sqlx::query(&q.sql);
        for b in &q.binds {
            query = match b.parse::<i64>() {
                Ok(n) => query.bind(n),
                Err(_) => query.bind(b.as_str()),
            };
        }
        let start = Instant::now();
        query
            .fetch_all(&mut *tx)
            .await
            .with_context(|| q.what.to_owned())?;
        took.push(start.elapsed());
        tx.rollback().await?;
    }
    took.sort();
    Ok((percentile(&took, 500), percentile(&took, 990)))
}

/// What a new leader loads before it watches: every live address of the
/// network into its watch set (listing them, as an Electrum source's is),
/// and its cursor. Returns the time, the addresses, and the set's bytes.
async fn takeover(url: &str) -> anyhow::Result<(Duration, usize, usize)> {
    let store = Store::connect(url).await?;
    let start = Instant::now();
    let live = store.live_addresses(Network::Bitcoin, i64::MIN).await?;
    let watch = WatchSet::new(Network::Bitcoin).listing();
    watch.extend(live.iter().map(|(a, _)| a.as_str()));
    store.load_cursor(Network::Bitcoin, 64).await?;
    let took = start.elapsed();
    store.close().await;
    Ok((took, live.len(), watch.heap_bytes()))
}

/// Three days at 10,000 intents a day: what stays live with the default
/// `dormant_after_secs` (the history's clock runs a millisecond an intent).
const LIVE_INTENTS: i64 = 30_000;

/// Marks dormant what the watcher would, a page of 10,000 at a time, as
/// the first watcher after an upgrade does; returns the time and count.
async fn go_dormant(url: &str, rows: i64) -> anyhow::Result<(Duration, usize)> {
    let store = Store::connect(url).await?;
    let quiet_since = rows - LIVE_INTENTS;
    let watched_to = u64::try_from(rows)?;
    let start = Instant::now();
    let mut marked = 0;
    loop {
        let page = store
            .mark_dormant(Network::Bitcoin, quiet_since, watched_to, rows + 1, 10_000)
            .await?;
        marked += page.len();
        if page.len() < 10_000 {
            break;
        }
    }
    let took = start.elapsed();
    store.close().await;
    // As autovacuum does after a tenth of a table changed: the planner
    // learns that few addresses are live.
    let mut conn = PgConnection::connect(url).await?;
    sqlx::query("ANALYZE addresses").execute(&mut conn).await?;
    conn.close().await?;
    Ok((took, marked))
}

const T0: i64 = 1_800_000_000_000;
const PAID: usize = 2_000;

/// 2,000 top-ups created, paid in 10 blocks, ingested, then reconciled
/// and credited: reconcile's part is timed.
async fn reconcile_throughput(url: &str) -> anyhow::Result<f64> {
    let store = Store::connect(url).await?;
    let clock = Arc::new(ManualClock::new(T0));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let network = Network::Ethereum;
    let watch = Arc::new(WatchSet::new(network));
    let pool: Vec<String> = (0..PAID as u64)
        .map(|i| format!("0x{:040x}", 0xbe4c_0000_0000u64 + i))
        .collect();
    store.import_addresses(network, &pool, T0).await?;
    let rates: HashMap<Asset, Decimal> = [(Asset::Eth, Decimal::from_str("2500")?)]
        .into_iter()
        .collect();
    let intents = IntentService::new(
        store.clone(),
        RateBook::new(
            Arc::new(FixedRates::new(rates, dyn_clock.clone())),
            true,
            dyn_clock.clone(),
        ),
        IntentPolicy {
            enabled: HashSet::from([network]),
            expiry_secs: 3600,
            topup_amounts_cents: vec![10_000],
            quote_decimals: HashMap::new(),
            confirm_window_secs: HashMap::new(),
            max_open_per_reference: paywatch::intents::DEFAULT_MAX_OPEN_PER_REFERENCE,
        },
        HashMap::new(),
        HashMap::from([(network, watch.clone())]),
        dyn_clock.clone(),
    );
    let mut created = Vec::with_capacity(PAID);
    for i in 0..PAID {
        created.push(
            intents
                .create(&NewIntent {
                    kind: "topup".into(),
                    reference: format!("bench-topup-{i}"),
                    account: format!("bench-{}", i % 100),
                    asset: "ETH".into(),
                    network: "ethereum".into(),
                    usd_amount: "100".into(),
                })
                .await?,
        );
    }
    let reconciler = Reconciler::new(store.clone(), dyn_clock.clone(), HashMap::new(), 1000);
    reconciler.run_until_idle().await?;
    let chain = ScriptedChain::new(network, 1);
    chain.set_block_time(T0 / 1000);
    for block in created.chunks(PAID / 10) {
        for i in block {
            chain.pay(&i.address, AssetId::Known(Asset::Eth), i.amount_due.0);
        }
        chain.mine();
    }
    let blocks = chain.height();
    store.ensure_chain_state(network, T0).await?;
    let ingest = Ingest::new(store.clone(), dyn_clock.clone());
    let mut stream = CanonicalStream::new(chain.source(watch.clone()), Vec::new(), 1, 64);
    loop {
        let events = stream.next_batch(20).await?;
        if events.is_empty() {
            break;
        }
        ingest.apply(network, &events).await?;
    }
    store
        .record_chain_progress(network, blocks, blocks, T0)
        .await?;
    let start = Instant::now();
    let report = reconciler.run_until_idle().await?;
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(
        report.settled == PAID,
        "settled {} of {PAID}",
        report.settled
    );
    store.close().await;
    Ok(PAID as f64 / secs)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let admin = std::env::var("PAYWATCH_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned());
    let root = PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{admin}/postgres"))
        .await
        .with_context(|| format!("PostgreSQL at {admin}"))?;
    let fresh = make_db(&root, &admin, "fresh", 100).await?;
    let year = make_db(&root, &admin, "year", a.intents).await?;

    println!(
        "\nhot queries, {} runs each on one connection (p50 / p99, ms): fresh | a year",
        a.samples
    );
    let mut fresh_conn = PgConnection::connect(&fresh.url).await?;
    let mut year_conn = PgConnection::connect(&year.url).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (f, y) in hot_queries(100).iter().zip(hot_queries(a.intents).iter()) {
        let (f50, f99) = time_query(&mut fresh_conn, f, a.samples).await?;
        let (y50, y99) = time_query(&mut year_conn, y, a.samples).await?;
        println!(
            "  {:<48} {:>6.2} / {:>6.2} | {:>6.2} / {:>6.2}",
            y.what,
            ms(f50),
            ms(f99),
            ms(y50),
            ms(y99)
        );
    }
    // Not a hot query: the settled statuses' counts, made every 5 minutes.
    let whole = HotQuery {
        what: "metrics every 5 minutes: all intents by status",
        sql: "SELECT status, COUNT(*) AS n FROM intents GROUP BY status".to_owned(),
        binds: Vec::new(),
        indexes: &[],
    };
    let runs = (a.samples / 20).max(3);
    let (f50, f99) = time_query(&mut fresh_conn, &whole, runs).await?;
    let (y50, y99) = time_query(&mut year_conn, &whole, runs).await?;
    println!(
        "  {:<48} {:>6.2} / {:>6.2} | {:>6.0} / {:>6.0}",
        whole.what,
        ms(f50),
        ms(f99),
        ms(y50),
        ms(y99)
    );
    fresh_conn.close().await?;
    year_conn.close().await?;

    println!("\ntakeover: every live address into the watch set, and the cursor");
    let mb = |b: usize| b as f64 / 1e6;
    for db in [&fresh, &year] {
        let (took, n, bytes) = takeover(&db.url).await?;
        println!(
            "  {:<8} {n:>9} addresses in {:>8.1} ms, set {:>7.1} MB",
            label(db, &fresh),
            ms(took),
            mb(bytes)
        );
    }
    let (took, marked) = go_dormant(&year.url, a.intents).await?;
    println!(
        "\ndormancy (Electrum): {marked} addresses quiet for 3 days marked dormant in {:.1} s \
         (once, after the upgrade; then an hour's worth at a time)",
        took.as_secs_f64()
    );
    let (took, n, bytes) = takeover(&year.url).await?;
    println!(
        "  {:<8} {n:>9} addresses in {:>8.1} ms, set {:>7.1} MB",
        "a year",
        ms(took),
        mb(bytes)
    );

    println!("\nreconcile: {PAID} top-ups paid, ingested, then reconciled and credited");
    for db in [&fresh, &year] {
        let per_sec = reconcile_throughput(&db.url).await?;
        println!("  {:<8} {per_sec:>8.0} intents/s", label(db, &fresh));
    }

    if !a.keep {
        for db in [&fresh, &year] {
            sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", db.name))
                .execute(&root)
                .await?;
        }
    }
    Ok(())
}

fn label(db: &Db, fresh: &Db) -> &'static str {
    if db.name == fresh.name {
        "fresh"
    } else {
        "a year"
    }
}

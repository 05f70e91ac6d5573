//! Core figures, printed (never asserted): `cargo bench --bench core`.
//!
//! 1. matcher: attribution + status evaluation, 10^6 open intents and 10^6
//!    transfers, in memory, one core.
//! 2. ingest + reconcile through the real database on SQLite and PostgreSQL,
//!    with batching.
//! 3. resident memory per watched address.
//!
//! PAYWATCH_BENCH_TRANSFERS sets the size of (2) (default 20000);
//! PAYWATCH_TEST_POSTGRES the PostgreSQL server (default postgres://postgres@127.0.0.1:5432).

#![allow(clippy::float_arithmetic)] // throughput figures for people, never money

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use paywatch::clock::{Clock, ManualClock};
use paywatch::ingest::Ingest;
use paywatch::intents::{FixedRates, IntentPolicy, IntentService, NewIntent, RateBook};
use paywatch::reconcile::{
    decide, Attributed, IntentFacts, Matcher, Reconciler, Status, Tolerance,
};
use paywatch::store::{Store, TransferRecord};
use paywatch_core::{Amount, Asset, AssetId, CanonicalStream, Method, Network, WatchSet};
use paywatch_testkit::ScriptedChain;
use rust_decimal::Decimal;

const T0: i64 = 1_700_000_000_000;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "paywatch core bench ({} cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    watched_address_memory();
    matcher_throughput();
    let n: usize = std::env::var("PAYWATCH_BENCH_TRANSFERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(ingest_and_reconcile(
        "sqlite",
        &format!("sqlite://{}", dir.path().join("bench.db").display()),
        n,
    ));
    let admin = std::env::var("PAYWATCH_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    let db = format!("pwbench_{}", std::process::id());
    rt.block_on(async {
        let a = Store::connect(&format!("{admin}/postgres"))
            .await
            .expect("PostgreSQL for the bench");
        a.execute_raw(&format!("CREATE DATABASE {db}"))
            .await
            .unwrap();
        a.close().await;
    });
    rt.block_on(ingest_and_reconcile(
        "postgres",
        &format!("{admin}/{db}"),
        n,
    ));
    rt.block_on(async {
        let a = Store::connect(&format!("{admin}/postgres")).await.unwrap();
        let _ = a.execute_raw(&format!("DROP DATABASE {db}")).await;
    });
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn eth_address(i: u64) -> String {
    format!(
        "0x{:040x}",
        0x5eed_0000_0000_0000u64 ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

fn watched_address_memory() {
    const N: u64 = 1_000_000;
    let addresses: Vec<String> = (0..N).map(eth_address).collect();
    let set = WatchSet::new(Network::Ethereum);
    let before = rss_bytes();
    set.extend(addresses.iter().map(String::as_str));
    let after = rss_bytes();
    assert_eq!(set.len() as u64, N);
    let hits = Instant::now();
    let found = addresses.iter().filter(|a| set.contains(a)).count();
    let lookup_ns = hits.elapsed().as_nanos() as f64 / N as f64;
    println!(
        "watched addresses: {N} in the watch set, resident memory +{} bytes = {:.1} bytes/address (aim <= 150); lookup {:.0} ns ({found} found)",
        after - before,
        (after - before) as f64 / N as f64,
        lookup_ns
    );
}

fn matcher_throughput() {
    const INTENTS: usize = 1_000_000;
    const TRANSFERS: usize = 1_000_000;
    let method = Method::new(Asset::Eth, Network::Ethereum).unwrap();
    let addresses: Vec<String> = (0..INTENTS as u64).map(eth_address).collect();
    // Every transfer goes to an issued address: 90 % exact, 5 % short, 5 %
    // another asset. They arrive as database rows do.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let transfers: Vec<TransferRecord> = (0..TRANSFERS)
        .map(|i| {
            let r = next();
            let owner = (r % INTENTS as u64) as usize;
            let kind = (r >> 32) % 20;
            TransferRecord {
                id: i as i64 + 1,
                network: Network::Ethereum,
                asset: AssetId::Known(if kind == 0 { Asset::Usdc } else { Asset::Eth }),
                txid: format!("0x{i:064x}"),
                index: 0,
                block_hash: format!("0x{:064x}", 1000 + i % 100),
                block_height: 1000 + (i as u64 % 100),
                block_time_ms: T0,
                to: addresses[owner].clone(),
                from: None,
                amount: Amount(if kind == 1 {
                    500_000_000_000_000_000
                } else {
                    1_000_000_000_000_000_000
                }),
                success: true,
                first_seen_ms: T0,
                final_at_ms: Some(T0),
                matures_at: None,
                orphaned_at_ms: None,
                next_block_time_ms: 0,
            }
        })
        .collect();

    let start = Instant::now();
    let matcher = Matcher::new(addresses.iter().map(|a| (Network::Ethereum, a.as_str())));
    let build = start.elapsed();

    // The reconciler's in-memory path, timed whole: rows to plain data,
    // attribution, grouping, and the status machine for every intent.
    let start = Instant::now();
    let attributed = Attributed::rows(&matcher, &transfers, INTENTS);
    let attribution = start.elapsed();
    assert_eq!(attributed.len(), TRANSFERS, "every transfer attributed");

    let start = Instant::now();
    let mut by_status = [0usize; 6];
    for i in 0..INTENTS {
        let ts = attributed.of(i);
        let e = decide(&IntentFacts {
            id: i as i64,
            method,
            amount_due: Amount(1_000_000_000_000_000_000),
            usd_cents: 200_000,
            expires_at_ms: T0 + 1_800_000,
            confirm_by_ms: T0 + 5_400_000,
            status: Status::AwaitingPayment,
            settlement: None,
            closing: None,
            refunded: false,
            refund_mismatch: None,
            accepted_excess: None,
            reassigned_in: None,
            reference_settled_by: None,
            transfers: ts,
            claimed_away: &[],
            final_height: Some(1050),
            twin_final_height: None,
            now_ms: T0 + 60_000,
            tolerance: Tolerance::NONE,
        });
        by_status[Status::ALL
            .iter()
            .position(|s| *s == e.status)
            .expect("a status")] += 1;
    }
    let evaluated = start.elapsed();
    let total = attribution + evaluated;
    println!(
        "matcher: {INTENTS} open intents, {TRANSFERS} transfers, one core: index built in {:.0} ms; attribution {:.2} M transfers/s; \
         attribution + status evaluation {:.2} M transfers/s (aim >= 5) [statuses {:?}: {by_status:?}]",
        build.as_secs_f64() * 1e3,
        TRANSFERS as f64 / attribution.as_secs_f64() / 1e6,
        TRANSFERS as f64 / total.as_secs_f64() / 1e6,
        Status::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
    );
}

async fn ingest_and_reconcile(label: &str, url: &str, n: usize) {
    let store = Store::connect(url).await.expect("connect");
    store.migrate().await.unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let network = Network::Ethereum;
    let watch = Arc::new(WatchSet::new(network));
    let pool: Vec<String> = (0..n as u64).map(eth_address).collect();
    store.import_addresses(network, &pool, T0).await.unwrap();
    let rates: HashMap<Asset, Decimal> = [(Asset::Eth, Decimal::from_str("2500").unwrap())]
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

    let start = Instant::now();
    let mut created = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        let futures: Vec<_> = chunk
            .iter()
            .map(|i| {
                let intents = intents.clone();
                let req = NewIntent {
                    kind: "topup".into(),
                    reference: format!("topup-{i}"),
                    account: format!("acct-{}", i % 1000),
                    asset: "ETH".into(),
                    network: "ethereum".into(),
                    usd_amount: "100".into(),
                };
                tokio::spawn(async move { intents.create(&req).await })
            })
            .collect();
        for f in futures {
            created.push(f.await.unwrap().expect("intent"));
        }
    }
    let create_secs = start.elapsed().as_secs_f64();
    // New intents get their first verdict before any money arrives, as they
    // do in production; this is not part of the transfer figures.
    let reconciler = Reconciler::new(store.clone(), dyn_clock.clone(), HashMap::new(), 1000);
    reconciler.run_until_idle().await.unwrap();

    let chain = ScriptedChain::new(network, 1);
    chain.set_block_time(T0 / 1000);
    const PER_BLOCK: usize = 200;
    for block in created.chunks(PER_BLOCK) {
        for i in block {
            chain.pay(&i.address, AssetId::Known(Asset::Eth), i.amount_due.0);
        }
        chain.mine();
    }
    let blocks = chain.height();
    store.ensure_chain_state(network, T0).await.unwrap();
    let ingest = Ingest::new(store.clone(), dyn_clock.clone());
    let mut stream = CanonicalStream::new(chain.source(watch.clone()), Vec::new(), 1, 64);

    let start = Instant::now();
    loop {
        let events = stream.next_batch(20).await.unwrap();
        if events.is_empty() {
            break;
        }
        ingest.apply(network, &events).await.unwrap();
    }
    let ingest_secs = start.elapsed().as_secs_f64();
    store
        .record_chain_progress(network, blocks, blocks, T0)
        .await
        .unwrap();

    let start = Instant::now();
    let report = reconciler.run_until_idle().await.unwrap();
    let reconcile_secs = start.elapsed().as_secs_f64();
    assert_eq!(report.settled, n, "every top-up credited");
    let credits = store
        .count_raw("SELECT COUNT(*) FROM ledger_entries")
        .await
        .unwrap();
    assert_eq!(credits as usize, n);
    println!(
        "{label}: {n} intents created in {create_secs:.2} s ({:.0}/s); {n} transfers in {blocks} blocks ingested at {:.0}/s \
         (20 blocks a transaction), reconciled and credited at {:.0}/s; ingest + reconcile {:.0} transfers/s (aim >= 20000)",
        n as f64 / create_secs,
        n as f64 / ingest_secs,
        n as f64 / reconcile_secs,
        n as f64 / (ingest_secs + reconcile_secs),
    );
    store.close().await;
}

//! Live status streams at scale (issue 19): many checkout pages listening
//! at once. `--listeners` server-sent event streams over real HTTP on
//! loopback, spread over `--intents` intents on SQLite; every intent then
//! changes status once (it expires, written by the reconciler as in
//! production) and each listener times the event from its commit (the
//! outbox row's `created_at_ms`) to its arrival. Prints the time to open
//! every stream, delivery latency percentiles, and the process's memory per
//! open stream.
//!
//!   cargo run --example live_status_fanout [-- --listeners N] [--intents K]
//!
//! The client and the server share this one process and its two cores, so
//! the figures are an upper bound on what a page waits.

#![allow(clippy::float_arithmetic)] // figures for people, never money

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use paywatch::api::{self, ApiState, TokenTable};
use paywatch::app::Context;
use paywatch::intents::NewIntent;
use paywatch::settings::Settings;
use paywatch_core::Network;
use serde_json::Value;
use tokio::sync::mpsc;

const TOKEN: &str = "bench-storefront-token-0123456789abcdef";

struct Args {
    listeners: usize,
    intents: usize,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        listeners: 1000,
        intents: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--listeners" => a.listeners = it.next().context("--listeners N")?.parse()?,
            "--intents" => a.intents = it.next().context("--intents K")?.parse()?,
            other => bail!("unknown argument {other}: --listeners N, --intents K"),
        }
    }
    if a.intents == 0 || a.listeners < a.intents {
        bail!("--listeners must be at least --intents, and --intents above 0");
    }
    Ok(a)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The process's resident memory, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Reads one stream until its first `intent.status` event after the
/// snapshot; sends the latency from the event's commit, in ms.
async fn listen(response: reqwest::Response, done: mpsc::UnboundedSender<i64>) {
    let mut response = response;
    let mut buffer = String::new();
    loop {
        let Ok(Some(chunk)) = response.chunk().await else {
            return;
        };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            if !block.contains("event: intent.status") {
                continue;
            }
            let arrived = now_ms();
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .and_then(|d| serde_json::from_str::<Value>(d).ok());
            if let Some(at) = data.and_then(|d| d["created_at_ms"].as_i64()) {
                let _ = done.send(arrived - at);
            }
            return;
        }
    }
}

fn percentile(sorted: &[i64], p: usize) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() - 1) * p / 100]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let dir = tempfile::tempdir()?;
    let mut settings = Settings::load(None)?;
    settings.database.url = format!("sqlite://{}", dir.path().join("fanout.db").display());
    settings.devchain.enabled = true;
    settings.intents.expiry_secs = 5;
    settings.rates.fixed.insert("LTC".into(), "100".into());
    let ltc = settings
        .networks
        .get_mut("litecoin")
        .context("litecoin settings")?;
    ltc.enabled = true;
    ltc.source = "devchain".into();
    ltc.chain = "regtest".into();
    let api_settings = &mut settings.api;
    api_settings.max_connections_per_client = a.listeners + 64;
    // The storefront's streams have a quarter of the budget.
    api_settings.max_event_streams = 4 * (a.listeners + 16);
    api_settings.max_connections = api_settings.max_event_streams + 64;
    api_settings.event_stream_secs = 600;
    api_settings
        .tokens
        .insert("storefront".into(), vec![TokenTable::hash_token(TOKEN)]);
    let ctx = Context::build(settings).await?;
    let pool: Vec<String> = (0..a.intents)
        .map(|i| format!("rltc1qfanout{i:08}"))
        .collect();
    ctx.store
        .import_addresses(Network::Litecoin, &pool, now_ms())
        .await?;
    ctx.store
        .ensure_chain_state(Network::Litecoin, now_ms())
        .await?;
    let mut ids = Vec::new();
    for i in 0..a.intents {
        let intent = ctx
            .intents
            .create(&NewIntent {
                kind: "order".into(),
                reference: format!("fanout-{i}"),
                account: "bench".into(),
                asset: "LTC".into(),
                network: "litecoin".into(),
                usd_amount: "10".into(),
            })
            .await?;
        ids.push(intent.id);
    }
    let expires_at = now_ms() + 5_000;
    // Each new intent's first verdict, before anyone listens: the event
    // timed below is the expiry alone.
    ctx.reconciler.run_until_idle().await?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let state = ApiState::new(ctx.clone())?;
    tokio::spawn(api::serve(listener, state, std::future::pending::<()>()));

    let baseline = rss_kib();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let (done, mut arrived) = mpsc::unbounded_channel();
    let opening = Instant::now();
    for n in 0..a.listeners {
        let id = ids[n % ids.len()];
        let response = client
            .get(format!("{base}/v1/intents/{id}/events"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("stream {n} refused: {}", response.status());
        }
        tokio::spawn(listen(response, done.clone()));
    }
    drop(done);
    let opened_in = opening.elapsed();
    // Let every stream send its snapshot and settle before measuring.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with_streams = rss_kib();
    if now_ms() >= expires_at {
        bail!("opening took past the intents' expiry: use fewer listeners");
    }

    // The reconciler expires every intent once their time is up: one
    // `intent.status` event each, committed as production writes it.
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(expires_at - now_ms() + 50).unwrap_or(0),
    ))
    .await;
    let reconciled = Instant::now();
    ctx.reconciler.run_until_idle().await?;
    let reconcile_took = reconciled.elapsed();
    let mut latencies = Vec::with_capacity(a.listeners);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while latencies.len() < a.listeners {
        match tokio::time::timeout_at(deadline, arrived.recv()).await {
            Ok(Some(ms)) => latencies.push(ms),
            _ => break,
        }
    }
    latencies.sort_unstable();
    println!(
        "live status fan-out: {} streams over {} intents (SQLite, one process, 2 cores)",
        a.listeners, a.intents
    );
    println!(
        "  opened every stream in {:.2} s ({:.1} ms each, snapshot included)",
        opened_in.as_secs_f64(),
        opened_in.as_secs_f64() * 1000.0 / a.listeners as f64
    );
    println!(
        "  memory: {} KiB before, {} KiB with the streams open: {:.1} KiB per stream (client side included)",
        baseline,
        with_streams,
        with_streams.saturating_sub(baseline) as f64 / a.listeners as f64
    );
    println!(
        "  {} intents expired by one reconcile pass in {} ms",
        a.intents,
        reconcile_took.as_millis()
    );
    println!(
        "  delivered {}/{}; commit to arrival: p50 {} ms, p90 {} ms, p99 {} ms, max {} ms",
        latencies.len(),
        a.listeners,
        percentile(&latencies, 50),
        percentile(&latencies, 90),
        percentile(&latencies, 99),
        latencies.last().copied().unwrap_or(0)
    );
    if latencies.len() < a.listeners {
        bail!(
            "{} listeners never got their event",
            a.listeners - latencies.len()
        );
    }
    Ok(())
}

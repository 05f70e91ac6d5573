//! Catch-up over an anvil chain, for benches/eth-catchup.sh, which runs it
//! beside the stdlib floor and ethereum-etl on the same chain.
//!
//!   eth_catchup collect --rpc URL --start A --end B --tokens A,B --out FILE
//!       (untimed) every address paid in A..=B: the `to` of every Transfer
//!       log of the two tokens and of every transaction carrying ETH; also
//!       FILE.counts, "address payments" per line, to check a slice by
//!       (plain reqwest + serde_json: independent of the crate under test)
//!   eth_catchup source --rpc URL --start A --end B --tokens A,B --watch FILE
//!       the node source and canonical stream alone: fetch, decode, filter
//!   eth_catchup daemon --rpc URL --start A --end B --tokens A,B --watch FILE --db URL
//!       the watcher as `paywatch run` runs it, writing to the database
//!
//! source and daemon also take --blocks-per-request N (100) and
//! --batches-in-flight N (2), the `[networks.ethereum.rpc]` settings.
//! Prints one JSON line: transfers found, blocks, seconds of catch-up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use paywatch::clock::SystemClock;
use paywatch::ingest::Ingest;
use paywatch::store::Store;
use paywatch::watcher::{self, WatcherConfig, WatcherDeps};
use paywatch_core::{Asset, AssetId, BlockSource, CanonicalStream, ChainEvent, Network, WatchSet};
use paywatch_evm::{parse_address, watch_key, EvmConfig, EvmSource, Finality, Tokens};
use serde_json::{json, Value};

const TRANSFER_TOPIC: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

struct Args {
    mode: String,
    rpc: String,
    start: u64,
    end: u64,
    tokens: Vec<String>,
    file: String,
    db: String,
    blocks_per_request: usize,
    batches_in_flight: usize,
}

fn args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let mode = it.next().context("mode: collect, source or daemon")?;
    let mut a = Args {
        mode,
        rpc: String::new(),
        start: 0,
        end: 0,
        tokens: Vec::new(),
        file: String::new(),
        db: String::new(),
        blocks_per_request: 100,
        batches_in_flight: 2,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rpc" => a.rpc = value,
            "--start" => a.start = value.parse()?,
            "--end" => a.end = value.parse()?,
            "--tokens" => a.tokens = value.split(',').map(|t| t.trim().to_lowercase()).collect(),
            "--out" | "--watch" => a.file = value,
            "--db" => a.db = value,
            "--blocks-per-request" => a.blocks_per_request = value.parse()?,
            "--batches-in-flight" => a.batches_in_flight = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if a.tokens.len() != 2 {
        bail!("--tokens needs two contracts, A,B");
    }
    if a.end < a.start {
        bail!("--end {} is below --start {}", a.end, a.start);
    }
    Ok(a)
}

/// Token A as USDT, token B as USDC: the daemon's two configured contracts.
fn tokens(a: &Args) -> anyhow::Result<Tokens> {
    Ok(Tokens::new([
        (Asset::Usdt, parse_address(&a.tokens[0])?),
        (Asset::Usdc, parse_address(&a.tokens[1])?),
    ]))
}

fn source(a: &Args, watch: Arc<WatchSet>) -> anyhow::Result<EvmSource> {
    let cfg = EvmConfig {
        url: a.rpc.clone(),
        ws_url: None,
        chain_id: Some(31337),
        // One confirmation: the tip itself is final, so the whole range is.
        // (anvil has no `finalized` tag worth waiting for.)
        finality: Finality::Confirmations(1),
        tokens: tokens(a)?,
        // Off: anvil runs with --prune-history (as the peer benchmark starts
        // it), which keeps no historical state, so it cannot trace old
        // blocks (debug_traceBlockByHash fails). Every ETH payment on this
        // chain is a plain transaction value, which needs no trace.
        traces: false,
        blocks_per_request: a.blocks_per_request,
        batches_in_flight: a.batches_in_flight,
        request_timeout: Duration::from_secs(60),
        // A local node: no provider budget to keep under.
        requests_per_second: 0,
        ..EvmConfig::default()
    };
    Ok(EvmSource::new(cfg, watch)?)
}

fn watch_set(file: &str) -> anyhow::Result<Arc<WatchSet>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("read {file}"))?;
    let set = WatchSet::new(Network::Ethereum).keyed(watch_key());
    set.extend(text.lines().filter(|l| !l.is_empty()));
    Ok(Arc::new(set))
}

/// A plain JSON-RPC client for the untimed collection (reqwest + serde_json,
/// independent of the crate under test).
struct Plain {
    http: reqwest::Client,
    url: String,
}

impl Plain {
    async fn post(&self, body: Value) -> anyhow::Result<Value> {
        let r = self.http.post(&self.url).json(&body).send().await?;
        Ok(r.error_for_status()?.json().await?)
    }

    async fn call(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let mut r = self
            .post(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .await?;
        if let Some(e) = r.get("error") {
            bail!("{method}: {e}");
        }
        Ok(r["result"].take())
    }

    async fn batch(&self, method: &str, params: Vec<Value>) -> anyhow::Result<Vec<Value>> {
        let body: Vec<Value> = params
            .into_iter()
            .enumerate()
            .map(|(i, p)| json!({"jsonrpc": "2.0", "id": i, "method": method, "params": p}))
            .collect();
        let Value::Array(mut answers) = self.post(Value::Array(body)).await? else {
            bail!("batch {method}: not an array");
        };
        answers.sort_by_key(|r| r["id"].as_u64());
        answers
            .into_iter()
            .map(|mut r| match r.get("error") {
                Some(e) => bail!("{method}: {e}"),
                None => Ok(r["result"].take()),
            })
            .collect()
    }
}

fn hex(n: u64) -> String {
    format!("{n:#x}")
}

fn nonzero(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        !s.trim_start_matches("0x")
            .trim_start_matches('0')
            .is_empty()
    })
}

async fn collect(a: &Args) -> anyhow::Result<()> {
    let rpc = Plain {
        http: reqwest::Client::new(),
        url: a.rpc.clone(),
    };
    let mut addresses: BTreeMap<String, u64> = BTreeMap::new();
    let (mut token_transfers, mut eth_transfers) = (0u64, 0u64);
    let mut lo = a.start;
    while lo <= a.end {
        let hi = a.end.min(lo + 999);
        let filter = json!([{"fromBlock": hex(lo), "toBlock": hex(hi),
                             "address": a.tokens, "topics": [TRANSFER_TOPIC]}]);
        let logs = rpc.call("eth_getLogs", filter).await?;
        for log in logs.as_array().context("eth_getLogs: not an array")? {
            let topics = log["topics"].as_array().context("log topics")?;
            // What paywatch counts as a payment: three topics, a nonzero value.
            if topics.len() != 3 || !nonzero(&log["data"]) {
                continue;
            }
            let to = topics[2].as_str().context("topic")?;
            *addresses
                .entry(format!("0x{}", &to[to.len() - 40..]).to_lowercase())
                .or_default() += 1;
            token_transfers += 1;
        }
        lo = hi + 1;
    }
    let mut lo = a.start;
    while lo <= a.end {
        let hi = a.end.min(lo + 99);
        let blocks = rpc
            .batch(
                "eth_getBlockByNumber",
                (lo..=hi).map(|n| json!([hex(n), true])).collect(),
            )
            .await?;
        for b in &blocks {
            for tx in b["transactions"].as_array().context("block transactions")? {
                if let (Some(to), true) = (tx["to"].as_str(), nonzero(&tx["value"])) {
                    *addresses.entry(to.to_lowercase()).or_default() += 1;
                    eth_transfers += 1;
                }
            }
        }
        lo = hi + 1;
    }
    let text: String = addresses.keys().map(|a| format!("{a}\n")).collect();
    std::fs::write(&a.file, text)?;
    let counts: String = addresses
        .iter()
        .map(|(a, n)| format!("{a} {n}\n"))
        .collect();
    std::fs::write(format!("{}.counts", a.file), counts)?;
    println!(
        "{}",
        json!({"addresses": addresses.len(), "token_transfers": token_transfers,
               "eth_transfers": eth_transfers, "payments": token_transfers + eth_transfers})
    );
    Ok(())
}

async fn run_source(a: &Args) -> anyhow::Result<()> {
    let watch = watch_set(&a.file)?;
    let source = source(a, watch)?;
    let t0 = Instant::now();
    let mut stream = CanonicalStream::new(source, Vec::new(), a.start, 100);
    let (mut transfers, mut eth, mut blocks) = (0usize, 0usize, 0usize);
    while stream.cursor_tip().is_none_or(|c| c.height < a.end) {
        let events = stream.next_batch(100).await?;
        if events.is_empty() {
            bail!("the node's chain ends below {}", a.end);
        }
        for e in events {
            if let ChainEvent::Connected {
                block,
                transfers: t,
                ..
            } = e
            {
                if block.height > a.end {
                    continue;
                }
                eth += t
                    .iter()
                    .filter(|t| t.asset == AssetId::Known(Asset::Eth))
                    .count();
                transfers += t.len();
                blocks += 1;
            }
        }
    }
    let secs = t0.elapsed();
    println!(
        "{}",
        json!({"transfers": transfers, "eth_transfers": eth, "token_transfers": transfers - eth,
               "blocks": blocks, "seconds": secs.as_secs_f64()})
    );
    Ok(())
}

async fn run_daemon(a: &Args) -> anyhow::Result<()> {
    let watch = watch_set(&a.file)?;
    let store = Store::connect(&a.db).await?;
    store.migrate().await?;
    let clock = Arc::new(SystemClock);
    let source = source(a, watch.clone())?;
    // The node's tip may be above the range: stop at its end.
    let tip = source.tip().await?.height;
    if tip < a.end {
        bail!("the node is at {tip}, below {}", a.end);
    }
    // config/default.toml's Ethereum settings, except one database
    // transaction per 100 events (as the Litecoin benchmark writes).
    let cfg = WatcherConfig {
        network: Network::Ethereum,
        start_height: Some(a.start),
        max_reorg_depth: 128,
        poll_interval: Duration::from_millis(20),
        events_per_transaction: 100,
        blocks_per_poll: 100,
        dormancy: None,
        backstop_after_end: Duration::from_secs(86_400),
    };
    let deps = WatcherDeps {
        store: store.clone(),
        ingest: Ingest::new(store.clone(), clock.clone()),
        watch,
        clock,
        progress: Arc::new(tokio::sync::Notify::new()),
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let t0 = Instant::now();
    let task = tokio::spawn(watcher::run(cfg, source, deps, stop_rx));
    loop {
        let at = store
            .chain_status(Network::Ethereum)
            .await?
            .and_then(|s| s.cursor_height);
        if at >= Some(a.end) {
            break;
        }
        if task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed();
    let _ = stop_tx.send(true);
    task.await??;
    let transfers = store
        .count_raw(&format!(
            "SELECT COUNT(*) FROM transfers WHERE network = 'ethereum' AND block_height BETWEEN {} AND {}",
            a.start, a.end
        ))
        .await?;
    println!(
        "{}",
        json!({"transfers": transfers, "blocks": a.end - a.start + 1, "seconds": secs.as_secs_f64(),
               "database": store.dialect().as_str()})
    );
    store.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    match a.mode.as_str() {
        "collect" => collect(&a).await,
        "source" => run_source(&a).await,
        "daemon" => run_daemon(&a).await,
        other => bail!("unknown mode {other}"),
    }
}

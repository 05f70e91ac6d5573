//! The JSON-RPC calls and response bytes a Solana watcher costs its node per
//! minute of mainnet (a slot every 400 ms, a poll every second), measured on
//! the testkit Solana node, beside a public endpoint's budget: 100 calls per
//! 10 s, 40 of them for any one method, and 100 MB per 30 s
//! (api.mainnet-beta's documented limits per IP), i.e. 600 calls a minute,
//! 240 a minute per method and 200 MB a minute.
//!
//!   cargo run --example solana_budget [-- --txs N] [--minutes M]
//!
//! Blocks hold N SOL transfers each (default 100; a mainnet block holds
//! about 1,300 transactions, most of them votes). Three runs over the same
//! node, each its own figures:
//! - `paywatch following`: `SolanaSource` and the canonical stream, one
//!   watcher step (a batch towards the tip, then the final-height check)
//!   per simulated second, 2 or 3 new blocks before each (150 a minute);
//! - `paywatch idle`: the same steps with no new block;
//! - `paywatch catching up`: a second watcher started as many blocks
//!   behind as the run produced, stepping until it reaches the tip: calls
//!   and bytes per block, and the blocks an hour its default pace (10
//!   requests a second, `rpc.requests_per_second`) allows, against the
//!   9,000 mainnet makes;
//! - `calls before case 8`: the calls issue 17 case 8 found each step made,
//!   asked by hand over the same new blocks: `getSlot` and a header
//!   `getBlock` for the tip, `getBlocksWithLimit` and a `getBlock` with
//!   `transactionDetails: "full"` for each new block, then `getSlot`
//!   (finalized), `getBlocksWithLimit` and a header `getBlock` for the final
//!   height; JSON encoding, no gzip.
//!
//! Bytes are response bodies as sent (gzip-compressed above 256 bytes to a
//! client that accepts it, as a provider's front end does).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use paywatch_core::{CanonicalStream, Network, WatchSet};
use paywatch_solana::{watch_key, SolanaConfig, SolanaSource};
use paywatch_testkit::{SolanaNode, SolanaNodeOptions};
use serde_json::{json, Value};
use solana_address::Address;

/// Public endpoint budget: calls per method per minute, bytes per minute.
const CALLS_PER_MINUTE: u64 = 100 * 6;
const CALLS_PER_METHOD_PER_MINUTE: u64 = 40 * 6;
const BYTES_PER_MINUTE: u64 = 100_000_000 * 2;
/// paywatch's default `rpc.requests_per_second` for Solana.
const DEFAULT_REQUESTS_PER_SECOND: u64 = 10;
/// Mainnet: a slot every 400 ms; paywatch polls every second by default.
const SLOTS_PER_MINUTE: u64 = 150;
const STEPS_PER_MINUTE: u64 = 60;

struct Args {
    txs: usize,
    minutes: u64,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        txs: 100,
        minutes: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--txs" => a.txs = value.parse().context("--txs")?,
            "--minutes" => a.minutes = value.parse().context("--minutes")?,
            f => bail!("unknown flag {f}; expected --txs N or --minutes M"),
        }
    }
    Ok(a)
}

/// Calls by method and response bytes, from the node's own counters.
#[derive(Clone)]
struct Spent {
    calls: BTreeMap<String, u64>,
    bytes: u64,
}

impl Spent {
    fn now(node: &SolanaNode) -> Spent {
        Spent {
            calls: node.calls(),
            bytes: node.bytes_sent(),
        }
    }

    fn since(&self, node: &SolanaNode) -> Spent {
        let now = Spent::now(node);
        Spent {
            calls: now
                .calls
                .iter()
                .map(|(m, n)| (m.clone(), n - self.calls.get(m).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            bytes: now.bytes - self.bytes,
        }
    }

    fn print(&self, what: &str, minutes: u64, blocks: u64) {
        let per_min = |n: u64| n / minutes.max(1);
        let total: u64 = self.calls.values().sum();
        let busiest = self.calls.values().copied().max().unwrap_or(0);
        println!(
            "{what:<22} {:>5} calls/min of {CALLS_PER_MINUTE} (per new block: {}), {:>8} MB/min \
             ({}% of {} MB/min); busiest method {}/min of {CALLS_PER_METHOD_PER_MINUTE}",
            per_min(total),
            if blocks == 0 {
                "no new blocks, 0".to_owned()
            } else {
                decimal(total, blocks, 1)
            },
            decimal(per_min(self.bytes), 1_000_000, 3),
            decimal(per_min(self.bytes) * 100, BYTES_PER_MINUTE, 2),
            BYTES_PER_MINUTE / 1_000_000,
            per_min(busiest),
        );
        for (m, n) in &self.calls {
            println!("{:<24} {m:<20} {:>6}/min", "", per_min(*n));
        }
    }
}

/// `n / d` with `places` decimals, rounded down; integers only, as
/// everywhere in paywatch.
fn decimal(n: u64, d: u64, places: u32) -> String {
    let scale = 10u64.pow(places);
    let scaled = n * scale / d.max(1);
    let int = scaled / scale;
    let frac = scaled % scale;
    format!("{int}.{frac:0width$}", width = places as usize)
}

/// Fills the next block with `txs` transfers from the dev accounts to
/// fresh addresses, and seals it.
fn produce(node: &mut SolanaNode, txs: usize, serial: &mut u64) -> anyhow::Result<()> {
    for i in 0..txs {
        *serial += 1;
        let mut to = [7u8; 32];
        to[..8].copy_from_slice(&serial.to_le_bytes());
        let from = SolanaNode::dev(u8::try_from(i % 10)?);
        node.send_sol(&from, &Address::new_from_array(to), 1_000_000 + *serial)?;
    }
    node.produce_block();
    Ok(())
}

/// New blocks before step `i`: 2 and 3 in turn, 150 a minute at 60 steps.
fn blocks_before(step: u64) -> u64 {
    SLOTS_PER_MINUTE * (step + 1) / STEPS_PER_MINUTE - SLOTS_PER_MINUTE * step / STEPS_PER_MINUTE
}

async fn watcher_step(stream: &mut CanonicalStream<SolanaSource>) -> anyhow::Result<usize> {
    let events = stream.next_batch(1_000).await?;
    stream.confirmed_final_height().await?;
    Ok(events.len())
}

/// The calls case 8 found, by hand; `next` is the first slot not yet read.
async fn step_before_case_8(
    http: &reqwest::Client,
    url: &str,
    next: &mut u64,
) -> anyhow::Result<()> {
    let call = |method: &'static str, params: Value| async move {
        let v: Value = http
            .post(url)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await?
            .json()
            .await?;
        anyhow::Ok(v["result"].clone())
    };
    let header = |slot: u64, commitment: &'static str| {
        json!([slot, {"encoding": "json", "transactionDetails": "none", "rewards": false,
            "maxSupportedTransactionVersion": 0, "commitment": commitment}])
    };
    let tip = call("getSlot", json!([{"commitment": "confirmed"}]))
        .await?
        .as_u64()
        .context("getSlot")?;
    call("getBlock", header(tip, "confirmed")).await?;
    while *next <= tip {
        let listed = call(
            "getBlocksWithLimit",
            json!([*next, 8, {"commitment": "confirmed"}]),
        )
        .await?;
        let listed: Vec<u64> = serde_json::from_value(listed)?;
        for slot in &listed {
            call(
                "getBlock",
                json!([slot, {"encoding": "json", "transactionDetails": "full",
                    "maxSupportedTransactionVersion": 0, "commitment": "confirmed"}]),
            )
            .await?;
        }
        *next = listed.last().map_or(tip, |s| *s) + 1;
    }
    let fin = call("getSlot", json!([{"commitment": "finalized"}]))
        .await?
        .as_u64()
        .context("getSlot")?;
    call(
        "getBlocksWithLimit",
        json!([fin, 1, {"commitment": "confirmed"}]),
    )
    .await?;
    call("getBlock", header(fin, "confirmed")).await?;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let mut node = SolanaNode::start(SolanaNodeOptions {
        // Mainnet finalizes about 32 slots behind confirmed.
        finalized_lag: 32,
        ..SolanaNodeOptions::default()
    })
    .await?;
    let mut serial = 0;
    for _ in 0..40 {
        produce(&mut node, 0, &mut serial)?;
    }
    let watch = Arc::new(WatchSet::new(Network::Solana).keyed(watch_key()));
    watch.insert(&paywatch_solana::encode_address(&[9u8; 32]));
    let source = SolanaSource::new(
        SolanaConfig {
            url: node.url(),
            max_requests_per_second: 0,
            ..SolanaConfig::default()
        },
        watch,
    )?;
    let start = node.slots().1;
    let mut stream = CanonicalStream::new(source, Vec::new(), start, 64);
    watcher_step(&mut stream).await?;
    watcher_step(&mut stream).await?;

    let steps = STEPS_PER_MINUTE * a.minutes;
    let blocks = SLOTS_PER_MINUTE * a.minutes;
    println!(
        "{} new blocks of {} transfers each, {steps} watcher steps ({} min of mainnet)",
        blocks, a.txs, a.minutes
    );

    let before = Spent::now(&node);
    let mut connected = 0;
    for step in 0..steps {
        for _ in 0..blocks_before(step) {
            produce(&mut node, a.txs, &mut serial)?;
        }
        connected += watcher_step(&mut stream).await?;
    }
    if connected as u64 != blocks {
        bail!("the watcher connected {connected} blocks of {blocks}");
    }
    before
        .since(&node)
        .print("paywatch following", a.minutes, blocks);

    let before = Spent::now(&node);
    for _ in 0..steps {
        watcher_step(&mut stream).await?;
    }
    before.since(&node).print("paywatch idle", a.minutes, 0);

    // As far behind as the run produced, with the daemon's settings.
    let tip = node.slots().1;
    let behind = SolanaSource::new(
        SolanaConfig {
            url: node.url(),
            max_requests_per_second: 0,
            ..SolanaConfig::default()
        },
        Arc::new(WatchSet::new(Network::Solana).keyed(watch_key())),
    )?;
    let mut catching_up = CanonicalStream::new(behind, Vec::new(), tip + 1 - blocks, 64);
    let before = Spent::now(&node);
    while catching_up.cursor_tip().is_none_or(|c| c.height < tip) {
        watcher_step(&mut catching_up).await?;
    }
    let spent = before.since(&node);
    let calls: u64 = spent.calls.values().sum();
    println!(
        "paywatch catching up   {calls} calls for {blocks} blocks ({} per block), {} MB \
         ({} MB per block); at {DEFAULT_REQUESTS_PER_SECOND} requests/s: {} blocks an hour \
         (mainnet makes {})",
        decimal(calls, blocks, 2),
        decimal(spent.bytes, 1_000_000, 3),
        decimal(spent.bytes, blocks * 1_000_000, 3),
        DEFAULT_REQUESTS_PER_SECOND * 3_600 * blocks / calls.max(1),
        SLOTS_PER_MINUTE * 60,
    );
    for (m, n) in &spent.calls {
        println!("{:<24} {m:<20} {n:>6}", "");
    }

    let http = reqwest::Client::builder().no_gzip().build()?;
    let mut next = node.slots().1 + 1;
    let before = Spent::now(&node);
    for step in 0..steps {
        for _ in 0..blocks_before(step) {
            produce(&mut node, a.txs, &mut serial)?;
        }
        step_before_case_8(&http, &node.url(), &mut next).await?;
    }
    before
        .since(&node)
        .print("calls before case 8", a.minutes, blocks);
    Ok(())
}

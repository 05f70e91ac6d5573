//! Catch-up over the testkit Tron node, for benches/tron-catchup.sh. The
//! node runs in its own process (`serve`), so its CPU is measured apart from
//! the client's; every other mode is a client of it.
//!
//!   tron_catchup serve --blocks N --txs K --port-file F [--genesis G]
//!       genesis block G (70,000,000), USDT at its mainnet address, then
//!       `fill_blocks(N, K)` with the whole chain solidified; writes
//!       "WALLET_URL SOLIDITY_URL FIRST LAST TXS" to F and serves until killed
//!   tron_catchup floor --url U --start A --end B [--ranges-in-flight R] [--infos-in-flight I]
//!       the bare gRPC fetch: GetBlockByLimitNext2 per 100 blocks plus
//!       GetTransactionInfoByBlockNum per block, decoded into the prost
//!       messages, over one connection; R ranges (each: blocks, then their
//!       infos, I at a time) in flight. R = I = 1 is sequential; R = 2,
//!       I = 8 is the concurrency TronSource uses by default.
//!   tron_catchup collect --url U --start A --end B --out FILE
//!       (untimed) every address paid in A..=B, as paywatch counts payments:
//!       the to_address of every TransferContract moving a nonzero amount,
//!       and the recipient of every nonzero Transfer(address,address,uint256)
//!       log of a successful transaction; also FILE.counts, "address
//!       payments" per line. (The protos and the testkit's base58check only:
//!       independent of the crate under test.)
//!   tron_catchup source --url U --solidity-url S --start A --end B --watch FILE
//!       TronSource and the canonical stream alone: fetch, decode, filter
//!   tron_catchup daemon --url U --solidity-url S --start A --end B --watch FILE --db URL
//!       the watcher as `paywatch run` runs it, writing to the database
//!
//! source and daemon also take --blocks-per-request N (100),
//! --batches-in-flight N (2) and --infos-in-flight N (8), the TronConfig
//! settings. Every client mode prints one JSON line: what it found, blocks,
//! seconds of catch-up and the process CPU seconds they took (`cpu_s`,
//! from /proc/self/stat; the set-up before, such as loading the watch set,
//! is in neither).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use paywatch::clock::SystemClock;
use paywatch::ingest::Ingest;
use paywatch::store::Store;
use paywatch::watcher::{self, WatcherConfig, WatcherDeps};
use paywatch_core::{Asset, AssetId, BlockSource, CanonicalStream, ChainEvent, Network, WatchSet};
use paywatch_testkit::tron::{tron_address, TronNode, TronNodeOptions, TRANSFER_TOPIC};
use paywatch_tron::proto::transaction::contract::ContractType;
use paywatch_tron::proto::transaction_info::Code;
use paywatch_tron::proto::wallet_client::WalletClient;
use paywatch_tron::proto::{BlockExtention, BlockLimit, NumberMessage, TransactionInfo};
use paywatch_tron::{watch_key, Tokens, TronConfig, TronSource};
use serde_json::json;
use tokio::task::{JoinHandle, JoinSet};

/// Mainnet USDT; `Tokens::mainnet()` accepts it as USDT.
const USDT: &str = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t";
/// GetBlockByLimitNext2 answers at most this many blocks.
const RANGE: u64 = 100;
/// As TronSource allows: a range of 100 full blocks is ~9 MB.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// ResourceReceipt.result SUCCESS (Transaction.Result.contractResult).
const CONTRACT_SUCCESS: i32 = 1;

struct Args {
    mode: String,
    url: String,
    solidity_url: String,
    start: u64,
    end: u64,
    file: String,
    db: String,
    blocks: u64,
    txs: usize,
    genesis: u64,
    blocks_per_request: usize,
    batches_in_flight: usize,
    infos_in_flight: usize,
    ranges_in_flight: usize,
}

fn args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let mode = it
        .next()
        .context("mode: serve, floor, collect, source or daemon")?;
    let defaults = TronConfig::default();
    let mut a = Args {
        mode,
        url: String::new(),
        solidity_url: String::new(),
        start: 0,
        end: 0,
        file: String::new(),
        db: String::new(),
        blocks: 10_000,
        txs: 300,
        genesis: 70_000_000,
        blocks_per_request: defaults.blocks_per_request,
        batches_in_flight: defaults.batches_in_flight,
        infos_in_flight: defaults.infos_in_flight,
        ranges_in_flight: defaults.batches_in_flight,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => a.url = value,
            "--solidity-url" => a.solidity_url = value,
            "--start" => a.start = value.parse()?,
            "--end" => a.end = value.parse()?,
            "--out" | "--watch" | "--port-file" => a.file = value,
            "--db" => a.db = value,
            "--blocks" => a.blocks = value.parse()?,
            "--txs" => a.txs = value.parse()?,
            "--genesis" => a.genesis = value.parse()?,
            "--blocks-per-request" => a.blocks_per_request = value.parse()?,
            "--batches-in-flight" => a.batches_in_flight = value.parse()?,
            "--infos-in-flight" => a.infos_in_flight = value.parse()?,
            "--ranges-in-flight" => a.ranges_in_flight = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if a.mode != "serve" && a.end < a.start {
        bail!("--end {} is below --start {}", a.end, a.start);
    }
    Ok(a)
}

/// This process's user + system CPU time so far (every thread), from
/// /proc/self/stat; 100 ticks a second, as on every Linux of this kind.
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3, utime 14, stime 15.
    let ticks = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(14) + ticks(15)) * 10)
}

/// CPU seconds since `since` (a [`cpu_time`]).
fn cpu_since(since: Duration) -> f64 {
    cpu_time().saturating_sub(since).as_secs_f64()
}

// --- serve ------------------------------------------------------------------

async fn serve(a: &Args) -> anyhow::Result<()> {
    if a.file.is_empty() {
        bail!("serve needs --port-file");
    }
    let node = TronNode::start(TronNodeOptions {
        // Everything solidified: the whole range is final at once.
        solidity_lag: 0,
        genesis_number: a.genesis,
        // 2025-01-01T00:00:00Z: the same block ids in every run.
        genesis_timestamp_ms: Some(1_735_689_600_000),
        // A local node: no TLS, no key, no budget.
        ..TronNodeOptions::default()
    })
    .await?;
    node.deploy_trc20_at("USDT", USDT)?;
    let t0 = Instant::now();
    // Synchronous, on the main thread; the servers run on the runtime's workers.
    let tip = node.fill_blocks(a.blocks, a.txs)?;
    let built = t0.elapsed();
    let first = a.genesis + 1;
    let txs = a.blocks * a.txs as u64;
    let tmp = format!("{}.tmp", a.file);
    std::fs::write(
        &tmp,
        format!(
            "{} {} {first} {tip} {txs}\n",
            node.url(),
            node.solidity_url()
        ),
    )?;
    std::fs::rename(&tmp, &a.file)?;
    eprintln!(
        "tron node: blocks {first}..={tip}, {txs} transactions, built in {:.1} s; wallet {}, solidity {}",
        built.as_secs_f64(),
        node.url(),
        node.solidity_url()
    );
    // Until SIGTERM or SIGKILL (no handler: the default action ends it).
    std::future::pending::<()>().await;
    Ok(())
}

// --- floor and collect: the bare fetch --------------------------------------

/// One block as the node gave it, with its infos.
struct Answer {
    block: BlockExtention,
    infos: Vec<TransactionInfo>,
}

/// Blocks `start..=end` and their infos over one connection, handed to
/// `each` in order: `ranges_in_flight` ranges of [`RANGE`] blocks at a
/// time, each one GetBlockByLimitNext2 and then its blocks'
/// GetTransactionInfoByBlockNum, `infos_in_flight` at a time.
async fn fetch_all(
    url: &str,
    start: u64,
    end: u64,
    ranges_in_flight: usize,
    infos_in_flight: usize,
    mut each: impl FnMut(u64, Answer) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    // One channel (one HTTP/2 connection); its clones share it. The client
    // type is tonic's and not named here (no direct tonic dependency):
    // closures and async blocks carry it.
    let client = WalletClient::connect(url.to_owned())
        .await
        .with_context(|| format!("connect {url}"))?
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    let infos_limit = infos_in_flight.max(1);
    let fetch = move |from: u64, count: u64| {
        let client = client.clone();
        async move {
            let blocks = client
                .clone()
                .get_block_by_limit_next2(BlockLimit {
                    start_num: i64::try_from(from)?,
                    end_num: i64::try_from(from + count)?,
                })
                .await
                .context("GetBlockByLimitNext2")?
                .into_inner()
                .block;
            if blocks.len() as u64 != count {
                bail!("asked for {count} blocks from {from}, got {}", blocks.len());
            }
            for (want, b) in (from..).zip(&blocks) {
                let got = b
                    .block_header
                    .as_ref()
                    .and_then(|h| h.raw_data.as_ref())
                    .map(|r| r.number);
                if got != Some(want as i64) {
                    bail!("asked for block {want}, got {got:?}");
                }
            }
            let mut infos: Vec<Option<Vec<TransactionInfo>>> =
                (0..blocks.len()).map(|_| None).collect();
            let mut calls = JoinSet::new();
            let mut next = 0u64;
            while next < count || !calls.is_empty() {
                while next < count && calls.len() < infos_limit {
                    let mut c = client.clone();
                    let height = from + next;
                    calls.spawn(async move {
                        c.get_transaction_info_by_block_num(NumberMessage { num: height as i64 })
                            .await
                            .map(|r| (height, r.into_inner().transaction_info))
                    });
                    next += 1;
                }
                if let Some(done) = calls.join_next().await {
                    let (height, list) = done?.context("GetTransactionInfoByBlockNum")?;
                    infos[(height - from) as usize] = Some(list);
                }
            }
            Ok(blocks
                .into_iter()
                .zip(infos)
                .map(|(block, infos)| Answer {
                    block,
                    infos: infos.unwrap_or_default(),
                })
                .collect::<Vec<_>>())
        }
    };
    let mut pending: VecDeque<(u64, JoinHandle<anyhow::Result<Vec<Answer>>>)> = VecDeque::new();
    let mut next = start;
    loop {
        while pending.len() < ranges_in_flight.max(1) && next <= end {
            let count = RANGE.min(end - next + 1);
            pending.push_back((next, tokio::spawn(fetch(next, count))));
            next += count;
        }
        let Some((from, handle)) = pending.pop_front() else {
            break;
        };
        for (i, answer) in handle.await??.into_iter().enumerate() {
            each(from + i as u64, answer)?;
        }
    }
    Ok(())
}

async fn floor(a: &Args) -> anyhow::Result<()> {
    let (t0, cpu0) = (Instant::now(), cpu_time());
    let (mut txs, mut infos, mut blocks) = (0usize, 0usize, 0u64);
    fetch_all(
        &a.url,
        a.start,
        a.end,
        a.ranges_in_flight,
        a.infos_in_flight,
        |height, answer| {
            if answer.infos.len() != answer.block.transactions.len() {
                bail!(
                    "block {height}: {} transactions, {} infos",
                    answer.block.transactions.len(),
                    answer.infos.len()
                );
            }
            txs += answer.block.transactions.len();
            infos += answer.infos.len();
            blocks += 1;
            Ok(())
        },
    )
    .await?;
    let secs = t0.elapsed();
    println!(
        "{}",
        json!({"txs": txs, "infos": infos, "blocks": blocks, "seconds": secs.as_secs_f64(),
               "cpu_s": cpu_since(cpu0), "ranges_in_flight": a.ranges_in_flight,
               "infos_in_flight": a.infos_in_flight})
    );
    Ok(())
}

fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A TransferContract's to_address and amount, read from its protobuf
/// bytes by hand (fields 2 and 3), without the crate under test.
fn transfer_contract(mut b: &[u8]) -> Option<(Vec<u8>, i64)> {
    let (mut to, mut amount) = (None, 0i64);
    while !b.is_empty() {
        let key = varint(&mut b)?;
        match (key >> 3, key & 7) {
            (field, 2) => {
                let len = usize::try_from(varint(&mut b)?).ok()?;
                let value = b.get(..len)?;
                b = &b[len..];
                if field == 2 {
                    to = Some(value.to_vec());
                }
            }
            (field, 0) => {
                let v = varint(&mut b)?;
                if field == 3 {
                    amount = v as i64;
                }
            }
            (_, 1) => b = b.get(8..)?,
            (_, 5) => b = b.get(4..)?,
            _ => return None,
        }
    }
    Some((to?, amount))
}

async fn collect(a: &Args) -> anyhow::Result<()> {
    let mut addresses: BTreeMap<String, u64> = BTreeMap::new();
    let (mut trx, mut trx_failed, mut tokens, mut txs) = (0u64, 0u64, 0u64, 0u64);
    let transfer_type = ContractType::TransferContract as i32;
    fetch_all(&a.url, a.start, a.end, 2, 8, |height, answer| {
        for tx in &answer.block.transactions {
            txs += 1;
            let Some(t) = &tx.transaction else { continue };
            let ok = t
                .ret
                .first()
                .is_some_and(|r| r.contract_ret == CONTRACT_SUCCESS);
            for c in t.raw_data.iter().flat_map(|r| &r.contract) {
                if c.r#type != transfer_type {
                    continue;
                }
                let p = c
                    .parameter
                    .as_ref()
                    .context("a contract without parameter")?;
                let (to, amount) = transfer_contract(&p.value).with_context(|| {
                    format!("block {height}: a TransferContract that does not decode")
                })?;
                let Ok(body) = <[u8; 21]>::try_from(to.as_slice()) else {
                    continue;
                };
                if amount > 0 {
                    *addresses.entry(tron_address(&body)).or_default() += 1;
                    trx += 1;
                    trx_failed += u64::from(!ok);
                }
            }
        }
        for info in &answer.infos {
            let ok = info.result == Code::Sucess as i32
                && info
                    .receipt
                    .as_ref()
                    .is_some_and(|r| r.result == CONTRACT_SUCCESS);
            if !ok {
                continue;
            }
            for log in &info.log {
                if log.topics.len() != 3
                    || log.topics[0] != TRANSFER_TOPIC
                    || log.data.len() != 32
                    || log.data.iter().all(|b| *b == 0)
                    || log.topics[2].len() != 32
                    || log.topics[2][..12].iter().any(|b| *b != 0)
                {
                    continue;
                }
                let mut body = [0x41u8; 21];
                body[1..].copy_from_slice(&log.topics[2][12..]);
                *addresses.entry(tron_address(&body)).or_default() += 1;
                tokens += 1;
            }
        }
        Ok(())
    })
    .await?;
    let text: String = addresses.keys().map(|a| format!("{a}\n")).collect();
    std::fs::write(&a.file, text)?;
    let counts: String = addresses
        .iter()
        .map(|(a, n)| format!("{a} {n}\n"))
        .collect();
    std::fs::write(format!("{}.counts", a.file), counts)?;
    println!(
        "{}",
        json!({"addresses": addresses.len(), "txs": txs, "trx_transfers": trx,
               "trx_failed": trx_failed, "token_transfers": tokens, "payments": trx + tokens})
    );
    Ok(())
}

// --- source and daemon: paywatch ---------------------------------------------

fn source(a: &Args, watch: Arc<WatchSet>) -> anyhow::Result<TronSource> {
    let cfg = TronConfig {
        url: a.url.clone(),
        solidity_url: Some(a.solidity_url.clone()).filter(|u| !u.is_empty()),
        // USDT at its mainnet contract, as config/default.toml has it.
        tokens: Tokens::mainnet(),
        blocks_per_request: a.blocks_per_request,
        batches_in_flight: a.batches_in_flight,
        infos_in_flight: a.infos_in_flight,
        request_timeout: Duration::from_secs(60),
        ..TronConfig::default()
    };
    Ok(TronSource::new(cfg, watch)?)
}

fn watch_set(file: &str) -> anyhow::Result<Arc<WatchSet>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("read {file}"))?;
    let set = WatchSet::new(Network::Tron).keyed(watch_key());
    set.extend(text.lines().filter(|l| !l.is_empty()));
    Ok(Arc::new(set))
}

async fn run_source(a: &Args) -> anyhow::Result<()> {
    let watch = watch_set(&a.file)?;
    let source = source(a, watch)?;
    let (t0, cpu0) = (Instant::now(), cpu_time());
    let mut stream = CanonicalStream::new(source, Vec::new(), a.start, 100);
    let (mut transfers, mut trx, mut blocks) = (0usize, 0usize, 0usize);
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
                trx += t
                    .iter()
                    .filter(|t| t.asset == AssetId::Known(Asset::Trx))
                    .count();
                transfers += t.len();
                blocks += 1;
            }
        }
    }
    let secs = t0.elapsed();
    println!(
        "{}",
        json!({"transfers": transfers, "trx_transfers": trx, "token_transfers": transfers - trx,
               "blocks": blocks, "seconds": secs.as_secs_f64(), "cpu_s": cpu_since(cpu0)})
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
    // config/default.toml's Tron settings, except one database transaction
    // per 100 events (as the Ethereum and Litecoin benchmarks write).
    let cfg = WatcherConfig {
        network: Network::Tron,
        start_height: Some(a.start),
        max_reorg_depth: 100,
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
    let (t0, cpu0) = (Instant::now(), cpu_time());
    let task = tokio::spawn(watcher::run(cfg, source, deps, stop_rx));
    loop {
        let at = store
            .chain_status(Network::Tron)
            .await?
            .and_then(|s| s.cursor_height);
        if at >= Some(a.end) || task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed();
    let cpu = cpu_since(cpu0);
    let _ = stop_tx.send(true);
    task.await??;
    let transfers = store
        .count_raw(&format!(
            "SELECT COUNT(*) FROM transfers WHERE network = 'tron' AND block_height BETWEEN {} AND {}",
            a.start, a.end
        ))
        .await?;
    println!(
        "{}",
        json!({"transfers": transfers, "blocks": a.end - a.start + 1, "seconds": secs.as_secs_f64(),
               "cpu_s": cpu, "database": store.dialect().as_str()})
    );
    store.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    match a.mode.as_str() {
        "serve" => serve(&a).await,
        "floor" => floor(&a).await,
        "collect" => collect(&a).await,
        "source" => run_source(&a).await,
        "daemon" => run_daemon(&a).await,
        other => bail!("unknown mode {other}"),
    }
}

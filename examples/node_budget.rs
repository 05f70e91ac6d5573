//! The JSON-RPC calls and bytes a watcher costs its node per hour, idle,
//! following the tip and catching up, measured through a counting proxy in
//! front of a real node: the source paywatch builds from its default
//! settings (`paywatch::chains::source`) and the canonical stream, one
//! watcher step (a batch towards the tip, then the final-height check) at a
//! time. Solana's test node counts for itself: see `solana_budget`; so do
//! ElectrumX (its admin RPC's `sessions`: requests, bytes and cost) and
//! the Tron test node (rpcs served and the bytes of their protobuf answers).
//!
//!   cargo run --all-features --example node_budget -- ethereum [--txs N] [--blocks B]
//!   cargo run --all-features --example node_budget -- litecoin [--mempool M] [--watched W]
//!   cargo run --all-features --example node_budget -- electrum [--watched W]
//!   cargo run --all-features --example node_budget -- tron [--txs N] [--blocks B]
//!
//! - ethereum: anvil (`PAYWATCH_ANVIL`, or `deploy/install-nodes.sh`),
//!   blocks of N ETH transfers (100); call traces off, as by default.
//! - litecoin: Litecoin Core in regtest (`deploy/install-nodes.sh`), the node
//!   source with the mempool followed (the default); after the phases below,
//!   idle polls again with M transactions (20,000) waiting in the mempool,
//!   none of them to a watched address: first as by default (the whole
//!   txid list each poll), then through a watch-only wallet
//!   (`rpc.mempool_wallet`) with W addresses (5,000) imported and one
//!   payment to them waiting. Per hour: 2.5 min blocks (24 blocks, 3,576
//!   idle polls).
//! - electrum: Litecoin Core regtest with ElectrumX in front (its default
//!   cost limits), the Electrum source with W addresses (5,000) watched;
//!   catching up includes subscribing them all. Per hour: 2.5 min blocks.
//! - tron: the gRPC test node, blocks of N TRX transfers. Per hour: 3 s
//!   blocks (1,200 blocks, 2,400 idle polls).
//!
//! Phases, each its own figures: catching up B blocks (200) from a cold
//! start; following, one new block before each step; idle, steps with no
//! new block. Per hour assumes the default 1 s poll and mainnet's block
//! time (Ethereum 12 s: 300 blocks and 3,300 idle polls an hour). Bytes are
//! request and response bodies as sent, without HTTP headers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context as _};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use paywatch::settings::Settings;
use paywatch_core::{BlockSource, CanonicalStream, Network};
use paywatch_testkit::anvil::ACCOUNTS;
use paywatch_testkit::{
    AnvilNode, AnvilOptions, ElectrumX, LitecoinNode, NodeOptions, TronNode, TronNodeOptions,
};
use serde_json::Value;

/// What a watcher asked of its node, as the proxy in front of it (or the
/// server itself) counted.
#[derive(Debug, Default, Clone)]
struct Counts {
    http_requests: u64,
    calls: BTreeMap<String, u64>,
    bytes_up: u64,
    bytes_down: u64,
    /// ElectrumX's cost of the session at the end, not a difference: time
    /// takes it away.
    electrum_cost: Option<f64>,
}

/// Where the counts come from.
trait Meter {
    async fn counts(&self) -> anyhow::Result<Counts>;
}

impl Meter for Proxy {
    async fn counts(&self) -> anyhow::Result<Counts> {
        Ok(Proxy::counts(self))
    }
}

/// The Tron test node counts what it serves: rpcs and their encoded answers.
impl Meter for TronNode {
    async fn counts(&self) -> anyhow::Result<Counts> {
        let served = self.served();
        Ok(Counts {
            http_requests: served.values().map(|(n, _)| n).sum(),
            calls: served
                .iter()
                .map(|(rpc, (n, _))| ((*rpc).to_owned(), *n))
                .collect(),
            bytes_up: 0,
            bytes_down: served.values().map(|(_, b)| b).sum(),
            electrum_cost: None,
        })
    }
}

/// ElectrumX accounts for each session: requests, bytes and cost.
impl Meter for ElectrumX {
    async fn counts(&self) -> anyhow::Result<Counts> {
        let sessions = self.sessions().await?;
        let requests = sessions.iter().map(|s| s.requests).sum();
        Ok(Counts {
            http_requests: requests,
            calls: BTreeMap::from([("(requests, any method)".to_owned(), requests)]),
            bytes_up: sessions.iter().map(|s| s.bytes_received).sum(),
            bytes_down: sessions.iter().map(|s| s.bytes_sent).sum(),
            electrum_cost: sessions.iter().map(|s| s.cost).reduce(f64::max),
        })
    }
}

impl Counts {
    fn calls(&self) -> u64 {
        self.calls.values().sum()
    }

    fn minus(&self, before: &Counts) -> Counts {
        Counts {
            http_requests: self.http_requests.saturating_sub(before.http_requests),
            calls: self
                .calls
                .iter()
                .map(|(m, n)| {
                    let was = before.calls.get(m).copied().unwrap_or(0);
                    (m.clone(), n.saturating_sub(was))
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
            bytes_up: self.bytes_up.saturating_sub(before.bytes_up),
            bytes_down: self.bytes_down.saturating_sub(before.bytes_down),
            electrum_cost: self.electrum_cost,
        }
    }
}

struct Proxy {
    target: String,
    http: reqwest::Client,
    counts: Mutex<Counts>,
}

impl Proxy {
    fn counts(&self) -> Counts {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Forwards one JSON-RPC POST, counting its calls (each of a batch) and
/// bytes.
async fn forward(
    State(p): State<Arc<Proxy>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let methods: Vec<String> = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Array(calls)) => calls.iter().map(method_of).collect(),
        Ok(call) => vec![method_of(&call)],
        Err(_) => vec!["(unreadable)".to_owned()],
    };
    let mut ask = p
        .http
        // The path too: a call to one wallet of several goes to /wallet/NAME.
        .post(format!("{}{}", p.target, uri.path()))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        ask = ask.header(header::AUTHORIZATION, auth);
    }
    let up = body.len() as u64;
    let answer = match ask.body(body).send().await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let bytes = answer.bytes().await.unwrap_or_default();
    {
        let mut c = p
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        c.http_requests += 1;
        for m in methods {
            *c.calls.entry(m).or_default() += 1;
        }
        c.bytes_up += up;
        c.bytes_down += bytes.len() as u64;
    }
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn method_of(call: &Value) -> String {
    call.get("method")
        .and_then(Value::as_str)
        .unwrap_or("(none)")
        .to_owned()
}

/// Serves the proxy on a free loopback port; its URL.
async fn start_proxy(target: String) -> anyhow::Result<(String, Arc<Proxy>)> {
    let proxy = Arc::new(Proxy {
        target,
        http: reqwest::Client::builder().no_gzip().build()?,
        counts: Mutex::new(Counts::default()),
    });
    let app = axum::Router::new()
        .fallback(axum::routing::post(forward))
        .with_state(proxy.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, proxy))
}

struct Args {
    network: String,
    txs: u64,
    blocks: u64,
    mempool: u64,
    watched: u64,
}

fn args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let network = it.next().context("the network: ethereum")?;
    let mut a = Args {
        network,
        txs: 100,
        blocks: 200,
        mempool: 20_000,
        watched: 5_000,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--txs" => a.txs = value.parse().context("--txs")?,
            "--blocks" => a.blocks = value.parse().context("--blocks")?,
            "--mempool" => a.mempool = value.parse().context("--mempool")?,
            "--watched" => a.watched = value.parse().context("--watched")?,
            f => {
                bail!("unknown flag {f}; expected --txs N, --blocks B, --mempool M or --watched W")
            }
        }
    }
    Ok(a)
}

/// A node that makes blocks on demand, with the settings paywatch would
/// read it with.
trait Chain {
    async fn add_block(&self, txs: u64) -> anyhow::Result<()>;
    async fn height(&self) -> anyhow::Result<u64>;
}

struct Anvil {
    node: AnvilNode,
    serial: std::sync::atomic::AtomicU64,
}

impl Chain for Anvil {
    async fn add_block(&self, txs: u64) -> anyhow::Result<()> {
        for i in 0..txs {
            let serial = 1 + self
                .serial
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let to = format!("0x{:040x}", 0xbeef_0000_0000u64 + serial);
            let from = ACCOUNTS[usize::try_from(i % 9 + 1)?];
            self.node
                .send_eth(from, &to, 1_000 + u128::from(serial))
                .await?;
        }
        self.node.mine(1).await?;
        Ok(())
    }

    async fn height(&self) -> anyhow::Result<u64> {
        Ok(self.node.block_number().await?)
    }
}

struct Litecoin {
    node: LitecoinNode,
}

/// Litecoin blocks as an Electrum server indexes them.
struct Indexed {
    chain: Litecoin,
    server: ElectrumX,
}

impl Chain for Indexed {
    async fn add_block(&self, txs: u64) -> anyhow::Result<()> {
        self.chain.add_block(txs).await?;
        self.server.wait_synced_with(&self.chain.node).await?;
        Ok(())
    }

    async fn height(&self) -> anyhow::Result<u64> {
        self.chain.height().await
    }
}

/// Tron blocks of `txs` TRX transfers.
impl Chain for TronNode {
    async fn add_block(&self, txs: u64) -> anyhow::Result<()> {
        self.fill_blocks(1, usize::try_from(txs)?)?;
        Ok(())
    }

    async fn height(&self) -> anyhow::Result<u64> {
        Ok(self.tip())
    }
}

impl Chain for Litecoin {
    /// Blocks of the wallet's own payments: `txs` of them, then mined.
    async fn add_block(&self, txs: u64) -> anyhow::Result<()> {
        let to = self.node.new_address().await?;
        for _ in 0..txs {
            self.node.send(&to, "0.001").await?;
        }
        self.node.mine(1).await?;
        Ok(())
    }

    async fn height(&self) -> anyhow::Result<u64> {
        Ok(self.node.block_count().await?)
    }
}

/// One poll as the watcher makes it: a batch towards the tip, the final
/// height, and, when nothing new came, the mempool.
async fn step<S: BlockSource>(stream: &mut CanonicalStream<S>) -> anyhow::Result<usize> {
    let events = stream.next_batch(1_000).await?;
    stream.confirmed_final_height().await?;
    if events.is_empty() {
        stream.source().unconfirmed().await?;
    }
    Ok(events.len())
}

fn report(what: &str, c: &Counts, per: &str, n: u64) {
    let n = n.max(1);
    println!(
        "{what:<14} {} calls in {} requests, {} bytes up, {} bytes down; per {per}: {} calls, {} bytes down",
        c.calls(),
        c.http_requests,
        c.bytes_up,
        c.bytes_down,
        c.calls() / n,
        c.bytes_down / n,
    );
    for (m, k) in &c.calls {
        println!("{:<16} {m:<28} {k:>7}", "");
    }
    if let Some(cost) = c.electrum_cost {
        println!(
            "{:<16} ElectrumX session cost now {cost:.0} (slowed past 1,000, closed at 10,000)",
            ""
        );
    }
}

async fn measure<C: Chain, M: Meter>(
    chain: &C,
    network: Network,
    settings: &Settings,
    a: &Args,
    meter: &M,
    block_secs: u64,
    watched: &[String],
) -> anyhow::Result<CanonicalStream<Arc<dyn BlockSource>>> {
    let ns = settings
        .networks
        .get(network.as_str())
        .context("settings")?;
    let start = chain.height().await? + 1;
    for _ in 0..a.blocks {
        chain.add_block(a.txs).await?;
    }
    let watch = Arc::new(paywatch::chains::watch_set(network, Some(ns)));
    watch.insert(&format!("0x{:040x}", 0xdead_u64));
    for address in watched {
        watch.insert(address);
    }
    let source = paywatch::chains::source(network, ns, watch)?.context("a node source")?;
    let mut stream = CanonicalStream::new(source, Vec::new(), start, 64);

    let before = meter.counts().await?;
    let tip = chain.height().await?;
    while stream.cursor_tip().is_none_or(|c| c.height < tip) {
        step(&mut stream).await?;
    }
    let catch_up = meter.counts().await?.minus(&before);
    report("catching up", &catch_up, "block", a.blocks);

    const STEPS: u64 = 60;
    // A second apart, as the daemon polls: what a poll may keep is kept
    // for a while, not for ever.
    const IDLE_POLLS: u64 = 15;
    let idle = idle_polls(&mut stream, meter, IDLE_POLLS).await?;
    report("idle", &idle, "poll", IDLE_POLLS);

    let before = meter.counts().await?;
    // Polls until each new block is connected: a source that reads past
    // the tip on speculation may find it one poll late.
    let mut polls = 0;
    for _ in 0..STEPS {
        chain.add_block(a.txs).await?;
        let mut connected = 0;
        while connected == 0 {
            polls += 1;
            if polls > 5 * STEPS {
                bail!("new blocks are not connected");
            }
            connected = step(&mut stream).await?;
            if connected == 0 {
                // An Electrum server tells of a block a moment after it.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        if connected != 1 {
            bail!("a step after one new block connected {connected}");
        }
    }
    let following = meter.counts().await?.minus(&before);
    report("following", &following, "new block", STEPS);
    println!("{:<16} {polls} polls for {STEPS} new blocks", "");

    let blocks_an_hour = 3_600 / block_secs;
    let idle_polls = 3_600 - blocks_an_hour;
    let per_hour =
        |follow: u64, idle: u64| follow * blocks_an_hour / STEPS + idle * idle_polls / IDLE_POLLS;
    println!(
        "per hour at a 1 s poll and a block every {block_secs} s: {} calls, {} bytes down \
         ({blocks_an_hour} blocks, {idle_polls} idle polls); idle alone: {} calls, {} bytes down; \
         catching up: {} blocks an hour at 10 calls/s",
        per_hour(following.calls(), idle.calls()),
        per_hour(following.bytes_down, idle.bytes_down),
        idle.calls() * 3_600 / IDLE_POLLS,
        idle.bytes_down * 3_600 / IDLE_POLLS,
        36_000 * a.blocks / catch_up.calls().max(1),
    );
    Ok(stream)
}

/// The first poll after a filled mempool (each waiting transaction read
/// once), then idle polls with it waiting.
async fn mempool_idle<S: BlockSource, M: Meter>(
    stream: &mut CanonicalStream<S>,
    meter: &M,
    waiting: u64,
) -> anyhow::Result<()> {
    // (A block connected first reads no mempool: poll until one has not.)
    let before = meter.counts().await?;
    while step(stream).await? > 0 {}
    report(
        "first poll",
        &meter.counts().await?.minus(&before),
        "poll",
        1,
    );
    const POLLS: u64 = 15;
    let busy = idle_polls(stream, meter, POLLS).await?;
    report(&format!("idle, {waiting} in mempool"), &busy, "poll", POLLS);
    println!(
        "per hour idle with {waiting} transactions waiting (after the first poll): {} calls, \
         {} bytes down ({} KB a minute)",
        busy.calls() * 3_600 / POLLS,
        busy.bytes_down * 3_600 / POLLS,
        busy.bytes_down * 60 / POLLS / 1_000,
    );
    Ok(())
}

/// Idle polls a second apart, as the daemon makes them.
async fn idle_polls<S: BlockSource, M: Meter>(
    stream: &mut CanonicalStream<S>,
    meter: &M,
    polls: u64,
) -> anyhow::Result<Counts> {
    let before = meter.counts().await?;
    for _ in 0..polls {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        step(stream).await?;
    }
    Ok(meter.counts().await?.minus(&before))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let mut settings = Settings::load(None)?;
    match a.network.as_str() {
        "ethereum" => {
            let node = AnvilNode::start(AnvilOptions::default()).await?;
            let (url, proxy) = start_proxy(node.url()).await?;
            let ns = settings
                .networks
                .get_mut("ethereum")
                .context("ethereum settings")?;
            ns.enabled = true;
            ns.source = "node".into();
            ns.rpc.url = url;
            ns.chain_id = Some(paywatch_testkit::anvil::CHAIN_ID);
            node.set_automine(false).await?;
            let chain = Anvil {
                node,
                serial: 0.into(),
            };
            println!(
                "ethereum (anvil), blocks of {} ETH transfers, default settings",
                a.txs
            );
            measure(&chain, Network::Ethereum, &settings, &a, &*proxy, 12, &[])
                .await
                .map(drop)
        }
        "litecoin" => {
            let node = LitecoinNode::start(NodeOptions::default()).await?;
            node.mine(110).await?;
            let (url, proxy) = start_proxy(node.rpc_url()).await?;
            let ns = settings
                .networks
                .get_mut("litecoin")
                .context("litecoin settings")?;
            ns.enabled = true;
            ns.source = "node".into();
            ns.chain = "regtest".into();
            ns.rpc.url = url;
            ns.rpc.user = Some(node.rpc_user().to_owned());
            ns.rpc.password = Some(paywatch::settings::Secret(node.rpc_password().to_owned()));
            let chain = Litecoin { node };
            println!(
                "litecoin (Litecoin Core regtest), blocks of {} wallet payments, default settings \
                 (mempool followed: {})",
                a.txs, ns.mempool
            );
            let mut stream =
                measure(&chain, Network::Litecoin, &settings, &a, &*proxy, 150, &[]).await?;
            chain.node.fill_mempool(usize::try_from(a.mempool)?).await?;
            println!("whole mempool (getrawmempool) each poll, as by default:");
            mempool_idle(&mut stream, &*proxy, a.mempool).await?;

            // The same node through a watch-only wallet, with as many
            // addresses watched as a busy shop issues in weeks.
            let mut settings = settings.clone();
            let ns = settings
                .networks
                .get_mut("litecoin")
                .context("litecoin settings")?;
            ns.rpc.mempool_wallet = Some("paywatch-mempool".into());
            let watch = Arc::new(paywatch::chains::watch_set(Network::Litecoin, Some(ns)));
            let addresses = chain
                .node
                .new_addresses(usize::try_from(a.watched)?)
                .await?;
            watch.extend(addresses.iter().map(String::as_str));
            let source =
                paywatch::chains::source(Network::Litecoin, ns, watch)?.context("a node source")?;
            let tip = chain.height().await?;
            let mut stream = CanonicalStream::new(source, Vec::new(), tip, 64);
            let before = proxy.counts();
            let mut polls = 0;
            // Imports go 2,000 addresses a poll; done when a poll imports none.
            loop {
                polls += 1;
                let calls = proxy.counts();
                step(&mut stream).await?;
                if polls > 1
                    && !proxy
                        .counts()
                        .minus(&calls)
                        .calls
                        .contains_key("importmulti")
                {
                    break;
                }
            }
            report(
                &format!("importing {} addresses", a.watched),
                &proxy.counts().minus(&before),
                "poll",
                polls,
            );
            let paid = addresses.first().context("--watched must be at least 1")?;
            chain.node.send(paid, "0.5").await?;
            println!(
                "through the watch-only wallet (rpc.mempool_wallet), {} addresses watched, one \
                 payment to them waiting:",
                a.watched
            );
            mempool_idle(&mut stream, &*proxy, a.mempool).await?;
            Ok(())
        }
        "electrum" => {
            let node = LitecoinNode::start(NodeOptions::default()).await?;
            node.mine(110).await?;
            let server = ElectrumX::start(&node).await?;
            let ns = settings
                .networks
                .get_mut("litecoin")
                .context("litecoin settings")?;
            ns.enabled = true;
            ns.source = "electrum".into();
            ns.chain = "regtest".into();
            ns.electrum.url = server.tcp_url();
            let watched = node.new_addresses(usize::try_from(a.watched)?).await?;
            println!(
                "litecoin through ElectrumX (its default cost limits), {} addresses watched, \
                 blocks of {} wallet payments, default settings",
                a.watched, a.txs
            );
            let chain = Indexed {
                chain: Litecoin { node },
                server,
            };
            measure(
                &chain,
                Network::Litecoin,
                &settings,
                &a,
                &chain.server,
                150,
                &watched,
            )
            .await
            .map(drop)
        }
        "tron" => {
            let node = TronNode::start(TronNodeOptions::default()).await?;
            let ns = settings.networks.get_mut("tron").context("tron settings")?;
            ns.enabled = true;
            ns.source = "node".into();
            ns.rpc.url = node.url();
            ns.rpc.solidity_url = Some(node.solidity_url());
            println!(
                "tron (the gRPC test node), blocks of {} TRX transfers, default settings; bytes \
                 are the answers' protobuf, without gRPC framing",
                a.txs
            );
            println!(
                "beside TronGrid's documented quota (developers.tron.network, rate limits): \
                 100,000 requests a day per account, 15 to 20 a second with a key; a day is \
                 24 times the hour below"
            );
            measure(&node, Network::Tron, &settings, &a, &node, 3, &[])
                .await
                .map(drop)
        }
        n => bail!("unknown network {n}: ethereum, litecoin, electrum or tron"),
    }
}

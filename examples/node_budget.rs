//! The JSON-RPC calls and bytes a watcher costs its node per hour, idle,
//! following the tip and catching up, measured through a counting proxy in
//! front of a real node: the source paywatch builds from its default
//! settings (`paywatch::chains::source`) and the canonical stream, one
//! watcher step (a batch towards the tip, then the final-height check) at a
//! time. Solana's test node counts for itself: see `solana_budget`.
//!
//!   cargo run --all-features --example node_budget -- ethereum [--txs N] [--blocks B]
//!   cargo run --all-features --example node_budget -- litecoin [--mempool M]
//!
//! - ethereum: anvil (`PAYWATCH_ANVIL`, or `deploy/install-nodes.sh`),
//!   blocks of N ETH transfers (100); call traces off, as by default.
//! - litecoin: Litecoin Core in regtest (`deploy/install-nodes.sh`), the node
//!   source with the mempool followed (the default); after the phases below,
//!   idle polls again with M transactions (20,000) waiting in the mempool,
//!   none of them to a watched address. Per hour: 2.5 min blocks (24 blocks,
//!   3,576 idle polls).
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
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use paywatch::settings::Settings;
use paywatch_core::{BlockSource, CanonicalStream, Network};
use paywatch_testkit::anvil::ACCOUNTS;
use paywatch_testkit::{AnvilNode, AnvilOptions, LitecoinNode, NodeOptions};
use serde_json::Value;

/// What went through the proxy.
#[derive(Debug, Default, Clone)]
struct Counts {
    http_requests: u64,
    calls: BTreeMap<String, u64>,
    bytes_up: u64,
    bytes_down: u64,
}

impl Counts {
    fn calls(&self) -> u64 {
        self.calls.values().sum()
    }

    fn minus(&self, before: &Counts) -> Counts {
        Counts {
            http_requests: self.http_requests - before.http_requests,
            calls: self
                .calls
                .iter()
                .map(|(m, n)| (m.clone(), n - before.calls.get(m).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            bytes_up: self.bytes_up - before.bytes_up,
            bytes_down: self.bytes_down - before.bytes_down,
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
async fn forward(State(p): State<Arc<Proxy>>, headers: HeaderMap, body: Bytes) -> Response {
    let methods: Vec<String> = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Array(calls)) => calls.iter().map(method_of).collect(),
        Ok(call) => vec![method_of(&call)],
        Err(_) => vec!["(unreadable)".to_owned()],
    };
    let mut ask = p
        .http
        .post(&p.target)
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
}

fn args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let network = it.next().context("the network: ethereum")?;
    let mut a = Args {
        network,
        txs: 100,
        blocks: 200,
        mempool: 20_000,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--txs" => a.txs = value.parse().context("--txs")?,
            "--blocks" => a.blocks = value.parse().context("--blocks")?,
            "--mempool" => a.mempool = value.parse().context("--mempool")?,
            f => bail!("unknown flag {f}; expected --txs N, --blocks B or --mempool M"),
        }
    }
    Ok(a)
}

/// A node that makes blocks on demand, with the settings paywatch would
/// read it with.
trait Chain {
    async fn add_block(&mut self, txs: u64) -> anyhow::Result<()>;
    async fn height(&self) -> anyhow::Result<u64>;
}

struct Anvil {
    node: AnvilNode,
    serial: u64,
}

impl Chain for Anvil {
    async fn add_block(&mut self, txs: u64) -> anyhow::Result<()> {
        for i in 0..txs {
            self.serial += 1;
            let to = format!("0x{:040x}", 0xbeef_0000_0000u64 + self.serial);
            let from = ACCOUNTS[usize::try_from(i % 9 + 1)?];
            self.node
                .send_eth(from, &to, 1_000 + u128::from(self.serial))
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
    http: reqwest::Client,
}

impl Chain for Litecoin {
    /// Blocks of the wallet's own payments: `txs` of them, then mined.
    async fn add_block(&mut self, txs: u64) -> anyhow::Result<()> {
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

impl Litecoin {
    /// One JSON-RPC batch, its body written as text (amounts exactly as
    /// written); every call must succeed.
    async fn batch(&self, calls: &[String]) -> anyhow::Result<Vec<Value>> {
        let body = format!("[{}]", calls.join(","));
        let answers: Vec<Value> = self
            .http
            .post(self.node.rpc_url())
            .basic_auth(self.node.rpc_user(), Some(self.node.rpc_password()))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await?
            .json()
            .await?;
        answers
            .into_iter()
            .map(|a| match a.get("error") {
                Some(e) if !e.is_null() => bail!("batch call failed: {e}"),
                _ => Ok(a["result"].clone()),
            })
            .collect()
    }

    /// `count` transactions waiting in the mempool, each spending one coin
    /// of a fan-out of the wallet's coinbases.
    async fn fill_mempool(&self, count: u64) -> anyhow::Result<()> {
        const FAN: u64 = 1_000;
        let call = |id: u64, method: &str, params: String| {
            format!(r#"{{"jsonrpc":"1.0","id":{id},"method":"{method}","params":{params}}}"#)
        };
        let addresses: Vec<String> = self
            .batch(
                &(0..FAN)
                    .map(|i| call(i, "getnewaddress", r#"["","bech32"]"#.to_owned()))
                    .collect::<Vec<_>>(),
            )
            .await?
            .into_iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect();
        let outputs = addresses
            .iter()
            .map(|a| format!(r#""{a}":0.01"#))
            .collect::<Vec<_>>()
            .join(",");
        for _ in 0..count.div_ceil(FAN) {
            self.node
                .rpc_raw("sendmany", &format!(r#"["",{{{outputs}}}]"#))
                .await?;
        }
        self.node.mine(1).await?;
        let listed = format!(
            "[1,9999999,[{}]]",
            addresses
                .iter()
                .map(|a| format!("\"{a}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        let coins = self.node.rpc_raw("listunspent", &listed).await?;
        let coins = coins.as_array().context("listunspent")?;
        let to = self.node.new_address().await?;
        let coins: Vec<&Value> = coins.iter().take(usize::try_from(count)?).collect();
        for chunk in coins.chunks(500) {
            let raw = self
                .batch(
                    &chunk
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            call(
                                i as u64,
                                "createrawtransaction",
                                format!(
                                    r#"[[{{"txid":"{}","vout":{}}}],[{{"{to}":0.0099}}]]"#,
                                    c["txid"].as_str().unwrap_or_default(),
                                    c["vout"]
                                ),
                            )
                        })
                        .collect::<Vec<_>>(),
                )
                .await?;
            let signed = self
                .batch(
                    &raw.iter()
                        .enumerate()
                        .map(|(i, r)| {
                            call(i as u64, "signrawtransactionwithwallet", format!("[{r}]"))
                        })
                        .collect::<Vec<_>>(),
                )
                .await?;
            self.batch(
                &signed
                    .iter()
                    .enumerate()
                    .map(|(i, s)| call(i as u64, "sendrawtransaction", format!("[{}]", s["hex"])))
                    .collect::<Vec<_>>(),
            )
            .await?;
        }
        let waiting = self.node.mempool().await?.len();
        if (waiting as u64) < count {
            bail!("only {waiting} transactions in the mempool, not {count}");
        }
        Ok(())
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
        "{what:<14} {} calls in {} HTTP requests, {} bytes up, {} bytes down; per {per}: {} calls, {} bytes down",
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
}

async fn measure<C: Chain>(
    chain: &mut C,
    network: Network,
    settings: &Settings,
    a: &Args,
    proxy: &Proxy,
    block_secs: u64,
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
    let source = paywatch::chains::source(network, ns, watch)?.context("a node source")?;
    let mut stream = CanonicalStream::new(source, Vec::new(), start, 64);

    let before = proxy.counts();
    let tip = chain.height().await?;
    while stream.cursor_tip().is_none_or(|c| c.height < tip) {
        step(&mut stream).await?;
    }
    let catch_up = proxy.counts().minus(&before);
    report("catching up", &catch_up, "block", a.blocks);

    const STEPS: u64 = 60;
    // A second apart, as the daemon polls: what a poll may keep is kept
    // for a while, not for ever.
    const IDLE_POLLS: u64 = 15;
    let idle = idle_polls(&mut stream, proxy, IDLE_POLLS).await?;
    report("idle", &idle, "poll", IDLE_POLLS);

    let before = proxy.counts();
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
        }
        if connected != 1 {
            bail!("a step after one new block connected {connected}");
        }
    }
    let following = proxy.counts().minus(&before);
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

/// Idle polls a second apart, as the daemon makes them.
async fn idle_polls<S: BlockSource>(
    stream: &mut CanonicalStream<S>,
    proxy: &Proxy,
    polls: u64,
) -> anyhow::Result<Counts> {
    let before = proxy.counts();
    for _ in 0..polls {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        step(stream).await?;
    }
    Ok(proxy.counts().minus(&before))
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
            let mut chain = Anvil { node, serial: 0 };
            println!(
                "ethereum (anvil), blocks of {} ETH transfers, default settings",
                a.txs
            );
            measure(&mut chain, Network::Ethereum, &settings, &a, &proxy, 12)
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
            let mut chain = Litecoin {
                node,
                http: reqwest::Client::new(),
            };
            println!(
                "litecoin (Litecoin Core regtest), blocks of {} wallet payments, default settings \
                 (mempool followed: {})",
                a.txs, ns.mempool
            );
            let mut stream =
                measure(&mut chain, Network::Litecoin, &settings, &a, &proxy, 150).await?;
            chain.fill_mempool(a.mempool).await?;
            // The first poll reads each waiting transaction once; later
            // ones only what is new, and the whole txid list each time.
            // (The fan-out block is connected first: a poll that finds a
            // block reads no mempool.)
            let before = proxy.counts();
            while step(&mut stream).await? > 0 {}
            let first = proxy.counts().minus(&before);
            report("first poll after", &first, "poll", 1);
            const POLLS: u64 = 15;
            let busy = idle_polls(&mut stream, &proxy, POLLS).await?;
            report(
                &format!("idle, {} in mempool", a.mempool),
                &busy,
                "poll",
                POLLS,
            );
            println!(
                "per hour idle with {} transactions waiting (after the first poll): {} calls, \
                 {} bytes down ({} MB a minute)",
                a.mempool,
                busy.calls() * 3_600 / POLLS,
                busy.bytes_down * 3_600 / POLLS,
                busy.bytes_down * 60 / POLLS / 1_000_000,
            );
            Ok(())
        }
        n => bail!("unknown network {n}: ethereum or litecoin"),
    }
}

//! How long a payer waits (issue 34), on a real Litecoin Core regtest node
//! with the settings a new user starts from (SQLite, the node source, its
//! mempool shown; one confirmation, as in the issue). Each `--paywatch`
//! binary runs in turn as `paywatch run`, on a database of its own, against
//! the same node; for each of `--runs` payments the payer's live stream
//! (`GET /v1/view/{token}/events`, as the payment page opens it) is open
//! while the example:
//!
//! - broadcasts the payment (`sendtoaddress` returned: the node holds it)
//!   and times until the stream says it is seen (`amount_pending` above 0);
//! - mines the block that decides it (`generatetoaddress` returned) and
//!   times until the stream says `paid`.
//!
//! Each step starts after a pause of 0 to 999 ms, so payments fall at any
//! moment of paywatch's poll interval, as real ones do. Prints the median,
//! p99 and max of both per binary, and each binary's medians against the
//! first's.
//!
//!   cargo run --all-features --example payment_latency -- \
//!       [--before-p2p OLD] --paywatch target/debug/paywatch [--runs 10]
//!
//! (`--before-p2p` for a binary of a release before `rpc.p2p`, which it
//! would refuse; the others hear the node over its P2P port.)
//!
//! Client, paywatch and node share this machine: the figures include
//! their contention.

#![allow(clippy::float_arithmetic)] // figures for people, never money

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use paywatch_testkit::{LitecoinNode, NodeOptions};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const TOKEN: &str = "latency-bench-storefront-token-0123456789abcdef";
/// The longest a step may take before the run is called failed.
const STEP_LIMIT: Duration = Duration::from_secs(30);

struct Args {
    /// Each binary, and whether it knows `rpc.p2p` (a release before it
    /// refuses the key).
    binaries: Vec<(PathBuf, bool)>,
    runs: usize,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        binaries: Vec::new(),
        runs: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--paywatch" => a
                .binaries
                .push((it.next().context("--paywatch PATH")?.into(), true)),
            "--before-p2p" => a
                .binaries
                .push((it.next().context("--before-p2p PATH")?.into(), false)),
            "--runs" => a.runs = it.next().context("--runs N")?.parse()?,
            other => bail!(
                "unknown argument {other}: --paywatch PATH, --before-p2p PATH (both \
                 repeatable), --runs N"
            ),
        }
    }
    if a.binaries.is_empty() {
        a.binaries.push(("target/debug/paywatch".into(), true));
    }
    if a.runs == 0 {
        bail!("--runs must be above 0");
    }
    Ok(a)
}

/// One payment's two waits.
#[derive(Debug, Clone, Copy)]
struct Waits {
    seen: Duration,
    paid: Duration,
}

/// A paywatch started as `paywatch run`, stopped when dropped.
struct Running {
    child: Child,
    api: String,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A regtest BIP84 account key (m/84'/1'/0' of a fixed seed).
fn account_tpub() -> String {
    use bitcoin::bip32::{ChildNumber, DerivationPath, Xpriv, Xpub};
    let secp = bitcoin::secp256k1::Secp256k1::new();
    let master = Xpriv::new_master(bitcoin::NetworkKind::Test, &[7u8; 32]).expect("a seed");
    let path: DerivationPath = vec![
        ChildNumber::from_hardened_idx(84).expect("index"),
        ChildNumber::from_hardened_idx(1).expect("index"),
        ChildNumber::from_hardened_idx(0).expect("index"),
    ]
    .into();
    Xpub::from_priv(&secp, &master.derive_priv(&secp, &path).expect("derives")).to_string()
}

fn config(dir: &Path, port: u16, node: &LitecoinNode, p2p: bool) -> String {
    let hash = hex::encode(Sha256::digest(TOKEN.as_bytes()));
    // The node's P2P port is a free one of the harness's, not regtest's own.
    let p2p = if p2p {
        format!("p2p = \"127.0.0.1:{}\"\n", node.p2p_port())
    } else {
        String::new()
    };
    format!(
        r#"[database]
url = "sqlite://{db}"

[api]
listen = "127.0.0.1:{port}"

[api.tokens]
storefront = ["bench:{hash}"]

[rates.fixed]
LTC = "100"

[networks.litecoin]
enabled = true
source = "node"
chain = "regtest"
confirmations = 1
account_key = "{key}"

[networks.litecoin.rpc]
url = "{rpc}"
user = "{user}"
password = "{password}"
{p2p}"#,
        db = dir.join("paywatch.db").display(),
        key = account_tpub(),
        rpc = node.rpc_url(),
        user = node.rpc_user(),
        password = node.rpc_password(),
    )
}

async fn start(binary: &Path, p2p: bool, node: &LitecoinNode) -> anyhow::Result<Running> {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let path = dir.path().join("paywatch.toml");
    std::fs::write(&path, config(dir.path(), port, node, p2p))?;
    let log = std::fs::File::create(dir.path().join("paywatch.log"))?;
    let child = Command::new(binary)
        .env("RUST_LOG", "warn")
        .arg("--config")
        .arg(&path)
        .arg("run")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let running = Running {
        child,
        api: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    };
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let ready = http
            .get(format!("{}/readyz", running.api))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            return Ok(running);
        }
        if started.elapsed() > STEP_LIMIT {
            let log = std::fs::read_to_string(running._dir.path().join("paywatch.log"))
                .unwrap_or_default();
            bail!("{} was not ready within 30 s:\n{log}", binary.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `data` of each `status` event of an open event stream, as it comes.
struct StatusStream {
    response: reqwest::Response,
    buffer: String,
}

impl StatusStream {
    async fn open(api: &str, view_token: &str) -> anyhow::Result<StatusStream> {
        let response = reqwest::Client::new()
            .get(format!("{api}/v1/view/{view_token}/events"))
            .send()
            .await?
            .error_for_status()?;
        Ok(StatusStream {
            response,
            buffer: String::new(),
        })
    }

    /// Waits for a `status` event whose data satisfies `ok`.
    async fn until(&mut self, what: &str, ok: impl Fn(&Value) -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let name = event.lines().find_map(|l| l.strip_prefix("event:"));
                let data = event.lines().find_map(|l| l.strip_prefix("data:"));
                if let (Some(" status" | "status"), Some(data)) = (name, data) {
                    if ok(&serde_json::from_str(data.trim())?) {
                        return Ok(());
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.response.chunk()).await {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(Ok(None)) => bail!("the stream ended before {what}"),
                Ok(Err(e)) => bail!("the stream failed before {what}: {e}"),
                Err(_) => bail!("{what} did not arrive within 30 s"),
            }
        }
    }
}

async fn one_payment(api: &str, node: &LitecoinNode, reference: &str) -> anyhow::Result<Waits> {
    let intent: Value = reqwest::Client::new()
        .post(format!("{api}/v1/intents"))
        .bearer_auth(TOKEN)
        .json(&json!({
            "kind": "order", "reference": reference, "account": "bench",
            "asset": "LTC", "network": "litecoin", "usd_amount": "100",
        }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let field = |name: &str| {
        intent[name]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("the created intent has no {name}: {intent}"))
    };
    let (address, coins, view_token) = (
        field("address")?,
        field("amount_due_coin")?,
        field("view_token")?,
    );
    let mut stream = StatusStream::open(api, &view_token).await?;

    // Payers come at any moment, not in step with paywatch's polls: each
    // step starts after a pause of its own, up to a poll interval.
    tokio::time::sleep(jitter()).await;
    node.send(&address, &coins).await?;
    let broadcast = Instant::now();
    stream
        .until("seen", |s| {
            s["amount_pending"].as_str().is_some_and(|p| p != "0")
        })
        .await?;
    let seen = broadcast.elapsed();

    tokio::time::sleep(jitter()).await;
    node.mine(1).await?;
    let mined = Instant::now();
    stream.until("paid", |s| s["paid"] == true).await?;
    Ok(Waits {
        seen,
        paid: mined.elapsed(),
    })
}

/// A pause of 0 to 999 ms, different each time.
fn jitter() -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    Duration::from_millis(h.finish() % 1000)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// (median, p99, max) in ms.
fn spread(mut xs: Vec<Duration>) -> (f64, f64, f64) {
    xs.sort();
    let at = |q: usize| xs[(xs.len() * q / 100).min(xs.len() - 1)];
    (ms(at(50)), ms(at(99)), ms(xs[xs.len() - 1]))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    // As the README asks of a node paywatch hears over P2P: its address
    // skips the delay on announcing transactions to inbound peers.
    let node = LitecoinNode::start(NodeOptions {
        extra_args: vec!["-whitelist=noban@127.0.0.1".into()],
        ..NodeOptions::default()
    })
    .await?;
    println!(
        "payment_latency: Litecoin Core regtest, SQLite, 1 confirmation, {} payments per binary",
        a.runs
    );
    let mut medians: Vec<(f64, f64)> = Vec::new();
    for (b, (binary, p2p)) in a.binaries.iter().enumerate() {
        let running = start(binary, *p2p, &node).await?;
        let mut waits = Vec::new();
        for run in 0..a.runs {
            let reference = format!("latency-{b}-{run}");
            waits.push(
                one_payment(&running.api, &node, &reference)
                    .await
                    .with_context(|| format!("{} run {run}", binary.display()))?,
            );
        }
        drop(running);
        let seen = spread(waits.iter().map(|w| w.seen).collect());
        let paid = spread(waits.iter().map(|w| w.paid).collect());
        println!(
            "{}: broadcast → seen on the stream p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; \
             block → paid on the stream p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            binary.display(),
            seen.0,
            seen.1,
            seen.2,
            paid.0,
            paid.1,
            paid.2
        );
        medians.push((seen.0, paid.0));
    }
    if let Some((first_seen, first_paid)) = medians.first().copied() {
        for ((binary, _), (seen, paid)) in a.binaries.iter().zip(&medians).skip(1) {
            println!(
                "{} against {}: seen median ×{:.2}, paid median ×{:.2}",
                binary.display(),
                a.binaries[0].0.display(),
                seen / first_seen,
                paid / first_paid
            );
        }
    }
    Ok(())
}

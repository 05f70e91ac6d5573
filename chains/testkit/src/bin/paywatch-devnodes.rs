//! `paywatch-devnodes`: the local dev chains `deploy/devnet.sh` runs paywatch
//! against, in one process. Dev only: never part of the paywatch binary.
//!
//! ```text
//! paywatch-devnodes [--env-file PATH] [--control-port PORT] [--exit-with PID]
//! paywatch-devnodes solana-pool COUNT
//! paywatch-devnodes free-ports COUNT
//! ```
//!
//! The first form starts, on 127.0.0.1:
//! - a real anvil (chain id 31337) mining a block every second, `finalized`
//!   4 blocks behind the tip (`--slots-in-an-epoch 2`), with two 6-decimal
//!   ERC-20s standing in for USDT and USDC;
//! - the Tron gRPC test node (Wallet and WalletSolidity), a block every 3 s
//!   of wall-clock time as on mainnet, solidified 2 blocks behind the tip,
//!   with a TRC-20 at mainnet USDT's address;
//! - the Solana JSON-RPC test node (litesvm), a block every 400 ms,
//!   confirmed 1 and finalized 9 blocks behind the newest;
//! - a control surface on HTTP: `GET /health`, and `POST /pay` with
//!   `{"network", "asset", "to", "amount"}` (amount: an integer in base
//!   units, as a string or number) answering `{"txid"}` once the payment is
//!   sent (it is in the next block).
//!
//! When everything is up it writes the endpoints, chain ids, contracts and
//! the account keys paywatch derives addresses from to `--env-file` as shell
//! assignments (`NAME=value`, one a line; written whole, by a rename), and
//! removes the file when it stops. SIGINT or SIGTERM stops it cleanly (anvil
//! is stopped with it); so does the exit of `--exit-with PID`, so that the
//! nodes do not outlive the script that started them.
//!
//! `solana-pool COUNT` prints COUNT Solana addresses (ed25519 public keys of
//! a fixed seed, none of them a dev account), one a line, for
//! `paywatch addresses import --network solana`. `free-ports COUNT` prints
//! COUNT ports free on 127.0.0.1, for nodes the script starts itself.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bitcoin::bip32::{ChildNumber, DerivationPath, Xpriv, Xpub};
use bitcoin::secp256k1::Secp256k1;
use paywatch_testkit::anvil::{ACCOUNTS, CHAIN_ID};
use paywatch_testkit::solana::LAMPORTS_PER_SOL;
use paywatch_testkit::tron::{sha256, TronAccount, TronContract, BLOCK_INTERVAL_MS};
use paywatch_testkit::{
    AnvilNode, AnvilOptions, SolanaNode, SolanaNodeOptions, TronNode, TronNodeOptions,
};
use serde_json::{json, Value};
use solana_address::Address;
use solana_keypair::Keypair;
use solana_signer::Signer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::RwLock;
use tokio::task::JoinSet;

/// Mainnet's USDT contract on Tron: the test node deploys its TRC-20 there,
/// so paywatch needs no contract override for it.
const TRON_USDT: &str = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t";
/// Blocks between the Tron tip and its solidified block.
const TRON_SOLIDITY_LAG: u64 = 2;
/// Milliseconds between two Solana blocks (mainnet's slot time).
const SOLANA_SLOT_MS: u64 = 400;
const SOLANA_CONFIRMED_LAG: usize = 1;
const SOLANA_FINALIZED_LAG: usize = 8;
/// anvil's `finalized` block is 2 epochs behind its tip: 4 blocks here.
const ANVIL_SLOTS_PER_EPOCH: &str = "2";
/// ERC-20 supply minted to anvil's first dev account, in base units.
const TOKEN_SUPPLY: u128 = 1_000_000_000 * 1_000_000;
/// The largest request the control surface reads.
const MAX_REQUEST_BYTES: usize = 64 * 1024;

fn usage() -> &'static str {
    "usage: paywatch-devnodes [--env-file PATH] [--control-port PORT] [--exit-with PID]\n       \
     paywatch-devnodes solana-pool COUNT\n       \
     paywatch-devnodes free-ports COUNT"
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("free-ports") {
        return match args.get(1).map(|n| n.parse::<usize>()) {
            Some(Ok(count)) if args.len() == 2 => match free_ports(count) {
                Ok(ports) => {
                    for port in ports {
                        println!("{port}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("paywatch-devnodes: finding free ports: {e}");
                    ExitCode::FAILURE
                }
            },
            _ => {
                eprintln!("{}", usage());
                ExitCode::from(2)
            }
        };
    }
    if args.first().map(String::as_str) == Some("solana-pool") {
        return match args.get(1).map(|n| n.parse::<u32>()) {
            Some(Ok(count)) if args.len() == 2 => {
                for i in 0..count {
                    println!("{}", solana_pool_key(i).pubkey());
                }
                ExitCode::SUCCESS
            }
            _ => {
                eprintln!("{}", usage());
                ExitCode::from(2)
            }
        };
    }
    let options = match Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("paywatch-devnodes: {e}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("paywatch-devnodes: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("paywatch-devnodes: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Default)]
struct Options {
    env_file: Option<PathBuf>,
    control_port: u16,
    exit_with: Option<u32>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                "--env-file" => o.env_file = Some(PathBuf::from(value(arg)?)),
                "--control-port" => {
                    o.control_port = value(arg)?
                        .parse()
                        .map_err(|e| format!("--control-port: {e}"))?;
                }
                "--exit-with" => {
                    o.exit_with = Some(
                        value(arg)?
                            .parse()
                            .map_err(|e| format!("--exit-with: {e}"))?,
                    );
                }
                "-h" | "--help" => return Err("help".to_owned()),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(o)
    }
}

fn say(message: &str) {
    eprintln!("devnodes: {message}");
}

/// The running nodes, shared by the block producers and the control surface.
struct Nodes {
    /// `None` once stopped: a payment then fails instead of waiting.
    anvil: RwLock<Option<AnvilNode>>,
    usdt_eth: String,
    usdc_eth: String,
    tron: TronNode,
    usdt_tron: TronContract,
    tron_genesis_ms: i64,
    solana: Mutex<SolanaNode>,
}

impl Nodes {
    fn solana(&self) -> std::sync::MutexGuard<'_, SolanaNode> {
        self.solana.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn run(options: Options) -> Result<(), String> {
    // Tron blocks sit on 3-second slots of wall-clock time from genesis on.
    let now = now_ms();
    let tron_genesis_ms = now - now.rem_euclid(BLOCK_INTERVAL_MS);

    say("starting anvil");
    let anvil = AnvilNode::start(AnvilOptions {
        block_time: Some(1),
        extra_args: vec!["--slots-in-an-epoch".into(), ANVIL_SLOTS_PER_EPOCH.into()],
        ..AnvilOptions::default()
    })
    .await
    .map_err(|e| format!("anvil: {e}"))?;
    // From here on anvil runs: every way out below goes through `shutdown`.
    let started = start_rest(anvil, tron_genesis_ms, &options).await;
    let (nodes, mut tasks, control_port) = match started {
        Ok(s) => s,
        Err((anvil, e)) => {
            drop(anvil);
            return Err(e);
        }
    };
    let env = env_text(&nodes, control_port).await;
    if let Some(path) = &options.env_file {
        if let Err(e) = write_whole(path, &env) {
            shutdown(&nodes, &mut tasks).await;
            return Err(format!("writing {}: {e}", path.display()));
        }
        say(&format!("ready; endpoints in {}", path.display()));
    } else {
        print!("{env}");
        say("ready");
    }

    let reason = wait_for_stop(options.exit_with).await;
    say(&format!("{reason}; stopping"));
    if let Some(path) = &options.env_file {
        let _ = std::fs::remove_file(path);
    }
    shutdown(&nodes, &mut tasks).await;
    say("stopped");
    Ok(())
}

type Started = (Arc<Nodes>, JoinSet<()>, u16);

/// Deploys the tokens, starts the other nodes, the block producers and the
/// control surface. On failure anvil is handed back to be stopped.
async fn start_rest(
    anvil: AnvilNode,
    tron_genesis_ms: i64,
    options: &Options,
) -> Result<Started, (AnvilNode, String)> {
    let usdt_eth = match anvil.deploy_token("Tether USD", "USDT", TOKEN_SUPPLY).await {
        Ok(a) => a,
        Err(e) => return Err((anvil, format!("deploying USDT on anvil: {e}"))),
    };
    let usdc_eth = match anvil.deploy_token("USD Coin", "USDC", TOKEN_SUPPLY).await {
        Ok(a) => a,
        Err(e) => return Err((anvil, format!("deploying USDC on anvil: {e}"))),
    };
    say(&format!(
        "anvil at {}: USDT {usdt_eth}, USDC {usdc_eth}",
        anvil.url()
    ));

    let tron = match TronNode::start(TronNodeOptions {
        solidity_lag: TRON_SOLIDITY_LAG,
        genesis_number: 0,
        genesis_timestamp_ms: Some(tron_genesis_ms),
        ..TronNodeOptions::default()
    })
    .await
    {
        Ok(t) => t,
        Err(e) => return Err((anvil, format!("Tron test node: {e}"))),
    };
    let usdt_tron = match tron.deploy_trc20_at("Tether USD", TRON_USDT) {
        Ok(c) => c,
        Err(e) => return Err((anvil, format!("deploying USDT on Tron: {e}"))),
    };
    say(&format!(
        "Tron test node at {} (solidity {}): USDT {}",
        tron.url(),
        tron.solidity_url(),
        usdt_tron.address()
    ));

    let solana = match SolanaNode::start(SolanaNodeOptions {
        confirmed_lag: SOLANA_CONFIRMED_LAG,
        finalized_lag: SOLANA_FINALIZED_LAG,
        dev_accounts: 4,
        dev_balance: 1_000 * LAMPORTS_PER_SOL,
    })
    .await
    {
        Ok(s) => s,
        Err(e) => return Err((anvil, format!("Solana test node: {e}"))),
    };
    say(&format!("Solana test node at {}", solana.url()));

    let listener = match TcpListener::bind(("127.0.0.1", options.control_port)).await {
        Ok(l) => l,
        Err(e) => {
            return Err((
                anvil,
                format!("control surface on 127.0.0.1:{}: {e}", options.control_port),
            ))
        }
    };
    let control_port = match listener.local_addr() {
        Ok(a) => a.port(),
        Err(e) => return Err((anvil, format!("control surface: {e}"))),
    };

    let nodes = Arc::new(Nodes {
        anvil: RwLock::new(Some(anvil)),
        usdt_eth,
        usdc_eth,
        tron,
        usdt_tron,
        tron_genesis_ms,
        solana: Mutex::new(solana),
    });
    let mut tasks = JoinSet::new();
    tasks.spawn(produce_tron_blocks(nodes.clone()));
    tasks.spawn(produce_solana_blocks(nodes.clone()));
    tasks.spawn(serve_control(listener, nodes.clone()));
    say(&format!(
        "control surface at http://127.0.0.1:{control_port}"
    ));
    Ok((nodes, tasks, control_port))
}

/// Stops the producers and the control surface, then anvil (the Tron and
/// Solana nodes are tasks of this process and end with it).
async fn shutdown(nodes: &Nodes, tasks: &mut JoinSet<()>) {
    tasks.shutdown().await;
    let anvil = nodes.anvil.write().await.take();
    if let Some(mut anvil) = anvil {
        if let Err(e) = anvil.stop().await {
            say(&format!("anvil: {e}"));
        }
    }
}

/// What ended the run: a signal, or the exit of the watched process.
async fn wait_for_stop(exit_with: Option<u32>) -> String {
    let parent_gone = async move {
        match exit_with {
            Some(pid) => {
                let proc_dir = PathBuf::from(format!("/proc/{pid}"));
                while proc_dir.exists() {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                format!("process {pid} exited")
            }
            None => std::future::pending().await,
        }
    };
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(e) => {
            say(&format!("cannot listen for SIGTERM: {e}"));
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT".to_owned();
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT".to_owned(),
        _ = term.recv() => "SIGTERM".to_owned(),
        gone = parent_gone => gone,
    }
}

/// A Tron block whenever the next 3-second slot has come, so block times
/// follow the wall clock.
async fn produce_tron_blocks(nodes: Arc<Nodes>) {
    loop {
        let due = nodes.tron_genesis_ms.saturating_add(
            i64::try_from(nodes.tron.tip().saturating_add(1))
                .unwrap_or(i64::MAX)
                .saturating_mul(BLOCK_INTERVAL_MS),
        );
        let wait = due.saturating_sub(now_ms());
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
            continue;
        }
        if let Err(e) = nodes.tron.mine(1) {
            say(&format!("Tron block not made: {e}"));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

async fn produce_solana_blocks(nodes: Arc<Nodes>) {
    let mut every = tokio::time::interval(Duration::from_millis(SOLANA_SLOT_MS));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        nodes.solana().produce_block();
    }
}

async fn env_text(nodes: &Nodes, control_port: u16) -> String {
    let (eth_url, eth_ws) = match &*nodes.anvil.read().await {
        Some(a) => (a.url(), a.ws_url()),
        None => (String::new(), String::new()),
    };
    let solana_url = nodes.solana().url();
    let lines = [
        ("DEVNODES_PID", std::process::id().to_string()),
        (
            "DEVNODES_CONTROL_URL",
            format!("http://127.0.0.1:{control_port}"),
        ),
        ("ETHEREUM_RPC_URL", eth_url),
        ("ETHEREUM_WS_URL", eth_ws),
        ("ETHEREUM_CHAIN_ID", CHAIN_ID.to_string()),
        ("ETHEREUM_USDT", nodes.usdt_eth.clone()),
        ("ETHEREUM_USDC", nodes.usdc_eth.clone()),
        ("ETHEREUM_ACCOUNT_KEY", account_xpub(60)),
        ("TRON_RPC_URL", nodes.tron.url()),
        ("TRON_SOLIDITY_URL", nodes.tron.solidity_url()),
        ("TRON_USDT", nodes.usdt_tron.address().to_owned()),
        ("TRON_ACCOUNT_KEY", account_xpub(195)),
        ("SOLANA_RPC_URL", solana_url),
    ];
    let mut out =
        String::from("# Written by paywatch-devnodes while it runs; removed when it stops.\n");
    for (name, value) in lines {
        out.push_str(&format!("{name}={value}\n"));
    }
    out
}

/// Writes `text` to a sibling file, then renames it over `path`: a reader
/// sees no file or all of it.
fn write_whole(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// A dev-only BIP44 account key m/44'/coin'/0' of a fixed seed, for
/// paywatch's `account_key`: addresses derived from it are fresh and valid.
fn account_xpub(coin: u32) -> String {
    let secp = Secp256k1::new();
    let seed = sha256(format!("paywatch devnet account seed {coin}").as_bytes());
    let derived = Xpriv::new_master(bitcoin::NetworkKind::Main, &seed).and_then(|master| {
        let path: DerivationPath = [44, coin, 0]
            .into_iter()
            .map(ChildNumber::from_hardened_idx)
            .collect::<Result<Vec<_>, _>>()?
            .into();
        master.derive_priv(&secp, &path)
    });
    match derived {
        Ok(key) => Xpub::from_priv(&secp, &key).to_string(),
        // Only for a seed whose key is out of range (≈2⁻¹²⁸): paywatch then
        // says the key is missing, which names the setting.
        Err(e) => {
            say(&format!("deriving the m/44'/{coin}'/0' key: {e}"));
            String::new()
        }
    }
}

/// Pool address `i`: a fixed key, none of [`SolanaNode::dev`]'s.
fn solana_pool_key(i: u32) -> Keypair {
    Keypair::new_from_array(sha256(
        format!("paywatch devnet solana pool {i}").as_bytes(),
    ))
}

/// `count` distinct ports free on 127.0.0.1 now (all bound at once, then
/// let go), for a node this process does not start.
fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

// --- control surface -------------------------------------------------------

async fn serve_control(listener: TcpListener, nodes: Arc<Nodes>) {
    let mut connections = JoinSet::new();
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                connections.spawn(answer(sock, nodes.clone()));
            }
            Err(e) => {
                say(&format!("control surface: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // Reap finished connections so the set does not grow.
        while connections.try_join_next().is_some() {}
    }
}

/// One request per connection (`connection: close`).
async fn answer(sock: TcpStream, nodes: Arc<Nodes>) {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    let (status, body) = match read_request(&mut r).await {
        Ok((method, path, body)) => route(&nodes, &method, &path, &body).await,
        Err(e) => (400, json!({ "error": e })),
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Bad Gateway",
    };
    let out = format!("{body}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        out.len()
    );
    let _ = w.write_all(head.as_bytes()).await;
    let _ = w.write_all(out.as_bytes()).await;
    let _ = w.shutdown().await;
}

async fn read_request<R: AsyncBufReadExt + AsyncReadExt + Unpin>(
    r: &mut R,
) -> Result<(String, String, Vec<u8>), String> {
    let mut line = String::new();
    r.read_line(&mut line)
        .await
        .map_err(|e| format!("reading the request: {e}"))?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Err("not an HTTP request".to_owned());
    };
    let (method, path) = (method.to_owned(), path.to_owned());
    let mut len = 0usize;
    let mut head_bytes = 0usize;
    loop {
        line.clear();
        let n = r
            .read_line(&mut line)
            .await
            .map_err(|e| format!("reading the headers: {e}"))?;
        head_bytes += n;
        if n == 0 || head_bytes > MAX_REQUEST_BYTES {
            return Err("incomplete or oversized headers".to_owned());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v
                    .trim()
                    .parse()
                    .map_err(|_| "bad content-length".to_owned())?;
            }
        }
    }
    if len > MAX_REQUEST_BYTES {
        return Err("body too large".to_owned());
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .await
        .map_err(|e| format!("reading the body: {e}"))?;
    Ok((method, path, body))
}

async fn route(nodes: &Nodes, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    match (method, path) {
        ("GET", "/health") => {
            let eth_tip = match &*nodes.anvil.read().await {
                Some(a) => a.block_number().await.ok(),
                None => None,
            };
            let (processed, confirmed, finalized) = nodes.solana().slots();
            (
                200,
                json!({
                    "ethereum": { "tip": eth_tip },
                    "tron": { "tip": nodes.tron.tip(), "solidified": nodes.tron.solidified() },
                    "solana": { "processed": processed, "confirmed": confirmed, "finalized": finalized },
                }),
            )
        }
        ("POST", "/pay") => match pay(nodes, body).await {
            Ok(txid) => (200, json!({ "txid": txid })),
            Err(PayError::Request(e)) => (400, json!({ "error": e })),
            Err(PayError::Node(e)) => (502, json!({ "error": e })),
        },
        _ => (
            404,
            json!({ "error": "GET /health or POST /pay {network, asset, to, amount}" }),
        ),
    }
}

#[derive(Debug)]
enum PayError {
    /// The request is wrong (400).
    Request(String),
    /// The node refused or failed (502).
    Node(String),
}

/// Sends `amount` base units of `asset` on `network` to `to` from a funded
/// dev account; the next block holds it.
async fn pay(nodes: &Nodes, body: &[u8]) -> Result<String, PayError> {
    let bad = |m: String| PayError::Request(m);
    let req: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("body is not JSON: {e}")))?;
    let field = |name: &str| -> Result<String, PayError> {
        match req.get(name) {
            Some(Value::String(s)) => Ok(s.trim().to_owned()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            _ => Err(PayError::Request(format!("missing field {name:?}"))),
        }
    };
    let network = field("network")?.to_ascii_lowercase();
    let asset = field("asset")?.to_ascii_uppercase();
    let to = field("to")?;
    let amount_text = field("amount")?;
    let amount: u128 = amount_text.parse().map_err(|_| {
        bad(format!(
            "amount {amount_text:?}: an integer in base units (wei, sun, lamports, token units)"
        ))
    })?;
    if amount == 0 {
        return Err(bad("amount must be above 0".to_owned()));
    }
    let small =
        |what: &str| u64::try_from(amount).map_err(|_| bad(format!("amount too large for {what}")));
    let node_err = |e: &dyn std::fmt::Display| PayError::Node(e.to_string());
    let txid = match (network.as_str(), asset.as_str()) {
        ("ethereum", "ETH" | "USDT" | "USDC") => {
            let guard = nodes.anvil.read().await;
            let anvil = guard
                .as_ref()
                .ok_or_else(|| PayError::Node("anvil is stopped".to_owned()))?;
            match asset.as_str() {
                "ETH" => anvil.send_eth(ACCOUNTS[1], &to, amount).await,
                "USDT" => {
                    anvil
                        .token_transfer(&nodes.usdt_eth, ACCOUNTS[0], &to, amount)
                        .await
                }
                _ => {
                    anvil
                        .token_transfer(&nodes.usdc_eth, ACCOUNTS[0], &to, amount)
                        .await
                }
            }
            .map_err(|e| node_err(&e))?
        }
        ("tron", "TRX") => nodes
            .tron
            .send_trx(&TronAccount::dev(1), &to, small("TRX")?)
            .map_err(|e| node_err(&e))?
            .to_hex(),
        ("tron", "USDT") => nodes
            .tron
            .trc20_transfer(&nodes.usdt_tron, &TronAccount::dev(1), &to, amount)
            .map_err(|e| node_err(&e))?
            .to_hex(),
        ("solana", "SOL") => {
            let to = Address::from_str(&to)
                .map_err(|e| bad(format!("{to:?} is not a Solana address: {e}")))?;
            let lamports = small("SOL")?;
            nodes
                .solana()
                .send_sol(&SolanaNode::dev(1), &to, lamports)
                .map_err(|e| node_err(&e))?
                .to_string()
        }
        _ => {
            return Err(bad(format!(
                "no dev chain pays {asset} on {network}: ETH, USDT or USDC on ethereum, TRX or USDT on tron, SOL on solana"
            )))
        }
    };
    say(&format!(
        "paid {amount} {asset} on {network} to {to}: {txid}"
    ));
    Ok(txid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_keys_are_fixed_distinct_and_not_dev_accounts() {
        let a = solana_pool_key(0).pubkey();
        assert_eq!(a, solana_pool_key(0).pubkey());
        assert_ne!(a, solana_pool_key(1).pubkey());
        for i in 0..10 {
            assert_ne!(a, SolanaNode::dev(i).pubkey());
        }
    }

    #[test]
    fn account_keys_are_xpubs() {
        let eth = account_xpub(60);
        assert!(eth.starts_with("xpub"), "{eth}");
        assert_ne!(eth, account_xpub(195));
    }

    #[test]
    fn options_parse() {
        let args: Vec<String> = [
            "--env-file",
            "/tmp/x.env",
            "--control-port",
            "7",
            "--exit-with",
            "9",
        ]
        .map(String::from)
        .to_vec();
        let o = Options::parse(&args).unwrap();
        assert_eq!(o.env_file.as_deref(), Some(Path::new("/tmp/x.env")));
        assert_eq!((o.control_port, o.exit_with), (7, Some(9)));
        assert!(Options::parse(&["--bogus".to_owned()]).is_err());
        assert!(Options::parse(&["--env-file".to_owned()]).is_err());
    }
}

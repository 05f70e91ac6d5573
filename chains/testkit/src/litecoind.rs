//! A real Litecoin Core node on regtest, owned by a test.
//!
//! [`LitecoinNode::start`] runs `litecoind` as a child process (foreground,
//! not `-daemon`) on free 127.0.0.1 ports with its own temporary datadir,
//! creates the wallet `w` and mines 101 blocks to it so it has coins to
//! spend. Dropping the node kills the process and removes the datadir.
//!
//! The binary is `$PAYWATCH_LITECOIND`, else `/usr/lib/litecoin/litecoind`
//! (Debian's `/usr/bin/litecoind` is only a wrapper around it). Install it
//! with `bash deploy/install-nodes.sh`.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

/// Environment variable naming the `litecoind` binary to run.
pub const LITECOIND_ENV: &str = "PAYWATCH_LITECOIND";
/// Where Debian's `litecoind` package puts the real binary.
pub const DEFAULT_LITECOIND: &str = "/usr/lib/litecoin/litecoind";
/// What to run to install the nodes the harness starts.
pub const INSTALL_HINT: &str = "bash deploy/install-nodes.sh";

/// The wallet the harness creates and keeps loaded.
pub const WALLET: &str = "w";
/// RPC user and password of a node started with [`Auth::UserPassword`].
pub const RPC_USER: &str = "paywatch";
/// See [`RPC_USER`].
pub const RPC_PASSWORD: &str = "paywatch";

const RPC_READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const RPC_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
const START_ATTEMPTS: u32 = 3;
const LOG_TAIL_LINES: usize = 20;

/// Everything that can go wrong in the harness, with enough said to act on.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A node binary is not installed (or not where it was looked for).
    #[error("{what} not found at {path}{why}; install it with `{INSTALL_HINT}` (or set {env} to its path)")]
    MissingBinary {
        /// "litecoind" or "electrumx_server".
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// The environment variable that overrides the path.
        env: &'static str,
        /// Extra detail, e.g. " (from PAYWATCH_LITECOIND)"; may be empty.
        why: String,
    },
    /// The process did not come up; the log tail says why.
    #[error("{what} did not start: {reason}\n--- last lines of its logs ---\n{log_tail}")]
    Start {
        /// Which server.
        what: &'static str,
        /// What went wrong.
        reason: String,
        /// The last lines of its log files.
        log_tail: String,
    },
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The node could not be reached over HTTP, or answered something that
    /// is not JSON-RPC.
    #[error("litecoind RPC {method}: {detail}")]
    Transport {
        /// The RPC method.
        method: String,
        /// What went wrong.
        detail: String,
    },
    /// The node answered the RPC with an error.
    #[error("litecoind RPC {method} failed: {message} (code {code})")]
    Rpc {
        /// The RPC method.
        method: String,
        /// The JSON-RPC error code (e.g. -5 invalid address, -28 warming up).
        code: i64,
        /// The node's message.
        message: String,
    },
    /// The ElectrumX server answered with an error or could not be reached.
    #[error("ElectrumX {method}: {detail}")]
    Electrum {
        /// The Electrum method.
        method: String,
        /// The error object, or what went wrong.
        detail: String,
    },
    /// An answer did not have the expected shape.
    #[error("unexpected answer to {method}: {detail}")]
    Unexpected {
        /// The method that was called.
        method: String,
        /// What was wrong with the answer.
        detail: String,
    },
    /// A wait ran out of time.
    #[error("timed out after {waited:?}: {detail}")]
    Timeout {
        /// How long the harness waited.
        waited: Duration,
        /// What it waited for and how far it got.
        detail: String,
    },
    /// An amount was not a plain decimal string such as "1.5".
    #[error(
        "invalid amount {0:?}: expected a plain decimal with at most 8 decimals, e.g. \"1.5\""
    )]
    InvalidAmount(String),
    /// The node was asked for something while it is not running.
    #[error("{0} is not running (call start_again)")]
    NotRunning(&'static str),
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> HarnessError {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }

    fn unexpected(method: &str, detail: impl Into<String>) -> HarnessError {
        HarnessError::Unexpected {
            method: method.to_owned(),
            detail: detail.into(),
        }
    }
}

/// How the harness (and clients) authenticate to the node's RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Auth {
    /// `-rpcuser=paywatch -rpcpassword=paywatch` ([`RPC_USER`], [`RPC_PASSWORD`]).
    #[default]
    UserPassword,
    /// No `-rpcuser`: the node writes `regtest/.cookie` in its datadir (a new
    /// one on every start) and the harness authenticates with it.
    Cookie,
}

/// How to start a [`LitecoinNode`].
#[derive(Debug, Clone, Default)]
pub struct NodeOptions {
    /// Let MWEB activate (by itself at regtest height 432). When false (the
    /// default) the node runs with `-vbparams=mweb:-2:0`, which keeps MWEB
    /// off for good; use that for reorg tests.
    pub mweb: bool,
    /// RPC authentication.
    pub auth: Auth,
    /// More `litecoind` arguments, e.g. `-blocknotify=...`.
    pub extra_args: Vec<String>,
}

/// A running regtest `litecoind` with a funded wallet `w`.
#[derive(Debug)]
pub struct LitecoinNode {
    binary: PathBuf,
    options: NodeOptions,
    rpc_port: u16,
    p2p_port: u16,
    user: String,
    password: String,
    mining_address: String,
    client: reqwest::Client,
    next_id: AtomicU64,
    child: Option<Child>,
    /// Holds `datadir/` and `litecoind.out`; removed on drop, after the kill.
    dir: TempDir,
    datadir: PathBuf,
}

impl LitecoinNode {
    /// Starts a node, waits for its RPC, creates wallet `w` and mines 101
    /// blocks to it (so 50 LTC are spendable).
    pub async fn start(opts: NodeOptions) -> Result<LitecoinNode, HarnessError> {
        let binary = litecoind_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("paywatch-litecoind-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temporary datadir", e))?;
        let datadir = dir.path().join("datadir");
        fs::create_dir(&datadir)
            .map_err(|e| HarnessError::io(format!("creating {}", datadir.display()), e))?;
        let client = reqwest::Client::builder()
            .timeout(RPC_REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            // litecoind 0.21's `stop` waits until every HTTP connection is
            // closed: keep none open between calls.
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| HarnessError::Transport {
                method: "(client)".into(),
                detail: e.to_string(),
            })?;
        let mut node = LitecoinNode {
            binary,
            options: opts,
            rpc_port: 0,
            p2p_port: 0,
            user: String::new(),
            password: String::new(),
            mining_address: String::new(),
            client,
            next_id: AtomicU64::new(1),
            child: None,
            dir,
            datadir,
        };

        // Free ports are picked by binding port 0 and letting go, so another
        // process may take one before litecoind binds it: then try new ones.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let ports = free_ports(2)?;
            node.rpc_port = ports[0];
            node.p2p_port = ports[1];
            match node.launch().await {
                Ok(()) => break,
                Err(HarnessError::Start { log_tail, .. })
                    if attempt < START_ATTEMPTS && is_bind_failure(&log_tail) =>
                {
                    node.reap();
                    let _ = fs::remove_file(node.dir.path().join("litecoind.out"));
                    let _ = fs::remove_dir_all(&node.datadir);
                    fs::create_dir(&node.datadir).map_err(|e| {
                        HarnessError::io(format!("creating {}", node.datadir.display()), e)
                    })?;
                }
                Err(e) => return Err(e),
            }
        }

        node.rpc(
            "createwallet",
            json!({ "wallet_name": WALLET, "load_on_startup": true }),
        )
        .await?;
        node.mining_address = node.new_address().await?;
        node.mine(101).await?;
        Ok(node)
    }

    // --- accessors -------------------------------------------------------

    /// `http://127.0.0.1:PORT`, the node's JSON-RPC endpoint.
    pub fn rpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.rpc_port)
    }

    /// The RPC port.
    pub fn rpc_port(&self) -> u16 {
        self.rpc_port
    }

    /// The P2P port (listening on 127.0.0.1 only).
    pub fn p2p_port(&self) -> u16 {
        self.p2p_port
    }

    /// The RPC user: [`RPC_USER`], or `__cookie__` with [`Auth::Cookie`].
    pub fn rpc_user(&self) -> &str {
        &self.user
    }

    /// The RPC password: [`RPC_PASSWORD`], or the current cookie's secret
    /// with [`Auth::Cookie`] (it changes on every (re)start).
    pub fn rpc_password(&self) -> &str {
        &self.password
    }

    /// How the node authenticates RPC clients.
    pub fn auth(&self) -> Auth {
        self.options.auth
    }

    /// The options the node was started with.
    pub fn options(&self) -> &NodeOptions {
        &self.options
    }

    /// `DATADIR/regtest/.cookie`; it exists only with [`Auth::Cookie`],
    /// while the node runs.
    pub fn cookie_file(&self) -> PathBuf {
        self.datadir.join("regtest").join(".cookie")
    }

    /// The node's `-datadir`.
    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    /// The node's own log, `DATADIR/regtest/debug.log`.
    pub fn debug_log(&self) -> PathBuf {
        self.datadir.join("regtest").join("debug.log")
    }

    /// The wallet address [`mine`](Self::mine) pays to.
    pub fn mining_address(&self) -> &str {
        &self.mining_address
    }

    /// The last lines of the node's logs (stdout/stderr and debug.log).
    pub fn log_tail(&self) -> String {
        let mut out = tail_of(&self.dir.path().join("litecoind.out"), LOG_TAIL_LINES);
        out.push_str(&tail_of(&self.debug_log(), LOG_TAIL_LINES));
        out
    }

    // --- RPC -------------------------------------------------------------

    /// Calls `method` with `params` (an array, or an object for named
    /// parameters) and returns its `result`.
    pub async fn rpc(&self, method: &str, params: Value) -> Result<Value, HarnessError> {
        let params = serde_json::to_string(&params).map_err(|e| HarnessError::Transport {
            method: method.to_owned(),
            detail: format!("cannot encode params: {e}"),
        })?;
        self.rpc_raw(method, &params).await
    }

    /// Like [`rpc`](Self::rpc), with `params` as JSON text sent verbatim, so
    /// amounts such as `1.50000001` reach the node exactly as written.
    pub async fn rpc_raw(&self, method: &str, params_json: &str) -> Result<Value, HarnessError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let method_json = serde_json::to_string(method).unwrap_or_default();
        let body = format!(
            r#"{{"jsonrpc":"1.0","id":{id},"method":{method_json},"params":{params_json}}}"#
        );
        let transport = |detail: String| HarnessError::Transport {
            method: method.to_owned(),
            detail,
        };
        let response = self
            .client
            // Always through wallet `w`'s path: once paywatch adds a wallet
            // of its own, a wallet call without one is refused.
            .post(format!("{}/wallet/{WALLET}", self.rpc_url()))
            .basic_auth(&self.user, Some(&self.password))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| transport(format!("{} ({})", e, self.rpc_url())))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| transport(format!("reading the answer: {e}")))?;
        let reply: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(_) => {
                return Err(transport(format!(
                    "HTTP {status}{}",
                    if text.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", text.trim())
                    }
                )))
            }
        };
        match reply.get("error") {
            Some(Value::Null) | None => {}
            Some(err) => {
                return Err(HarnessError::Rpc {
                    method: method.to_owned(),
                    code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: err
                        .get("message")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .unwrap_or_else(|| err.to_string()),
                })
            }
        }
        reply
            .get("result")
            .cloned()
            .ok_or_else(|| transport(format!("HTTP {status}, no result in {text}")))
    }

    /// A new bech32 wallet address (`rltc1q…`).
    pub async fn new_address(&self) -> Result<String, HarnessError> {
        let v = self.rpc("getnewaddress", json!(["", "bech32"])).await?;
        as_string("getnewaddress", v)
    }

    /// `count` new bech32 wallet addresses, in one batch.
    pub async fn new_addresses(&self, count: usize) -> Result<Vec<String>, HarnessError> {
        self.rpc_batch("getnewaddress", &vec![r#"["","bech32"]"#.to_owned(); count])
            .await?
            .into_iter()
            .map(|v| as_string("getnewaddress", v))
            .collect()
    }

    /// A new MWEB wallet address (`tmweb1…`).
    pub async fn new_mweb_address(&self) -> Result<String, HarnessError> {
        let v = self.rpc("getnewaddress", json!(["", "mweb"])).await?;
        as_string("getnewaddress", v)
    }

    /// Pays `amount` LTC (a decimal string, e.g. `"1.5"`) from the wallet to
    /// `address`; returns the txid. The amount is sent as a JSON number
    /// written exactly as given (never through a float).
    pub async fn send(&self, address: &str, amount: &str) -> Result<String, HarnessError> {
        check_amount(amount)?;
        let address_json = serde_json::to_string(address).unwrap_or_default();
        let v = self
            .rpc_raw("sendtoaddress", &format!("[{address_json},{amount}]"))
            .await?;
        as_string("sendtoaddress", v)
    }

    /// Mines `n` blocks to the wallet (mempool transactions included);
    /// returns their hashes, oldest first.
    ///
    /// On an MWEB node ([`NodeOptions::mweb`]) the activation block (regtest
    /// height 432) cannot be mined without a peg-in in the mempool: when
    /// `generatetoaddress` fails for that reason, this pays 1 LTC to a new
    /// MWEB address of the wallet and goes on (once).
    pub async fn mine(&self, n: u64) -> Result<Vec<String>, HarnessError> {
        let mut hashes: Vec<String> = Vec::new();
        let mut pegged_in = false;
        while (hashes.len() as u64) < n {
            let remaining = n - hashes.len() as u64;
            let before = if self.options.mweb {
                self.block_count().await?
            } else {
                0
            };
            match self
                .rpc("generatetoaddress", json!([remaining, self.mining_address]))
                .await
            {
                Ok(v) => {
                    let list = v.as_array().ok_or_else(|| {
                        HarnessError::unexpected("generatetoaddress", v.to_string())
                    })?;
                    for h in list {
                        hashes.push(as_string("generatetoaddress", h.clone())?);
                    }
                    if list.is_empty() {
                        return Err(HarnessError::unexpected(
                            "generatetoaddress",
                            "no block mined",
                        ));
                    }
                }
                Err(HarnessError::Rpc { message, .. })
                    if self.options.mweb
                        && !pegged_in
                        && message.contains("bad-txns-vin-empty") =>
                {
                    // The blocks before the activation block were mined.
                    let now = self.block_count().await?;
                    for height in before + 1..=now {
                        hashes.push(self.block_hash(height).await?);
                    }
                    let pegin = self.new_mweb_address().await?;
                    self.send(&pegin, "1").await?;
                    pegged_in = true;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(hashes)
    }

    /// Mines one block with no transactions but the coinbase (mempool
    /// transactions stay there); returns its hash. Not possible once MWEB
    /// is active (litecoind fails an internal check).
    pub async fn mine_empty(&self) -> Result<String, HarnessError> {
        let v = self
            .rpc("generateblock", json!([self.mining_address, []]))
            .await?;
        match v.get("hash") {
            Some(h) => as_string("generateblock", h.clone()),
            None => Err(HarnessError::unexpected("generateblock", v.to_string())),
        }
    }

    /// The tip's hash.
    pub async fn best_hash(&self) -> Result<String, HarnessError> {
        let v = self.rpc("getbestblockhash", json!([])).await?;
        as_string("getbestblockhash", v)
    }

    /// The tip's height.
    pub async fn block_count(&self) -> Result<u64, HarnessError> {
        let v = self.rpc("getblockcount", json!([])).await?;
        v.as_u64()
            .ok_or_else(|| HarnessError::unexpected("getblockcount", v.to_string()))
    }

    /// The hash of the active chain's block at `height`.
    pub async fn block_hash(&self, height: u64) -> Result<String, HarnessError> {
        let v = self.rpc("getblockhash", json!([height])).await?;
        as_string("getblockhash", v)
    }

    /// `invalidateblock`: drops `hash` and its descendants from the active
    /// chain; their transactions go back to the mempool.
    pub async fn invalidate(&self, hash: &str) -> Result<(), HarnessError> {
        self.rpc("invalidateblock", json!([hash])).await.map(drop)
    }

    /// `reconsiderblock`: undoes [`invalidate`](Self::invalidate).
    pub async fn reconsider(&self, hash: &str) -> Result<(), HarnessError> {
        self.rpc("reconsiderblock", json!([hash])).await.map(drop)
    }

    /// The block's serialized bytes (`getblock HASH 0`).
    pub async fn raw_block(&self, hash: &str) -> Result<Vec<u8>, HarnessError> {
        let v = self.rpc("getblock", json!([hash, 0])).await?;
        let hex = as_string("getblock", v)?;
        decode_hex(&hex).ok_or_else(|| HarnessError::unexpected("getblock", "not hex"))
    }

    /// The txids in the mempool.
    pub async fn mempool(&self) -> Result<Vec<String>, HarnessError> {
        let v = self.rpc("getrawmempool", json!([])).await?;
        let list = v
            .as_array()
            .ok_or_else(|| HarnessError::unexpected("getrawmempool", v.to_string()))?;
        list.iter()
            .map(|t| as_string("getrawmempool", t.clone()))
            .collect()
    }

    /// One JSON-RPC batch of `method`, each call's params written as JSON
    /// text (amounts exactly as written); every call must succeed.
    pub async fn rpc_batch(
        &self,
        method: &str,
        params: &[String],
    ) -> Result<Vec<Value>, HarnessError> {
        if params.is_empty() {
            return Ok(Vec::new());
        }
        let method_json = serde_json::to_string(method).unwrap_or_default();
        let calls: Vec<String> = params
            .iter()
            .enumerate()
            .map(|(id, p)| {
                format!(r#"{{"jsonrpc":"1.0","id":{id},"method":{method_json},"params":{p}}}"#)
            })
            .collect();
        let transport = |detail: String| HarnessError::Transport {
            method: method.to_owned(),
            detail,
        };
        let answers: Vec<Value> = self
            .client
            .post(format!("{}/wallet/{WALLET}", self.rpc_url()))
            .basic_auth(&self.user, Some(&self.password))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(format!("[{}]", calls.join(",")))
            .send()
            .await
            .map_err(|e| transport(e.to_string()))?
            .json()
            .await
            .map_err(|e| transport(format!("reading the answer: {e}")))?;
        answers
            .into_iter()
            .map(|a| match a.get("error") {
                Some(e) if !e.is_null() => Err(HarnessError::unexpected(method, e.to_string())),
                _ => Ok(a.get("result").cloned().unwrap_or(Value::Null)),
            })
            .collect()
    }

    /// Leaves `count` transactions waiting in the mempool, none paying an
    /// address outside the wallet: a fan-out of the wallet's coins is mined
    /// (one block), then each of its outputs is spent alone.
    pub async fn fill_mempool(&self, count: usize) -> Result<(), HarnessError> {
        const FAN: usize = 1_000;
        let addresses = self.new_addresses(FAN).await?;
        let outputs = addresses
            .iter()
            .map(|a| format!(r#""{a}":0.01"#))
            .collect::<Vec<_>>()
            .join(",");
        for _ in 0..count.div_ceil(FAN) {
            self.rpc_raw("sendmany", &format!(r#"["",{{{outputs}}}]"#))
                .await?;
        }
        self.mine(1).await?;
        let listed = serde_json::to_string(&addresses).unwrap_or_default();
        let coins = self
            .rpc_raw("listunspent", &format!("[1,9999999,{listed}]"))
            .await?;
        let coins = coins
            .as_array()
            .ok_or_else(|| HarnessError::unexpected("listunspent", coins.to_string()))?;
        let to = self.new_address().await?;
        for chunk in coins.iter().take(count).collect::<Vec<_>>().chunks(500) {
            let raw = self
                .rpc_batch(
                    "createrawtransaction",
                    &chunk
                        .iter()
                        .map(|c| {
                            format!(
                                r#"[[{{"txid":{},"vout":{}}}],[{{"{to}":0.0099}}]]"#,
                                c["txid"], c["vout"]
                            )
                        })
                        .collect::<Vec<_>>(),
                )
                .await?;
            let signed = self
                .rpc_batch(
                    "signrawtransactionwithwallet",
                    &raw.iter().map(|r| format!("[{r}]")).collect::<Vec<_>>(),
                )
                .await?;
            self.rpc_batch(
                "sendrawtransaction",
                &signed
                    .iter()
                    .map(|s| format!("[{}]", s["hex"]))
                    .collect::<Vec<_>>(),
            )
            .await?;
        }
        let waiting = self.mempool().await?.len();
        if waiting < count {
            return Err(HarnessError::unexpected(
                "fill_mempool",
                format!("only {waiting} transactions in the mempool, not {count}"),
            ));
        }
        Ok(())
    }

    /// The scriptPubKey `address` pays to (`validateaddress`).
    pub async fn script_pubkey(&self, address: &str) -> Result<Vec<u8>, HarnessError> {
        let v = self.rpc("validateaddress", json!([address])).await?;
        if v.get("isvalid") != Some(&Value::Bool(true)) {
            return Err(HarnessError::unexpected(
                "validateaddress",
                format!("{address} is not a valid regtest address: {v}"),
            ));
        }
        let hex = v
            .get("scriptPubKey")
            .and_then(Value::as_str)
            .ok_or_else(|| HarnessError::unexpected("validateaddress", v.to_string()))?;
        decode_hex(hex).ok_or_else(|| HarnessError::unexpected("validateaddress", "not hex"))
    }

    /// Writes the chain state to disk (`gettxoutsetinfo` flushes it), so a
    /// [`kill`](Self::kill) right after loses no blocks.
    pub async fn flush(&self) -> Result<(), HarnessError> {
        self.rpc("gettxoutsetinfo", json!([])).await.map(drop)
    }

    // --- lifecycle -------------------------------------------------------

    /// Whether the process is running (it may have crashed).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the node cleanly (RPC `stop`) and waits for it to exit; kills
    /// it if it has not after 10 s. The datadir is kept.
    pub async fn stop(&mut self) -> Result<(), HarnessError> {
        if !self.is_running() {
            self.reap();
            return Ok(());
        }
        // The node may close the connection before answering: the wait below
        // is what counts.
        let _ = tokio::time::timeout(STOP_TIMEOUT, self.rpc("stop", json!([]))).await;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if !self.is_running() {
                self.reap();
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.reap();
        Ok(())
    }

    /// Kills the node with SIGKILL, as a crash or outage would. The datadir
    /// is kept; [`start_again`](Self::start_again) brings it back.
    ///
    /// Like a real crash, this loses what the node had not flushed: blocks
    /// mined since its last clean start come back *gone* (the tip is lower)
    /// unless [`flush`](Self::flush) was called after them.
    pub fn kill(&mut self) {
        self.reap();
    }

    /// Starts the stopped (or killed) node again: same datadir, ports and
    /// auth; waits for RPC and makes sure wallet `w` is loaded.
    pub async fn start_again(&mut self) -> Result<(), HarnessError> {
        if self.is_running() {
            return Ok(());
        }
        self.reap();
        self.launch().await?;
        let loaded = self.rpc("listwallets", json!([])).await?;
        let has_wallet = loaded
            .as_array()
            .is_some_and(|l| l.iter().any(|w| w.as_str() == Some(WALLET)));
        if !has_wallet {
            match self.rpc("loadwallet", json!([WALLET])).await {
                // -35: already loaded (it came up between the two calls).
                Ok(_) | Err(HarnessError::Rpc { code: -35, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// [`stop`](Self::stop), then [`start_again`](Self::start_again).
    pub async fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop().await?;
        self.start_again().await
    }

    // --- internals -------------------------------------------------------

    fn args(&self) -> Vec<String> {
        let mut args = vec![
            "-regtest".to_owned(),
            format!("-datadir={}", self.datadir.display()),
            "-server=1".to_owned(),
            "-printtoconsole=0".to_owned(),
            format!("-rpcport={}", self.rpc_port),
            "-rpcbind=127.0.0.1".to_owned(),
            "-rpcallowip=127.0.0.1".to_owned(),
            format!("-port={}", self.p2p_port),
            // With no port, -bind takes the chain's default P2P port (19444),
            // which two nodes cannot share.
            format!("-bind=127.0.0.1:{}", self.p2p_port),
            "-listenonion=0".to_owned(),
            "-discover=0".to_owned(),
            "-dnsseed=0".to_owned(),
            "-fallbackfee=0.0001".to_owned(),
            "-txindex=1".to_owned(),
        ];
        if !self.options.mweb {
            args.push("-vbparams=mweb:-2:0".to_owned());
        }
        if self.options.auth == Auth::UserPassword {
            args.push(format!("-rpcuser={RPC_USER}"));
            args.push(format!("-rpcpassword={RPC_PASSWORD}"));
        }
        args.extend(self.options.extra_args.iter().cloned());
        args
    }

    /// Spawns the process and waits until RPC answers.
    async fn launch(&mut self) -> Result<(), HarnessError> {
        let cookie = self.cookie_file();
        if self.options.auth == Auth::Cookie {
            // A killed node leaves its cookie behind: never read a stale one.
            let _ = fs::remove_file(&cookie);
        } else {
            self.user = RPC_USER.to_owned();
            self.password = RPC_PASSWORD.to_owned();
        }
        let (out, err) = open_log(&self.dir.path().join("litecoind.out"))?;
        let child = Command::new(&self.binary)
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| HarnessError::io(format!("running {}", self.binary.display()), e))?;
        self.child = Some(child);

        let started = Instant::now();
        let mut last_error = String::from("no answer yet");
        loop {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(self.start_error(format!("litecoind exited with {status}")));
                }
            }
            if started.elapsed() > RPC_READY_TIMEOUT {
                self.reap();
                return Err(self.start_error(format!(
                    "RPC did not answer within {RPC_READY_TIMEOUT:?} (last: {last_error})"
                )));
            }
            let creds_ready = match self.options.auth {
                Auth::UserPassword => true,
                Auth::Cookie => match read_cookie(&cookie) {
                    Some((user, password)) => {
                        self.user = user;
                        self.password = password;
                        true
                    }
                    None => {
                        last_error = format!("no cookie at {} yet", cookie.display());
                        false
                    }
                },
            };
            if creds_ready {
                match self.rpc("getblockchaininfo", json!([])).await {
                    Ok(_) => return Ok(()),
                    Err(e) => last_error = e.to_string(),
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn start_error(&self, reason: String) -> HarnessError {
        HarnessError::Start {
            what: "litecoind",
            reason,
            log_tail: self.log_tail(),
        }
    }

    /// Kills the process if it runs and waits for it, so no zombie is left
    /// and the datadir is free.
    fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LitecoinNode {
    fn drop(&mut self) {
        // Kill before the TempDir field removes the datadir.
        self.reap();
    }
}

fn litecoind_binary() -> Result<PathBuf, HarnessError> {
    find_binary(
        "litecoind",
        LITECOIND_ENV,
        PathBuf::from(DEFAULT_LITECOIND),
        String::new(),
    )
}

/// `$env` if set, else `default`; an error naming the install script if the
/// file is not there.
pub(crate) fn find_binary(
    what: &'static str,
    env: &'static str,
    default: PathBuf,
    default_why: String,
) -> Result<PathBuf, HarnessError> {
    let (path, why) = match std::env::var_os(env) {
        Some(p) if !p.is_empty() => (PathBuf::from(p), format!(" (from {env})")),
        _ => (default, default_why),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::MissingBinary {
            what,
            path,
            env,
            why,
        })
    }
}

/// `n` distinct free TCP ports on 127.0.0.1 (bound together, then released).
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, HarnessError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| HarnessError::io("finding a free port on 127.0.0.1", e))?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(|e| HarnessError::io("finding a free port on 127.0.0.1", e))
        })
        .collect()
}

pub(crate) fn is_bind_failure(log: &str) -> bool {
    let log = log.to_ascii_lowercase();
    [
        "unable to bind",             // litecoind, P2P port
        "binding rpc on address",     // litecoind, RPC port
        "address already in use",     // both
        "server failed to listen on", // ElectrumX
    ]
    .iter()
    .any(|needle| log.contains(needle))
}

/// The last `n` lines of `path`, headed by its name ("(none)" if missing).
pub(crate) fn tail_of(path: &Path, n: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "[{}]", path.display());
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            for line in &lines[lines.len().saturating_sub(n)..] {
                let _ = writeln!(out, "{line}");
            }
            if lines.is_empty() {
                out.push_str("(empty)\n");
            }
        }
        Err(_) => out.push_str("(no such file)\n"),
    }
    out
}

/// Opens a log file for appending (a restart adds to it), for stdout and
/// stderr.
pub(crate) fn open_log(path: &Path) -> Result<(File, File), HarnessError> {
    let context = || format!("opening {}", path.display());
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| HarnessError::io(context(), e))?;
    let err = out
        .try_clone()
        .map_err(|e| HarnessError::io(context(), e))?;
    Ok((out, err))
}

fn read_cookie(path: &Path) -> Option<(String, String)> {
    let text = fs::read_to_string(path).ok()?;
    let (user, password) = text.trim().split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn as_string(method: &str, v: Value) -> Result<String, HarnessError> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(HarnessError::unexpected(
            method,
            format!("expected a string, got {other}"),
        )),
    }
}

/// Accepts `123`, `1.5`, `0.00000001`: digits, then at most 8 decimals.
fn check_amount(amount: &str) -> Result<(), HarnessError> {
    let bad = || HarnessError::InvalidAmount(amount.to_owned());
    let (int, frac) = match amount.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (amount, None),
    };
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    if int.len() > 1 && int.starts_with('0') {
        return Err(bad()); // JSON forbids leading zeros
    }
    if let Some(f) = frac {
        if f.is_empty() || f.len() > 8 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
    }
    Ok(())
}

/// Lower- or upper-case hex to bytes; `None` if it is not hex.
pub fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = hex.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

/// Bytes to lower-case hex.
pub fn encode_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts() {
        for ok in ["0", "1", "1.5", "0.00000001", "20999999.99999999", "10"] {
            assert!(check_amount(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-1",
            "1.",
            ".5",
            "1e3",
            "1.123456789",
            "01",
            "1,5",
            " 1",
            "NaN",
        ] {
            assert!(check_amount(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hex_round_trip() {
        assert_eq!(decode_hex("00ffA0"), Some(vec![0, 255, 160]));
        assert_eq!(decode_hex("0"), None);
        assert_eq!(decode_hex("zz"), None);
        assert_eq!(encode_hex(&[0, 255, 160]), "00ffa0");
    }

    #[test]
    fn missing_binary_names_the_install_script() {
        let err = find_binary(
            "litecoind",
            "PAYWATCH_TEST_NO_SUCH_VAR",
            "/no/such/litecoind".into(),
            String::new(),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("bash deploy/install-nodes.sh"), "{msg}");
        assert!(msg.contains("/no/such/litecoind"), "{msg}");
    }
}

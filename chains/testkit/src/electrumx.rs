//! A real ElectrumX server over a [`LitecoinNode`], owned by a test.
//!
//! The binary is `$PAYWATCH_ELECTRUMX`, else
//! `${PAYWATCH_TOOLS:-/var/cache/paywatch-tools}/electrumx/bin/electrumx_server`
//! (a Python venv with `e-x` and `plyvel`). Install it with
//! `bash deploy/install-nodes.sh`.
//!
//! The server speaks Electrum's line-delimited JSON-RPC over TCP;
//! [`ElectrumX::request`] is a tiny client for it (one connection per call,
//! `server.version` first).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::litecoind::{
    find_binary, free_ports, is_bind_failure, open_log, tail_of, HarnessError, LitecoinNode,
};

/// Environment variable naming the `electrumx_server` to run.
pub const ELECTRUMX_ENV: &str = "PAYWATCH_ELECTRUMX";
/// Environment variable naming the tools dir the install script fills.
pub const TOOLS_ENV: &str = "PAYWATCH_TOOLS";
/// The tools dir when `PAYWATCH_TOOLS` is not set.
pub const DEFAULT_TOOLS: &str = "/var/cache/paywatch-tools";

const READY_TIMEOUT: Duration = Duration::from_secs(120);
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: u32 = 3;
const LOG_TAIL_LINES: usize = 20;
const CLIENT_NAME: &str = "paywatch-testkit";
const PROTOCOL_VERSION: &str = "1.4";

/// How to start an [`ElectrumX`].
#[derive(Debug, Clone)]
pub struct ElectrumXOptions {
    /// How often ElectrumX polls the node for new blocks and for its mempool
    /// (`DAEMON_POLL_INTERVAL_BLOCKS` / `_MEMPOOL`). ElectrumX's own default
    /// is 5000 ms; the harness uses 200 ms so tests wait less. A block
    /// replaced faster than this may never be seen by the server.
    pub poll_interval_ms: u64,
}

impl Default for ElectrumXOptions {
    fn default() -> ElectrumXOptions {
        ElectrumXOptions {
            poll_interval_ms: 200,
        }
    }
}

/// One client session, as ElectrumX accounts for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ElectrumSession {
    /// The session's cost: each request adds to it, time takes it away.
    /// Past 1,000 ElectrumX slows the session's requests, at 10,000 it
    /// closes it.
    pub cost: f64,
    pub subscriptions: u64,
    /// Requests received, each of a batch counted.
    pub requests: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
}

/// A running ElectrumX indexing a regtest [`LitecoinNode`].
#[derive(Debug)]
pub struct ElectrumX {
    binary: PathBuf,
    options: ElectrumXOptions,
    tcp_port: u16,
    rpc_port: u16,
    daemon_url: String,
    child: Option<Child>,
    /// Holds `db/` and `electrumx.log`; removed on drop, after the kill.
    dir: TempDir,
    db_dir: PathBuf,
}

impl ElectrumX {
    /// Starts ElectrumX over `node` with default options and waits until it
    /// accepts connections (which it does once caught up with the node).
    pub async fn start(node: &LitecoinNode) -> Result<ElectrumX, HarnessError> {
        ElectrumX::start_with(node, ElectrumXOptions::default()).await
    }

    /// [`start`](Self::start) with options.
    pub async fn start_with(
        node: &LitecoinNode,
        options: ElectrumXOptions,
    ) -> Result<ElectrumX, HarnessError> {
        let binary = electrumx_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("paywatch-electrumx-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temporary DB dir", e))?;
        let db_dir = dir.path().join("db");
        let mut server = ElectrumX {
            binary,
            options,
            tcp_port: 0,
            rpc_port: 0,
            daemon_url: daemon_url(node),
            child: None,
            dir,
            db_dir,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let ports = free_ports(2)?;
            server.tcp_port = ports[0];
            server.rpc_port = ports[1];
            let _ = fs::remove_dir_all(&server.db_dir);
            fs::create_dir(&server.db_dir).map_err(|e| {
                HarnessError::io(format!("creating {}", server.db_dir.display()), e)
            })?;
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(HarnessError::Start { log_tail, .. })
                    if attempt < START_ATTEMPTS && is_bind_failure(&log_tail) =>
                {
                    server.reap();
                    let _ = fs::remove_file(server.log_file());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `127.0.0.1:PORT`, the Electrum TCP (plain, not TLS) endpoint.
    pub fn tcp_address(&self) -> String {
        format!("127.0.0.1:{}", self.tcp_port)
    }

    /// `tcp://127.0.0.1:PORT`, the form the `electrum-client` crate takes.
    pub fn tcp_url(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.tcp_port)
    }

    /// `127.0.0.1:PORT` of the admin RPC (what `electrumx_rpc` talks to).
    pub fn admin_rpc_address(&self) -> String {
        format!("127.0.0.1:{}", self.rpc_port)
    }

    /// ElectrumX's database directory.
    pub fn db_dir(&self) -> &Path {
        &self.db_dir
    }

    /// The server's log file (its stdout and stderr).
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("electrumx.log")
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        tail_of(&self.log_file(), LOG_TAIL_LINES)
    }

    /// Calls an Electrum protocol method (e.g.
    /// `blockchain.scripthash.get_history`) on a fresh connection and
    /// returns its `result`.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, HarnessError> {
        electrum_call(&self.tcp_address(), method, params, false).await
    }

    /// The client sessions the server holds now, oldest first, as its admin
    /// RPC `sessions` reports them (what `electrumx_rpc sessions` prints).
    pub async fn sessions(&self) -> Result<Vec<ElectrumSession>, HarnessError> {
        let rows = electrum_call(&self.admin_rpc_address(), "sessions", json!([]), true).await?;
        let bad = |detail: String| HarnessError::Electrum {
            method: "sessions".to_owned(),
            detail,
        };
        let rows = rows
            .as_array()
            .ok_or_else(|| bad(format!("not a list: {rows}")))?;
        rows.iter()
            .map(|row| {
                let number = |i: usize| {
                    row.get(i)
                        .and_then(Value::as_f64)
                        .ok_or_else(|| bad(format!("no number at {i} in {row}")))
                };
                // Counts arrive as JSON integers; as f64 they are exact far past any test's.
                let count = |i: usize| number(i).map(|n| n as u64);
                Ok(ElectrumSession {
                    cost: number(5)?,
                    subscriptions: count(9)?,
                    requests: count(10)?,
                    bytes_received: count(11)?,
                    bytes_sent: count(13)?,
                })
            })
            .collect()
    }

    /// Whether the log says the server closed a session for using too much
    /// (ElectrumX: "closing session over res usage").
    pub fn closed_a_session_over_cost(&self) -> bool {
        fs::read_to_string(self.log_file()).is_ok_and(|log| log.contains("over res usage"))
    }

    /// How many requests the log says timed out waiting (ElectrumX answers
    /// them with an error, and charges the session for it).
    pub fn timed_out_requests(&self) -> usize {
        fs::read_to_string(self.log_file()).map_or(0, |log| log.matches("timed out after").count())
    }

    /// The server's tip height (`blockchain.headers.subscribe`).
    pub async fn tip_height(&self) -> Result<u64, HarnessError> {
        Ok(self.tip().await?.0)
    }

    /// Waits (up to 60 s) until the server's tip is at `height` or above;
    /// returns the tip height it saw.
    pub async fn wait_synced(&self, height: u64) -> Result<u64, HarnessError> {
        self.wait_synced_timeout(height, SYNC_TIMEOUT).await
    }

    /// [`wait_synced`](Self::wait_synced) with a chosen timeout.
    pub async fn wait_synced_timeout(
        &self,
        height: u64,
        timeout: Duration,
    ) -> Result<u64, HarnessError> {
        let started = Instant::now();
        loop {
            let got = self.tip().await;
            if let Ok((tip, _)) = &got {
                if *tip >= height {
                    return Ok(*tip);
                }
            }
            if started.elapsed() > timeout {
                let at = match got {
                    Ok((tip, _)) => format!("its tip is at height {tip}"),
                    Err(e) => format!("last error: {e}"),
                };
                return Err(HarnessError::Timeout {
                    waited: timeout,
                    detail: format!(
                        "ElectrumX at {} did not reach height {height}; {at}\n{}",
                        self.tcp_address(),
                        self.log_tail()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (up to 60 s) until the server's tip is the node's tip: same
    /// height and same header (so also after a reorg to an equal height).
    pub async fn wait_synced_with(&self, node: &LitecoinNode) -> Result<u64, HarnessError> {
        let started = Instant::now();
        loop {
            let best = node.best_hash().await?;
            let header = node.rpc("getblockheader", json!([best, false])).await?;
            let height = node.block_count().await?;
            let got = self.tip().await;
            if let Ok((tip, hex)) = &got {
                if *tip == height && Some(hex.as_str()) == header.as_str() {
                    return Ok(height);
                }
            }
            if started.elapsed() > SYNC_TIMEOUT {
                let at = match got {
                    Ok((tip, _)) => format!("its tip is at height {tip}"),
                    Err(e) => format!("last error: {e}"),
                };
                return Err(HarnessError::Timeout {
                    waited: SYNC_TIMEOUT,
                    detail: format!(
                        "ElectrumX at {} did not reach the node's tip {best} at height {height}; {at}\n{}",
                        self.tcp_address(),
                        self.log_tail()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the server cleanly (admin RPC `stop`, which flushes its DB),
    /// killing it if it has not exited after 10 s. The DB is kept.
    pub async fn stop(&mut self) -> Result<(), HarnessError> {
        if !self.is_running() {
            self.reap();
            return Ok(());
        }
        let _ = electrum_call(&self.admin_rpc_address(), "stop", json!([]), true).await;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if !self.is_running() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.reap();
        Ok(())
    }

    /// Kills the server with SIGKILL (an outage). The DB is kept.
    pub fn kill(&mut self) {
        self.reap();
    }

    /// Starts the stopped (or killed) server again on the same ports and
    /// DB, over `node` (the same node it indexed; its credentials are read
    /// again, since a cookie changes when the node restarts).
    pub async fn start_again(&mut self, node: &LitecoinNode) -> Result<(), HarnessError> {
        if self.is_running() {
            return Ok(());
        }
        self.reap();
        self.daemon_url = daemon_url(node);
        self.launch().await
    }

    fn envs(&self) -> Vec<(&'static str, String)> {
        let poll = self.options.poll_interval_ms.max(1).to_string();
        vec![
            ("COIN", "Litecoin".into()),
            ("NET", "regtest".into()),
            ("DAEMON_URL", self.daemon_url.clone()),
            ("DB_DIRECTORY", self.db_dir.display().to_string()),
            ("DB_ENGINE", "leveldb".into()),
            (
                "SERVICES",
                format!(
                    "tcp://127.0.0.1:{},rpc://127.0.0.1:{}",
                    self.tcp_port, self.rpc_port
                ),
            ),
            ("PEER_DISCOVERY", "off".into()),
            ("PEER_ANNOUNCE", String::new()),
            ("ALLOW_ROOT", "1".into()),
            ("CACHE_MB", "200".into()),
            ("DAEMON_POLL_INTERVAL_BLOCKS", poll.clone()),
            ("DAEMON_POLL_INTERVAL_MEMPOOL", poll),
            // ElectrumX's own cost limits stay on (soft 1,000, hard 10,000):
            // a client that asks too much is slowed, then cut off, here as
            // on any public server.
            ("PYTHONUNBUFFERED", "1".into()),
        ]
    }

    async fn launch(&mut self) -> Result<(), HarnessError> {
        let (out, err) = open_log(&self.log_file())?;
        let mut command = Command::new(&self.binary);
        // ElectrumX is configured by environment only: start from a clean one
        // so nothing from the test's environment leaks into it.
        command.env_clear();
        for key in ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"] {
            if let Some(v) = std::env::var_os(key) {
                command.env(key, v);
            }
        }
        let child = command
            .envs(self.envs())
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
                    return Err(self.start_error(format!("electrumx_server exited with {status}")));
                }
            }
            // ElectrumX does not exit when it cannot bind a port: it logs it.
            if fs::read_to_string(self.log_file())
                .is_ok_and(|log| log.contains("server failed to listen on"))
            {
                self.reap();
                return Err(self.start_error("a port was taken".to_owned()));
            }
            if started.elapsed() > READY_TIMEOUT {
                self.reap();
                return Err(self.start_error(format!(
                    "it did not answer on {} within {READY_TIMEOUT:?} (last: {last_error})",
                    self.tcp_address()
                )));
            }
            match electrum_call(&self.tcp_address(), "server.ping", json!([]), false).await {
                Ok(_) => return Ok(()),
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn tip(&self) -> Result<(u64, String), HarnessError> {
        let v = self
            .request("blockchain.headers.subscribe", json!([]))
            .await?;
        let height = v.get("height").and_then(Value::as_u64);
        let hex = v.get("hex").and_then(Value::as_str);
        match (height, hex) {
            (Some(h), Some(x)) => Ok((h, x.to_owned())),
            _ => Err(HarnessError::Unexpected {
                method: "blockchain.headers.subscribe".into(),
                detail: v.to_string(),
            }),
        }
    }

    fn start_error(&self, reason: String) -> HarnessError {
        HarnessError::Start {
            what: "electrumx_server",
            reason,
            log_tail: self.log_tail(),
        }
    }

    fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ElectrumX {
    fn drop(&mut self) {
        self.reap();
    }
}

/// `$PAYWATCH_ELECTRUMX`, else
/// `${PAYWATCH_TOOLS:-/var/cache/paywatch-tools}/electrumx/bin/electrumx_server`.
fn electrumx_binary() -> Result<PathBuf, HarnessError> {
    let (tools, why) = match std::env::var_os(TOOLS_ENV) {
        Some(t) if !t.is_empty() => (
            PathBuf::from(t),
            format!(" (under {TOOLS_ENV}; the install script uses it too)"),
        ),
        _ => (PathBuf::from(DEFAULT_TOOLS), String::new()),
    };
    find_binary(
        "electrumx_server",
        ELECTRUMX_ENV,
        tools.join("electrumx").join("bin").join("electrumx_server"),
        why,
    )
}

fn daemon_url(node: &LitecoinNode) -> String {
    format!(
        "http://{}:{}@127.0.0.1:{}/",
        node.rpc_user(),
        node.rpc_password(),
        node.rpc_port()
    )
}

/// One Electrum call on a fresh connection: `server.version`, then `method`.
async fn electrum_call(
    addr: &str,
    method: &str,
    params: Value,
    admin: bool,
) -> Result<Value, HarnessError> {
    let fail = |detail: String| HarnessError::Electrum {
        method: method.to_owned(),
        detail,
    };
    let exchange = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| fail(format!("connecting to {addr}: {e}")))?;
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let mut calls = Vec::new();
        if !admin {
            // The admin RPC has no server.version; the public port wants it first.
            calls.push(("server.version", json!([CLIENT_NAME, PROTOCOL_VERSION])));
        }
        calls.push((method, params));
        let mut result = Value::Null;
        for (id, (name, params)) in calls.into_iter().enumerate() {
            let mut line =
                json!({ "jsonrpc": "2.0", "id": id, "method": name, "params": params }).to_string();
            line.push('\n');
            write
                .write_all(line.as_bytes())
                .await
                .map_err(|e| fail(format!("sending {name} to {addr}: {e}")))?;
            // Skip notifications and anything not answering this id.
            let reply = loop {
                let line = lines
                    .next_line()
                    .await
                    .map_err(|e| fail(format!("reading from {addr}: {e}")))?
                    .ok_or_else(|| fail(format!("{addr} closed the connection during {name}")))?;
                let reply: Value = serde_json::from_str(&line)
                    .map_err(|e| fail(format!("not JSON from {addr}: {e}: {line}")))?;
                if reply.get("id").and_then(Value::as_u64) == Some(id as u64) {
                    break reply;
                }
            };
            if let Some(err) = reply.get("error").filter(|e| !e.is_null()) {
                return Err(HarnessError::Electrum {
                    method: name.to_owned(),
                    detail: err.to_string(),
                });
            }
            result = reply.get("result").cloned().unwrap_or(Value::Null);
        }
        Ok(result)
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(fail(format!(
            "no answer from {addr} within {REQUEST_TIMEOUT:?}"
        ))),
    }
}

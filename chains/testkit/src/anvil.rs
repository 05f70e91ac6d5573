//! A real Ethereum dev node (Foundry's `anvil`), owned by a test.
//!
//! [`AnvilNode::start`] runs `anvil` as a child process on a free 127.0.0.1
//! port (HTTP and WebSocket JSON-RPC share it), chain id [`CHAIN_ID`], with
//! the 10 funded and unlocked dev accounts [`ACCOUNTS`] (10 000 ETH each).
//! Dropping the node kills the process and removes its temporary dir.
//!
//! Besides raw [`rpc`](AnvilNode::rpc) it has helpers for what payment tests
//! need: blocks ([`mine`](AnvilNode::mine), [`reorg`](AnvilNode::reorg),
//! snapshots, automine on/off), ETH payments, a 6-decimal ERC-20
//! (`contracts/Token.sol`) and a forwarder contract that pays ETH onward
//! through internal calls (`contracts/Forwarder.sol`), including calls that
//! are mined but fail. The contracts' bytecode is compiled once by
//! `contracts/build.sh` and embedded, so no compiler is needed at test time.
//!
//! In anvil's default automine mode every transaction is mined at once, in a
//! block of its own; after [`set_automine(false)`](AnvilNode::set_automine)
//! transactions wait in the pool for [`mine`](AnvilNode::mine). Amounts are
//! integers (wei, or token base units), never floats. Addresses are `0x` hex
//! strings in any case; the node answers in lower case.
//!
//! The binary is `$PAYWATCH_ANVIL`, else
//! `$PAYWATCH_TOOLS/evm/node_modules/.bin/anvil` (`PAYWATCH_TOOLS` defaults
//! to `/var/cache/paywatch-tools`). Install it with
//! `bash deploy/install-nodes.sh`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use crate::litecoind::{find_binary, free_ports, is_bind_failure, open_log, tail_of, HarnessError};

/// Environment variable naming the `anvil` binary to run.
pub const ANVIL_ENV: &str = "PAYWATCH_ANVIL";
/// Environment variable naming the tools dir `deploy/install-nodes.sh`
/// installs into; anvil is at `$PAYWATCH_TOOLS/evm/node_modules/.bin/anvil`.
pub const TOOLS_ENV: &str = "PAYWATCH_TOOLS";
/// The tools dir when [`TOOLS_ENV`] is not set.
pub const DEFAULT_TOOLS: &str = "/var/cache/paywatch-tools";
/// The anvil release `deploy/install-nodes.sh` installs.
pub const ANVIL_VERSION: &str = "1.7.1";
/// anvil's default chain id.
pub const CHAIN_ID: u64 = 31337;
/// How many recent blocks' states anvil keeps (in memory) unless
/// [`AnvilOptions::history_states`] says otherwise: calls and traces
/// (`eth_getBalance` at a block, `debug_traceBlockByHash`) work that far back.
pub const DEFAULT_HISTORY_STATES: u64 = 256;

/// anvil's 10 dev accounts (from its default mnemonic "test test … junk"),
/// each funded with 10 000 ETH and unlocked, so `eth_sendTransaction` with
/// any of them as `from` needs no signature.
pub const ACCOUNTS: [&str; 10] = [
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
    "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
    "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
    "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
    "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
    "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
    "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
];
/// The private key of `ACCOUNTS[0]` (public knowledge; dev chains only).
pub const ACCOUNT0_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
/// The balance anvil gives each dev account: 10 000 ETH, in wei.
pub const DEV_BALANCE_WEI: u128 = 10_000 * WEI_PER_ETH;
/// 10^18.
pub const WEI_PER_ETH: u128 = 1_000_000_000_000_000_000;

/// Creation bytecode (hex, no `0x`) of `contracts/Token.sol`: a 6-decimal
/// ERC-20 whose constructor `(string name, string symbol, uint256 supply)`
/// mints `supply` to the deployer. Built by `contracts/build.sh`.
pub const TOKEN_BIN: &str = include_str!("../contracts/Token.bin");
/// Creation bytecode (hex, no `0x`) of `contracts/Forwarder.sol`.
pub const FORWARDER_BIN: &str = include_str!("../contracts/Forwarder.bin");
/// The test token's decimals.
pub const TOKEN_DECIMALS: u32 = 6;
/// `topics[0]` of an ERC-20 `Transfer(address,address,uint256)` log.
pub const TRANSFER_TOPIC: &str =
    "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

// 4-byte selectors, computed once with `cast sig` / keccak256 of the signature.
/// `transfer(address,uint256)`
const SEL_TRANSFER: &str = "a9059cbb";
/// `balanceOf(address)`
const SEL_BALANCE_OF: &str = "70a08231";
/// `forward(address)`
const SEL_FORWARD: &str = "101e8952";
/// `split(address,address)`
const SEL_SPLIT: &str = "0f2c9329";
/// `forwardThenRevert(address)`
const SEL_FORWARD_THEN_REVERT: &str = "dfe19793";

/// Gas limit given to transactions that must be mined as failures: with an
/// explicit limit anvil does not estimate gas (which would refuse them).
pub const FAILING_TX_GAS: u64 = 200_000;

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const RPC_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const RECEIPT_TIMEOUT: Duration = Duration::from_secs(10);
const START_ATTEMPTS: u32 = 3;
const LOG_TAIL_LINES: usize = 30;
const LOG_FILE: &str = "anvil.out";

/// What can go wrong with an [`AnvilNode`].
///
/// Missing binaries, failed starts, I/O, timeouts and unexpected answers are
/// the shared [`HarnessError`]s (their messages name anvil); RPC errors and
/// bad arguments have their own variants.
#[derive(Debug, thiserror::Error)]
pub enum AnvilError {
    /// A shared harness error: [`HarnessError::MissingBinary`] (with the
    /// install hint), `Start`, `Io`, `Unexpected`, `Timeout`, `NotRunning`.
    #[error(transparent)]
    Harness(#[from] HarnessError),
    /// anvil could not be reached over HTTP, or answered something that is
    /// not JSON-RPC.
    #[error("anvil RPC {method}: {detail}")]
    Transport {
        /// The RPC method.
        method: String,
        /// What went wrong.
        detail: String,
    },
    /// anvil answered the call with a JSON-RPC error.
    #[error("anvil RPC {method} failed: {message} (code {code}){}", .data.as_deref().map(|d| format!(", data {d}")).unwrap_or_default())]
    Rpc {
        /// The RPC method.
        method: String,
        /// The JSON-RPC error code (e.g. -32602 invalid params, 3 reverted).
        code: i64,
        /// anvil's message.
        message: String,
        /// The error's `data` (e.g. revert data), as JSON text.
        data: Option<String>,
    },
    /// An argument was not usable (e.g. not a 20-byte hex address).
    #[error("invalid {what} {value:?}: {expected}")]
    InvalidInput {
        /// What the argument is ("address", "raw transaction", ...).
        what: &'static str,
        /// The value given.
        value: String,
        /// What was expected instead.
        expected: String,
    },
}

impl AnvilError {
    fn unexpected(method: &str, detail: impl Into<String>) -> AnvilError {
        HarnessError::Unexpected {
            method: method.to_owned(),
            detail: detail.into(),
        }
        .into()
    }

    fn io(context: impl Into<String>, source: io::Error) -> AnvilError {
        HarnessError::io(context, source).into()
    }
}

/// How to start an [`AnvilNode`].
#[derive(Debug, Clone, Default)]
pub struct AnvilOptions {
    /// `--state FILE`: load the chain from FILE if it exists and write it
    /// there when anvil exits cleanly ([`AnvilNode::stop`], SIGTERM). A
    /// [`kill`](AnvilNode::kill) or drop loses what was not written. The file
    /// is the caller's: it is not removed.
    pub state_file: Option<PathBuf>,
    /// `--block-time N`: mine a block every N seconds (besides automine).
    pub block_time: Option<u64>,
    /// `--prune-history N`: keep the states of the last N blocks in memory
    /// and none on disk; `None` means [`DEFAULT_HISTORY_STATES`].
    pub history_states: Option<u64>,
    /// The anvil binary; `None` looks it up (`PAYWATCH_ANVIL`, then the
    /// tools dir).
    pub binary: Option<PathBuf>,
    /// More `anvil` arguments, e.g. `["--chain-id", "1337"]`.
    pub extra_args: Vec<String>,
}

/// A running `anvil` on 127.0.0.1.
#[derive(Debug)]
pub struct AnvilNode {
    binary: PathBuf,
    options: AnvilOptions,
    port: u16,
    client: reqwest::Client,
    next_id: AtomicU64,
    child: Option<Child>,
    /// Holds `anvil.out` (its stdout and stderr); removed on drop.
    dir: TempDir,
}

impl AnvilNode {
    /// Starts anvil on a free port and waits until it answers RPC.
    pub async fn start(opts: AnvilOptions) -> Result<AnvilNode, AnvilError> {
        let binary = anvil_binary(opts.binary.as_deref())?;
        let dir = tempfile::Builder::new()
            .prefix("paywatch-anvil-")
            .tempdir()
            .map_err(|e| AnvilError::io("creating a temporary dir", e))?;
        let client = reqwest::Client::builder()
            .timeout(RPC_REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            // A restarted node is a new process on the same port: never reuse
            // a connection to the old one.
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| AnvilError::Transport {
                method: "(client)".into(),
                detail: e.to_string(),
            })?;
        let mut node = AnvilNode {
            binary,
            options: opts,
            port: 0,
            client,
            next_id: AtomicU64::new(1),
            child: None,
            dir,
        };
        // A free port is found by binding port 0 and letting go, so another
        // process may take it before anvil binds it: then try another.
        let mut attempt = 0;
        loop {
            attempt += 1;
            node.port = free_ports(1)?[0];
            match node.launch().await {
                Ok(()) => return Ok(node),
                Err(AnvilError::Harness(HarnessError::Start { log_tail, .. }))
                    if attempt < START_ATTEMPTS && is_bind_failure(&log_tail) =>
                {
                    node.reap();
                    let _ = fs::remove_file(node.log_file());
                }
                Err(e) => return Err(e),
            }
        }
    }

    // --- accessors -------------------------------------------------------

    /// `http://127.0.0.1:PORT`, the JSON-RPC endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `ws://127.0.0.1:PORT`, the same JSON-RPC over WebSocket (with
    /// `eth_subscribe`).
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    /// The port (HTTP and WebSocket).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The options the node was started with.
    pub fn options(&self) -> &AnvilOptions {
        &self.options
    }

    /// The `--state` file, if any.
    pub fn state_file(&self) -> Option<&Path> {
        self.options.state_file.as_deref()
    }

    /// The binary being run.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// anvil's stdout and stderr (appended to on every start).
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// The last lines of anvil's output.
    pub fn log_tail(&self) -> String {
        tail_of(&self.log_file(), LOG_TAIL_LINES)
    }

    // --- RPC -------------------------------------------------------------

    /// Calls `method` with `params` (a JSON array) and returns its `result`.
    pub async fn rpc(&self, method: &str, params: Value) -> Result<Value, AnvilError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let transport = |detail: String| AnvilError::Transport {
            method: method.to_owned(),
            detail,
        };
        let response = self
            .client
            .post(self.url())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| transport(format!("{} ({})", e, self.url())))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| transport(format!("reading the answer: {e}")))?;
        let reply: Value = serde_json::from_str(&text).map_err(|_| {
            transport(format!(
                "HTTP {status}{}",
                if text.is_empty() {
                    String::new()
                } else {
                    format!(": {}", text.trim())
                }
            ))
        })?;
        match reply.get("error") {
            Some(Value::Null) | None => {}
            Some(err) => {
                return Err(AnvilError::Rpc {
                    method: method.to_owned(),
                    code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: err
                        .get("message")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .unwrap_or_else(|| err.to_string()),
                    data: err.get("data").map(Value::to_string),
                })
            }
        }
        reply
            .get("result")
            .cloned()
            .ok_or_else(|| transport(format!("HTTP {status}, no result in {text}")))
    }

    // --- chain -----------------------------------------------------------

    /// `eth_chainId`.
    pub async fn chain_id(&self) -> Result<u64, AnvilError> {
        let v = self.rpc("eth_chainId", json!([])).await?;
        quantity_u64("eth_chainId", &v)
    }

    /// The tip's number (`eth_blockNumber`).
    pub async fn block_number(&self) -> Result<u64, AnvilError> {
        let v = self.rpc("eth_blockNumber", json!([])).await?;
        quantity_u64("eth_blockNumber", &v)
    }

    /// Block `n` of the current chain, with transaction hashes only.
    pub async fn block(&self, n: u64) -> Result<Value, AnvilError> {
        self.block_by("eth_getBlockByNumber", json!([qty(n.into()), false]))
            .await
    }

    /// The block a tag names: `"latest"`, `"safe"` (latest−32 on anvil),
    /// `"finalized"` (latest−64), `"pending"`, `"earliest"`.
    pub async fn block_by_tag(&self, tag: &str) -> Result<Value, AnvilError> {
        self.block_by("eth_getBlockByNumber", json!([tag, false]))
            .await
    }

    /// The hash of block `n` of the current chain.
    pub async fn block_hash(&self, n: u64) -> Result<String, AnvilError> {
        let block = self.block(n).await?;
        hex_field("eth_getBlockByNumber", &block, "hash")
    }

    /// Mines `n` blocks at once (`anvil_mine`), with the pool's transactions
    /// in the first; returns the new tip's number.
    pub async fn mine(&self, n: u64) -> Result<u64, AnvilError> {
        self.rpc("anvil_mine", json!([qty(n.into())])).await?;
        self.block_number().await
    }

    /// Turns automine on (each transaction mined at once, the default) or
    /// off (transactions wait for [`mine`](Self::mine) or the block time).
    pub async fn set_automine(&self, on: bool) -> Result<(), AnvilError> {
        self.rpc("evm_setAutomine", json!([on])).await.map(drop)
    }

    /// `anvil_reorg`: replaces the last `depth` blocks with as many new ones
    /// (the height stays the same, the hashes change). Their transactions
    /// are dropped, not put back in the pool, except those listed in `txs`:
    /// `(raw_tx_hex, offset)` mines a signed transaction (see
    /// [`raw_transaction`](Self::raw_transaction)) in the new block at
    /// `offset` (0 = the first replaced height, tip − depth + 1).
    pub async fn reorg(&self, depth: u64, txs: &[(&str, u64)]) -> Result<(), AnvilError> {
        let mut pairs = Vec::with_capacity(txs.len());
        for (raw, offset) in txs {
            if *offset >= depth {
                return Err(AnvilError::InvalidInput {
                    what: "reorg offset",
                    value: offset.to_string(),
                    expected: format!("less than the depth {depth}"),
                });
            }
            pairs.push(json!([hex_arg("raw transaction", raw)?, offset]));
        }
        self.rpc("anvil_reorg", json!([depth, pairs]))
            .await
            .map(drop)
    }

    /// `evm_snapshot`: returns an id for [`revert`](Self::revert).
    pub async fn snapshot(&self) -> Result<String, AnvilError> {
        let v = self.rpc("evm_snapshot", json!([])).await?;
        as_str("evm_snapshot", &v).map(str::to_owned)
    }

    /// `evm_revert`: goes back to the chain as it was at the snapshot (the
    /// snapshot is used up). An error if anvil does not know the id.
    pub async fn revert(&self, id: &str) -> Result<(), AnvilError> {
        match self.rpc("evm_revert", json!([id])).await? {
            Value::Bool(true) => Ok(()),
            other => Err(AnvilError::unexpected(
                "evm_revert",
                format!("snapshot {id} not reverted to (answer {other})"),
            )),
        }
    }

    /// `debug_traceBlockByHash` with the `callTracer`: one entry per
    /// transaction, `{txHash, result: {type, from, to, value, calls: [...]}}`,
    /// where `calls` are the internal calls.
    pub async fn trace_block(&self, hash: &str) -> Result<Value, AnvilError> {
        self.rpc(
            "debug_traceBlockByHash",
            json!([hash, { "tracer": "callTracer" }]),
        )
        .await
    }

    // --- accounts and transactions ---------------------------------------

    /// The balance of `address` at the tip, in wei.
    pub async fn balance(&self, address: &str) -> Result<u128, AnvilError> {
        let v = self
            .rpc("eth_getBalance", json!([address_arg(address)?, "latest"]))
            .await?;
        quantity_u128("eth_getBalance", &v)
    }

    /// Sets the balance of `address` (`anvil_setBalance`), in wei.
    pub async fn set_balance(&self, address: &str, wei: u128) -> Result<(), AnvilError> {
        self.rpc("anvil_setBalance", json!([address_arg(address)?, qty(wei)]))
            .await
            .map(drop)
    }

    /// `eth_sendTransaction` of `tx` (an object with `from` an unlocked
    /// account); returns the transaction hash.
    pub async fn send_transaction(&self, tx: Value) -> Result<String, AnvilError> {
        let v = self.rpc("eth_sendTransaction", json!([tx])).await?;
        as_str("eth_sendTransaction", &v).map(str::to_owned)
    }

    /// Pays `wei` from `from` (a dev account) to `to`; returns the tx hash.
    pub async fn send_eth(&self, from: &str, to: &str, wei: u128) -> Result<String, AnvilError> {
        self.send_transaction(json!({
            "from": address_arg(from)?,
            "to": address_arg(to)?,
            "value": qty(wei),
        }))
        .await
    }

    /// Deploys `bytecode` (hex creation code, constructor arguments
    /// appended) from `from`, waits for the receipt and returns the contract
    /// address. Needs automine (or a block time).
    pub async fn deploy(&self, from: &str, bytecode: &str) -> Result<String, AnvilError> {
        let data = hex_arg("bytecode", bytecode)?;
        let hash = self
            .send_transaction(json!({ "from": address_arg(from)?, "data": data }))
            .await?;
        let receipt = self.receipt(&hash).await?;
        if receipt.get("status").and_then(Value::as_str) != Some("0x1") {
            return Err(AnvilError::unexpected(
                "eth_getTransactionReceipt",
                format!("deployment {hash} failed: {receipt}"),
            ));
        }
        hex_field("eth_getTransactionReceipt", &receipt, "contractAddress")
    }

    /// Deploys a `contracts/Token.sol` ERC-20 (6 decimals) from
    /// `ACCOUNTS[0]`, which gets all of `supply` (in base units); returns its
    /// address. Needs automine (or a block time).
    pub async fn deploy_token(
        &self,
        name: &str,
        symbol: &str,
        supply: u128,
    ) -> Result<String, AnvilError> {
        // constructor(string,string,uint256): two offsets and the supply,
        // then each string as length + bytes padded to 32.
        let name_enc = abi_string(name);
        let mut code = TOKEN_BIN.trim().to_owned();
        code.push_str(&word_u128(0x60));
        code.push_str(&word_u128(0x60 + (name_enc.len() / 2) as u128));
        code.push_str(&word_u128(supply));
        code.push_str(&name_enc);
        code.push_str(&abi_string(symbol));
        self.deploy(ACCOUNTS[0], &code).await
    }

    /// `token.transfer(to, amount)` sent by `from`; returns the tx hash.
    pub async fn token_transfer(
        &self,
        token: &str,
        from: &str,
        to: &str,
        amount: u128,
    ) -> Result<String, AnvilError> {
        let data = format!("0x{SEL_TRANSFER}{}{}", word_address(to)?, word_u128(amount));
        self.send_transaction(json!({
            "from": address_arg(from)?,
            "to": address_arg(token)?,
            "data": data,
        }))
        .await
    }

    /// A `token.transfer(to, amount)` that is mined but fails (status 0, no
    /// log): `amount` must be more than `from`'s token balance (else an
    /// [`AnvilError::InvalidInput`]). Sent with gas [`FAILING_TX_GAS`].
    pub async fn failed_token_transfer(
        &self,
        token: &str,
        from: &str,
        to: &str,
        amount: u128,
    ) -> Result<String, AnvilError> {
        let balance = self.token_balance(token, from).await?;
        if amount <= balance {
            return Err(AnvilError::InvalidInput {
                what: "failing transfer amount",
                value: amount.to_string(),
                expected: format!("more than the sender's token balance {balance}"),
            });
        }
        let data = format!("0x{SEL_TRANSFER}{}{}", word_address(to)?, word_u128(amount));
        self.send_transaction(json!({
            "from": address_arg(from)?,
            "to": address_arg(token)?,
            "data": data,
            "gas": qty(FAILING_TX_GAS.into()),
        }))
        .await
    }

    /// `token.balanceOf(holder)` at the tip, in base units.
    pub async fn token_balance(&self, token: &str, holder: &str) -> Result<u128, AnvilError> {
        let data = format!("0x{SEL_BALANCE_OF}{}", word_address(holder)?);
        let v = self
            .rpc(
                "eth_call",
                json!([{ "to": address_arg(token)?, "data": data }, "latest"]),
            )
            .await?;
        quantity_u128("eth_call", &v)
    }

    /// Deploys a `contracts/Forwarder.sol` from `ACCOUNTS[0]`; returns its
    /// address. Needs automine (or a block time).
    pub async fn deploy_forwarder(&self) -> Result<String, AnvilError> {
        self.deploy(ACCOUNTS[0], FORWARDER_BIN.trim()).await
    }

    /// `forwarder.forward(to)` with `wei` from `from`: the contract pays it
    /// all to `to` in an internal call. Returns the tx hash.
    pub async fn forward(
        &self,
        forwarder: &str,
        from: &str,
        to: &str,
        wei: u128,
    ) -> Result<String, AnvilError> {
        let data = format!("0x{SEL_FORWARD}{}", word_address(to)?);
        self.call_forwarder(forwarder, from, wei, data, None).await
    }

    /// `forwarder.split(a, b)` with `wei` from `from`: two internal calls,
    /// `wei / 2` to `a` and the rest to `b`. Returns the tx hash.
    pub async fn split(
        &self,
        forwarder: &str,
        from: &str,
        a: &str,
        b: &str,
        wei: u128,
    ) -> Result<String, AnvilError> {
        let data = format!("0x{SEL_SPLIT}{}{}", word_address(a)?, word_address(b)?);
        self.call_forwarder(forwarder, from, wei, data, None).await
    }

    /// `forwarder.forwardThenRevert(to)` with `wei` from `from`: the
    /// internal payment to `to` happens, then the transaction reverts, so it
    /// is mined with status 0 and `to` gets nothing (the trace still shows
    /// the internal call). Sent with gas [`FAILING_TX_GAS`].
    pub async fn forward_then_revert(
        &self,
        forwarder: &str,
        from: &str,
        to: &str,
        wei: u128,
    ) -> Result<String, AnvilError> {
        let data = format!("0x{SEL_FORWARD_THEN_REVERT}{}", word_address(to)?);
        self.call_forwarder(forwarder, from, wei, data, Some(FAILING_TX_GAS))
            .await
    }

    async fn call_forwarder(
        &self,
        forwarder: &str,
        from: &str,
        wei: u128,
        data: String,
        gas: Option<u64>,
    ) -> Result<String, AnvilError> {
        let mut tx = json!({
            "from": address_arg(from)?,
            "to": address_arg(forwarder)?,
            "value": qty(wei),
            "data": data,
        });
        if let Some(gas) = gas {
            tx["gas"] = Value::String(qty(gas.into()));
        }
        self.send_transaction(tx).await
    }

    /// The receipt of a mined transaction, or `None` (pending, dropped by a
    /// reorg, or unknown).
    pub async fn try_receipt(&self, tx_hash: &str) -> Result<Option<Value>, AnvilError> {
        let v = self
            .rpc("eth_getTransactionReceipt", json!([tx_hash]))
            .await?;
        Ok((!v.is_null()).then_some(v))
    }

    /// The receipt of `tx_hash`, waiting up to 10 s for it to be mined (with
    /// automine off, [`mine`](Self::mine) first).
    pub async fn receipt(&self, tx_hash: &str) -> Result<Value, AnvilError> {
        let started = Instant::now();
        loop {
            if let Some(r) = self.try_receipt(tx_hash).await? {
                return Ok(r);
            }
            if started.elapsed() > RECEIPT_TIMEOUT {
                return Err(HarnessError::Timeout {
                    waited: RECEIPT_TIMEOUT,
                    detail: format!(
                        "no receipt for {tx_hash} (not mined: is automine off? call mine)"
                    ),
                }
                .into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The signed transaction's bytes, `0x` hex
    /// (`eth_getRawTransactionByHash`), e.g. to mine it again with
    /// [`reorg`](Self::reorg).
    pub async fn raw_transaction(&self, tx_hash: &str) -> Result<String, AnvilError> {
        let v = self
            .rpc("eth_getRawTransactionByHash", json!([tx_hash]))
            .await?;
        match v.as_str() {
            Some(s) if s.len() > 2 => Ok(s.to_owned()),
            _ => Err(AnvilError::unexpected(
                "eth_getRawTransactionByHash",
                format!("no transaction {tx_hash} (answer {v})"),
            )),
        }
    }

    // --- lifecycle -------------------------------------------------------

    /// Whether the process is running (it may have crashed).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops anvil cleanly (SIGTERM) and waits for it to exit, so it writes
    /// its `--state` file. If it has not exited after 10 s it is killed and
    /// this fails. The port and state file are kept for
    /// [`start_again`](Self::start_again).
    pub async fn stop(&mut self) -> Result<(), AnvilError> {
        if !self.is_running() {
            self.reap();
            return Ok(());
        }
        let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
        let state_before = self.options.state_file.as_deref().and_then(modified);
        if let Some(child) = &self.child {
            terminate(child)?;
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if !self.is_running() {
                self.reap();
                if let Some(state) = &self.options.state_file {
                    let state_after = modified(state);
                    if state_after.is_none() || state_after == state_before {
                        return Err(AnvilError::unexpected(
                            "stop",
                            format!(
                                "anvil exited without writing its state to {}\n{}",
                                state.display(),
                                self.log_tail()
                            ),
                        ));
                    }
                }
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.reap();
        Err(HarnessError::Timeout {
            waited: STOP_TIMEOUT,
            detail: "anvil did not exit on SIGTERM; killed it (its state was not written)"
                .to_owned(),
        }
        .into())
    }

    /// Kills anvil with SIGKILL, as a crash would: nothing is written to the
    /// state file. [`start_again`](Self::start_again) brings it back.
    pub fn kill(&mut self) {
        self.reap();
    }

    /// Starts the stopped (or killed) node again on the same port with the
    /// same options; with a state file it resumes from what was last written
    /// there, without one it is a new chain.
    pub async fn start_again(&mut self) -> Result<(), AnvilError> {
        if self.is_running() {
            return Ok(());
        }
        self.reap();
        self.launch().await
    }

    /// [`stop`](Self::stop), then [`start_again`](Self::start_again).
    pub async fn restart(&mut self) -> Result<(), AnvilError> {
        self.stop().await?;
        self.start_again().await
    }

    // --- internals -------------------------------------------------------

    fn args(&self) -> Vec<String> {
        let history = self
            .options
            .history_states
            .unwrap_or(DEFAULT_HISTORY_STATES);
        let mut args = vec![
            "--host".to_owned(),
            "127.0.0.1".to_owned(),
            "--port".to_owned(),
            self.port.to_string(),
            // States of old blocks are kept in memory only (without this,
            // anvil writes them to disk, gigabytes on long runs).
            "--prune-history".to_owned(),
            history.to_string(),
        ];
        if let Some(state) = &self.options.state_file {
            args.push("--state".to_owned());
            args.push(state.display().to_string());
        }
        if let Some(secs) = self.options.block_time {
            args.push("--block-time".to_owned());
            args.push(secs.to_string());
        }
        args.extend(self.options.extra_args.iter().cloned());
        args
    }

    /// Spawns the process and waits until RPC answers.
    async fn launch(&mut self) -> Result<(), AnvilError> {
        let (out, err) = open_log(&self.log_file())?;
        let child = Command::new(&self.binary)
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| AnvilError::io(format!("running {}", self.binary.display()), e))?;
        self.child = Some(child);

        let started = Instant::now();
        let mut last_error = String::from("no answer yet");
        loop {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(self.start_error(format!("anvil exited with {status}")));
                }
            }
            if started.elapsed() > READY_TIMEOUT {
                self.reap();
                return Err(self.start_error(format!(
                    "RPC did not answer within {READY_TIMEOUT:?} (last: {last_error})"
                )));
            }
            match self.rpc("eth_chainId", json!([])).await {
                Ok(_) => return Ok(()),
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn start_error(&self, reason: String) -> AnvilError {
        HarnessError::Start {
            what: "anvil",
            reason,
            log_tail: self.log_tail(),
        }
        .into()
    }

    /// Kills the process if it runs and waits for it, so no zombie is left.
    fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn block_by(&self, method: &str, params: Value) -> Result<Value, AnvilError> {
        let v = self.rpc(method, params.clone()).await?;
        if v.is_null() {
            return Err(AnvilError::unexpected(method, format!("no block {params}")));
        }
        Ok(v)
    }
}

impl Drop for AnvilNode {
    fn drop(&mut self) {
        // Kill before the TempDir field removes the log dir.
        self.reap();
    }
}

/// `binary` if given, else `$PAYWATCH_ANVIL`, else
/// `$PAYWATCH_TOOLS/evm/node_modules/.bin/anvil`; an error naming the
/// install script if it is not there.
fn anvil_binary(binary: Option<&Path>) -> Result<PathBuf, AnvilError> {
    if let Some(path) = binary {
        return if path.is_file() {
            Ok(path.to_owned())
        } else {
            Err(HarnessError::MissingBinary {
                what: "anvil",
                path: path.to_owned(),
                env: ANVIL_ENV,
                why: " (from AnvilOptions::binary)".to_owned(),
            }
            .into())
        };
    }
    let (tools, why) = match std::env::var_os(TOOLS_ENV) {
        Some(t) if !t.is_empty() => (PathBuf::from(t), format!(" (from {TOOLS_ENV})")),
        _ => (PathBuf::from(DEFAULT_TOOLS), String::new()),
    };
    Ok(find_binary(
        "anvil",
        ANVIL_ENV,
        tools.join("evm/node_modules/.bin/anvil"),
        why,
    )?)
}

/// Sends SIGTERM (std only has SIGKILL; `unsafe` is forbidden here, so no
/// libc): through `sh`'s `kill` builtin, present wherever `sh` is.
fn terminate(child: &Child) -> Result<(), AnvilError> {
    let pid = child.id().to_string();
    let status = Command::new("sh")
        .args(["-c", "kill -TERM \"$1\"", "sh", &pid])
        .stdin(Stdio::null())
        .status()
        .map_err(|e| AnvilError::io(format!("running sh -c 'kill -TERM {pid}'"), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(AnvilError::io(
            format!("kill -TERM {pid}"),
            io::Error::other(format!("exited with {status}")),
        ))
    }
}

// --- encoding ------------------------------------------------------------

/// A JSON-RPC quantity: `0x` and lower-case hex without leading zeros.
fn qty(v: u128) -> String {
    format!("0x{v:x}")
}

/// An ABI word holding `v`.
fn word_u128(v: u128) -> String {
    format!("{v:064x}")
}

/// An ABI word holding the address (checked: 20 bytes of hex).
fn word_address(address: &str) -> Result<String, AnvilError> {
    let a = address_arg(address)?;
    Ok(format!("{:0>64}", &a[2..]))
}

/// The tail part of an ABI `string`: its length, then its bytes padded to a
/// multiple of 32.
fn abi_string(s: &str) -> String {
    let mut out = word_u128(s.len() as u128);
    let mut bytes = s.as_bytes().to_vec();
    bytes.resize(s.len().div_ceil(32) * 32, 0);
    out.push_str(&crate::litecoind::encode_hex(&bytes));
    out
}

/// `address` as lower-case `0x` hex, if it is 20 bytes of hex.
fn address_arg(address: &str) -> Result<String, AnvilError> {
    let hex = address
        .strip_prefix("0x")
        .or_else(|| address.strip_prefix("0X"))
        .unwrap_or(address);
    if hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(format!("0x{}", hex.to_ascii_lowercase()))
    } else {
        Err(AnvilError::InvalidInput {
            what: "address",
            value: address.to_owned(),
            expected: "20 bytes of hex, e.g. 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
        })
    }
}

/// `data` as `0x` hex, if it is an even number of hex digits.
fn hex_arg(what: &'static str, data: &str) -> Result<String, AnvilError> {
    let hex = data.trim();
    let hex = hex.strip_prefix("0x").unwrap_or(hex);
    if hex.len().is_multiple_of(2) && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(format!("0x{hex}"))
    } else {
        Err(AnvilError::InvalidInput {
            what,
            value: data.to_owned(),
            expected: "hex bytes".into(),
        })
    }
}

fn as_str<'a>(method: &str, v: &'a Value) -> Result<&'a str, AnvilError> {
    v.as_str()
        .ok_or_else(|| AnvilError::unexpected(method, format!("expected a string, got {v}")))
}

fn hex_field(method: &str, v: &Value, field: &str) -> Result<String, AnvilError> {
    match v.get(field).and_then(Value::as_str) {
        Some(s) => Ok(s.to_owned()),
        None => Err(AnvilError::unexpected(method, format!("no {field} in {v}"))),
    }
}

/// A quantity (`0x1a`) or a 32-byte `eth_call` word, as u128; an error if
/// it is not hex or does not fit.
fn quantity_u128(method: &str, v: &Value) -> Result<u128, AnvilError> {
    let s = as_str(method, v)?;
    let bad = || AnvilError::unexpected(method, format!("not a u128 quantity: {v}"));
    let hex = s.strip_prefix("0x").ok_or_else(bad)?;
    let digits = hex.trim_start_matches('0');
    if hex.is_empty() || digits.len() > 32 {
        return Err(bad());
    }
    if digits.is_empty() {
        return Ok(0);
    }
    u128::from_str_radix(digits, 16).map_err(|_| bad())
}

fn quantity_u64(method: &str, v: &Value) -> Result<u64, AnvilError> {
    let n = quantity_u128(method, v)?;
    u64::try_from(n).map_err(|_| AnvilError::unexpected(method, format!("too large: {v}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_encoding() {
        assert_eq!(qty(0), "0x0");
        assert_eq!(qty(255), "0xff");
        assert_eq!(word_u128(1).len(), 64);
        assert_eq!(
            word_address(ACCOUNTS[0]).unwrap(),
            "000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266"
        );
        assert!(word_address("0x1234").is_err());
        assert!(address_arg("0xzz9Fd6e51aad88F6F4ce6aB8827279cffFb92266").is_err());
        let s = abi_string("Tether USD");
        assert_eq!(s.len(), 128);
        assert!(s.starts_with(&word_u128(10)));
        assert!(s[64..].starts_with("5465746865722055534400"));
        assert_eq!(abi_string("").len(), 64);
        assert_eq!(abi_string(&"x".repeat(32)).len(), 128);
        assert_eq!(abi_string(&"x".repeat(33)).len(), 192);
    }

    #[test]
    fn quantities() {
        assert_eq!(quantity_u128("t", &json!("0x0")).unwrap(), 0);
        assert_eq!(quantity_u128("t", &json!("0x1a")).unwrap(), 26);
        let word = format!("0x{}", word_u128(u128::MAX));
        assert_eq!(quantity_u128("t", &json!(word)).unwrap(), u128::MAX);
        let too_big = format!("0x1{}", word_u128(0));
        assert!(quantity_u128("t", &json!(too_big)).is_err());
        assert!(quantity_u128("t", &json!("12")).is_err());
        assert!(quantity_u128("t", &json!("0x")).is_err());
        assert!(quantity_u128("t", &json!(12)).is_err());
    }

    #[test]
    fn embedded_bytecode_is_hex() {
        for code in [TOKEN_BIN, FORWARDER_BIN] {
            assert!(hex_arg("bytecode", code).is_ok());
            assert!(code.trim().len() > 100);
        }
    }

    #[test]
    fn missing_binary_names_the_install_script() {
        let err = anvil_binary(Some(Path::new("/no/such/anvil"))).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("bash deploy/install-nodes.sh"), "{msg}");
        assert!(msg.contains("/no/such/anvil"), "{msg}");
        assert!(msg.contains(ANVIL_ENV), "{msg}");
    }
}

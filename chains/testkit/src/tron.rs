//! A Tron test node: java-tron's gRPC API served from an in-memory chain,
//! so a Tron watcher can be tested without a Tron node.
//!
//! [`TronNode::start`] serves the `Wallet` service on
//! [`url`](TronNode::url) and `WalletSolidity` on
//! [`solidity_url`](TronNode::solidity_url) (two ports, as java-tron's
//! 50051 and 50061), with the tonic servers generated from Tron's own protos
//! (`tron-grpc`), over real sockets. These rpcs answer like mainnet's
//! java-tron; every other rpc answers `UNIMPLEMENTED`:
//! - `Wallet`: `GetNowBlock2`, `GetBlockByNum2`, `GetBlockByLimitNext2`
//!   (blocks in [start, end), at most [`BLOCK_LIMIT`]),
//!   `GetTransactionInfoByBlockNum`, `GetTransactionById`,
//!   `GetTransactionInfoById`;
//! - `WalletSolidity`: `GetNowBlock2` (the solidified block),
//!   `GetBlockByNum2`, `GetTransactionInfoByBlockNum`, `GetTransactionById`,
//!   `GetTransactionInfoById`, all up to the solidified block only.
//!
//! With [`TronNodeOptions`] it stands for a hosted provider too: TLS
//! ([`TEST_CA_PEM`] signs its certificate), an API key every rpc must carry
//! in its metadata (`UNAUTHENTICATED` without it), and a request budget past
//! which it answers `RESOURCE_EXHAUSTED` and suspends the key (`gate`).
//!
//! As java-tron does, they answer an empty message, not an error, for what
//! does not exist (yet): a `BlockExtention` without a header, an empty info
//! list. A range of full blocks is larger than tonic's default 4 MB client
//! limit (100 blocks of 300 transactions are ~9 MB), as on mainnet: clients
//! raise `max_decoding_message_size`.
//!
//! The chain starts with a genesis block and grows only when the test says
//! so. Building it is synchronous (no `.await`), from any thread:
//! - accounts are [`TronAccount::dev`]`(i)`, from fixed keys;
//! - [`deploy_trc20`](TronNode::deploy_trc20) names a TRC-20 contract (there
//!   is no EVM: a contract is an address the node writes logs for);
//! - [`send_trx`](TronNode::send_trx),
//!   [`trc20_transfer`](TronNode::trc20_transfer),
//!   [`trc20_transfer_failing`](TronNode::trc20_transfer_failing),
//!   [`contract_trc20_transfer`](TronNode::contract_trc20_transfer),
//!   [`trigger`](TronNode::trigger),
//!   [`contract_trx_payout`](TronNode::contract_trx_payout) and
//!   [`trigger_internal`](TronNode::trigger_internal) sign a transaction
//!   against the current tip and queue it, returning its txid;
//! - [`mine`](TronNode::mine) makes blocks, the queued transactions in the
//!   first; [`fill_blocks`](TronNode::fill_blocks) makes many blocks of
//!   generated transactions for benchmarks;
//! - [`reorg`](TronNode::reorg) replaces the last blocks with another branch;
//! - [`set_solidity_lag`](TronNode::set_solidity_lag) and
//!   [`set_fault`](TronNode::set_fault) change what the servers answer.
//!
//! Blocks are shaped like mainnet's: a block id is the block number
//! (8 bytes, big-endian) followed by the last 24 bytes of sha256 of the
//! serialized raw header, which links to the parent's id; a block comes every
//! 3 seconds (by its timestamps, not the wall clock), signed by one of
//! [`WITNESS_COUNT`] witnesses in turn. A transaction's id is sha256 of its
//! serialized `raw_data`, its signature recovers to its sender, its `ret`
//! says SUCCESS or REVERT, and its `TransactionInfo` has the fees, the
//! contract, the result and the TRC-20 `Transfer` logs mainnet's has, and
//! the internal transactions of contract calls only as far as the node's
//! `vm.saveInternalTx` settings keep them ([`InternalTxSaving`]: none by
//! default, as java-tron).
//!
//! Not modelled: balances (any account can send anything), TaPoS and
//! expiration checks (a transaction moved far by a reorg keeps its old
//! reference block), an EVM (a contract's internal transactions are what
//! the test says), and everything outside blocks and transactions.

mod balances;
mod chain;
mod gate;
mod internal;
mod keys;
mod service;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::{Router, TcpIncoming};
use tonic::transport::{Identity, ServerTlsConfig};
use tron_grpc::wallet_server::WalletServer;
use tron_grpc::wallet_solidity_server::WalletSolidityServer;

use chain::Shared;
use gate::Gate;
use service::{SolidityApi, WalletApi};

pub use chain::{
    Trc20Log, TronContract, TxId, BLOCK_INTERVAL_MS, BLOCK_LIMIT, TRANSFER_TOPIC, WITNESS_COUNT,
};
pub use internal::{InternalTx, InternalTxSaving};
pub use keys::{
    body_of_public_key, recover_signer, sha256, tron_address, tron_body, TronAccount,
    ADDRESS_PREFIX,
};

/// Blocks between the tip and the solidified block unless told otherwise:
/// mainnet solidifies a block once 19 of the 27 witnesses built on it.
pub const DEFAULT_SOLIDITY_LAG: u64 = 19;

/// How long [`TronNode::stop`] waits for the servers to finish answering.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What can go wrong with a [`TronNode`].
#[derive(Debug, thiserror::Error)]
pub enum TronNodeError {
    /// An argument was not usable (an address that is not base58check, a
    /// reorg deeper than the chain, ...).
    #[error("invalid {what} {value:?}: expected {expected}")]
    InvalidInput {
        /// What the argument is.
        what: &'static str,
        /// The value given.
        value: String,
        /// What was expected instead.
        expected: String,
    },
    /// A reorg named a transaction that is neither in the blocks it
    /// replaces nor queued.
    #[error("transaction {0} is neither queued nor in a replaced block")]
    UnknownTransaction(TxId),
    /// Binding or serving a port failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: io::Error,
    },
    /// A server failed or did not stop.
    #[error("Tron node server: {0}")]
    Server(String),
    /// Something that should not happen: a signature with a nonce or digest
    /// out of range (≈2⁻¹²⁸), a stored block that does not decode.
    #[error("Tron node internal error: {0}")]
    Internal(String),
}

/// A failure the servers inject into every implemented rpc (both services)
/// until it is set back to [`Fault::None`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Answer normally.
    #[default]
    None,
    /// Fail with gRPC status `UNAVAILABLE`, as an overloaded or syncing
    /// node's proxy does.
    Unavailable,
    /// Wait this long before answering.
    Slow(Duration),
    /// Answer with data that does not fit together: every block's
    /// `parent_hash` names no block of the chain (its `blockid` is that of
    /// the changed header, so it does not match the block the watcher had
    /// either), and `GetTransactionInfoByBlockNum(n)` answers the infos of
    /// block n − 1. Transactions by id answer normally.
    Disconnected,
    /// A Lite FullNode without `openHistoryQueryWhenLiteFN`: the history
    /// queries (blocks by number, block ranges, infos by block) are closed
    /// with `UNAVAILABLE`, "this API is closed because this node is a lite
    /// fullnode", as java-tron's `LiteFnQueryGrpcInterceptor` does.
    LiteFullNode,
    /// `storage.transHistory.switch = off`: `GetTransactionInfoByBlockNum`
    /// answers an empty list for every block, transactions or not.
    NoTransactionHistory,
}

/// How to start a [`TronNode`].
#[derive(Debug, Clone)]
pub struct TronNodeOptions {
    /// Solidified block = tip − this (not below genesis).
    pub solidity_lag: u64,
    /// The genesis block's number: start at mainnet-like heights with e.g.
    /// 70_000_000. Lower blocks do not exist (empty answers).
    pub genesis_number: u64,
    /// The genesis block's time in ms since the epoch; `None` for now
    /// (rounded down to a 3-second slot). Set it for the same block ids in
    /// every run.
    pub genesis_timestamp_ms: Option<i64>,
    /// As a hosted provider: every rpc must carry this metadata (name,
    /// value), else `UNAUTHENTICATED`.
    pub api_key: Option<(String, String)>,
    /// As a hosted provider: at most this many rpcs start per second (both
    /// services together); past it `RESOURCE_EXHAUSTED`, and every rpc is
    /// refused for [`suspension`](Self::suspension).
    pub requests_per_second: Option<u32>,
    pub suspension: Duration,
    /// Serve TLS (`https://` URLs) with a certificate for 127.0.0.1 that
    /// [`TEST_CA_PEM`] signed.
    pub tls: bool,
    /// java-tron's `vm.saveInternalTx` and `vm.saveFeaturedInternalTx`:
    /// off by default, as there.
    pub internal_tx: InternalTxSaving,
}

impl Default for TronNodeOptions {
    fn default() -> TronNodeOptions {
        TronNodeOptions {
            solidity_lag: DEFAULT_SOLIDITY_LAG,
            genesis_number: 0,
            genesis_timestamp_ms: None,
            api_key: None,
            requests_per_second: None,
            suspension: Duration::from_secs(2),
            tls: false,
            internal_tx: InternalTxSaving::Off,
        }
    }
}

/// The CA that signed the test node's TLS certificate (for 127.0.0.1 and
/// localhost, valid until 2126). Made with openssl: a P-256 CA, and a leaf
/// with `subjectAltName=IP:127.0.0.1,DNS:localhost`,
/// `extendedKeyUsage=serverAuth`; the CA's key was not kept.
pub const TEST_CA_PEM: &str = include_str!("tron/tls/ca.pem");
const TEST_NODE_CERT_PEM: &str = include_str!("tron/tls/node.pem");
const TEST_NODE_KEY_PEM: &str = include_str!("tron/tls/node.key");

/// A running server task and the way to stop it.
#[derive(Debug)]
struct RunningServer {
    /// Sending (or dropping) it starts a graceful shutdown: no new
    /// connections, open ones end after their current rpcs.
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// The Tron test node. Stops serving when dropped (the chain goes with it);
/// [`stop`](Self::stop) and [`start_again`](Self::start_again) keep the
/// chain and ports, as a restarted java-tron keeps its database.
#[derive(Debug)]
pub struct TronNode {
    shared: Arc<Shared>,
    gate: Arc<Gate>,
    tls: bool,
    port: u16,
    solidity_port: u16,
    /// Empty while stopped. Dropping them shuts the servers down.
    servers: Vec<RunningServer>,
}

impl TronNode {
    /// Makes the genesis block and serves it on two free 127.0.0.1 ports.
    /// Needs a tokio runtime (the servers are tasks on it).
    pub async fn start(options: TronNodeOptions) -> Result<TronNode, TronNodeError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let shared = Arc::new(Shared::new(&options, now_ms)?);
        let wallet = bind(0).await?;
        let solidity = bind(0).await?;
        let gate = Arc::new(Gate::new(
            options.api_key.clone(),
            options.requests_per_second.map(|n| (n, options.suspension)),
        ));
        let mut node = TronNode {
            shared,
            gate,
            tls: options.tls,
            port: local_port(&wallet)?,
            solidity_port: local_port(&solidity)?,
            servers: Vec::new(),
        };
        node.serve(wallet, solidity)?;
        Ok(node)
    }

    // --- endpoints -------------------------------------------------------

    /// `http://127.0.0.1:PORT` (`https://` with TLS): the full node's
    /// `Wallet` service.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.port)
    }

    /// The `WalletSolidity` service (another port).
    pub fn solidity_url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.solidity_port)
    }

    fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// The rpcs answered so far (`Wallet/GetNowBlock2`…), each with how
    /// many times and the bytes of its answers as encoded protobuf.
    pub fn served(&self) -> std::collections::BTreeMap<&'static str, (u64, u64)> {
        self.shared.served()
    }

    /// Rpcs refused for the request budget so far.
    pub fn refused_for_budget(&self) -> u64 {
        self.gate.refused()
    }

    /// The `Wallet` port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `WalletSolidity` port.
    pub fn solidity_port(&self) -> u16 {
        self.solidity_port
    }

    // --- lifecycle -------------------------------------------------------

    /// Whether the servers are serving (not stopped, and not failed).
    pub fn is_running(&self) -> bool {
        !self.servers.is_empty() && self.servers.iter().all(|s| !s.task.is_finished())
    }

    /// Stops both servers: the ports close, open connections end after
    /// their current rpc (or after 5 s, when the server is aborted; a
    /// connection in the middle of a long [`Fault::Slow`] may still answer
    /// then). The chain is kept.
    pub async fn stop(&mut self) -> Result<(), TronNodeError> {
        let servers = std::mem::take(&mut self.servers);
        let mut tasks = Vec::new();
        for server in servers {
            // An Err means the server already ended; its task says how.
            let _ = server.shutdown.send(());
            tasks.push(server.task);
        }
        let mut failure = None;
        for mut task in tasks {
            match tokio::time::timeout(STOP_TIMEOUT, &mut task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => failure = Some(format!("it failed: {e}")),
                Ok(Err(e)) => failure = Some(format!("its task failed: {e}")),
                Err(_) => {
                    task.abort();
                    failure = Some(format!("it did not stop within {STOP_TIMEOUT:?}; aborted"));
                }
            }
        }
        match failure {
            Some(f) => Err(TronNodeError::Server(f)),
            None => Ok(()),
        }
    }

    /// Serves the same chain on the same ports again after
    /// [`stop`](Self::stop); nothing if it is running.
    pub async fn start_again(&mut self) -> Result<(), TronNodeError> {
        if self.is_running() {
            return Ok(());
        }
        self.servers.clear();
        let wallet = bind(self.port).await?;
        let solidity = bind(self.solidity_port).await?;
        self.serve(wallet, solidity)
    }

    /// [`stop`](Self::stop), then [`start_again`](Self::start_again).
    pub async fn restart(&mut self) -> Result<(), TronNodeError> {
        self.stop().await?;
        self.start_again().await
    }

    // Interceptors answer a tonic::Status, as tonic has them.
    #[allow(clippy::result_large_err)]
    fn serve(&mut self, wallet: TcpListener, solidity: TcpListener) -> Result<(), TronNodeError> {
        let builder = || -> Result<tonic::transport::Server, TronNodeError> {
            let server = tonic::transport::Server::builder();
            if !self.tls {
                return Ok(server);
            }
            let identity = Identity::from_pem(TEST_NODE_CERT_PEM, TEST_NODE_KEY_PEM);
            server
                .tls_config(ServerTlsConfig::new().identity(identity))
                .map_err(|e| TronNodeError::Server(format!("TLS: {e}")))
        };
        let gate = Arc::clone(&self.gate);
        let wallet_router = builder()?.add_service(WalletServer::with_interceptor(
            WalletApi {
                shared: Arc::clone(&self.shared),
            },
            move |req| gate.check(req),
        ));
        let gate = Arc::clone(&self.gate);
        let solidity_router = builder()?.add_service(WalletSolidityServer::with_interceptor(
            SolidityApi {
                shared: Arc::clone(&self.shared),
            },
            move |req| gate.check(req),
        ));
        self.servers = vec![
            spawn(wallet_router, wallet)?,
            spawn(solidity_router, solidity)?,
        ];
        Ok(())
    }

    // --- state -----------------------------------------------------------

    /// The tip's number.
    pub fn tip(&self) -> u64 {
        self.shared.read().tip().number
    }

    /// The solidified block's number (what `WalletSolidity` shows).
    pub fn solidified(&self) -> u64 {
        self.shared.read().solidified()
    }

    /// The id of block `number` of the current chain.
    pub fn block_id(&self, number: u64) -> Option<[u8; 32]> {
        let chain = self.shared.read();
        let tip = chain.tip().number;
        chain
            .block(i64::try_from(number).ok()?, tip)
            .map(|b| b.blockid)
    }

    /// The number of the block holding `txid` on the current chain; `None`
    /// if it is queued, dropped by a reorg, or unknown.
    pub fn tx_height(&self, txid: &TxId) -> Option<u64> {
        self.shared.tx_height(txid)
    }

    /// How many transactions wait for the next block.
    pub fn pending_len(&self) -> usize {
        self.shared.pending_len()
    }

    /// From now on every implemented rpc of both services fails or
    /// misbehaves as `fault` says.
    pub fn set_fault(&self, fault: Fault) {
        self.shared.set_fault(fault);
    }

    /// Solidified = tip − `lag` from now on (default
    /// [`DEFAULT_SOLIDITY_LAG`]).
    pub fn set_solidity_lag(&self, lag: u64) {
        self.shared.set_solidity_lag(lag);
    }

    /// What the infos of blocks mined from now on keep of their internal
    /// transactions, as a node restarted with other `vm.saveInternalTx` /
    /// `vm.saveFeaturedInternalTx` settings; infos already made keep theirs.
    pub fn set_internal_tx_saving(&self, saving: InternalTxSaving) {
        self.shared.set_internal_tx_saving(saving);
    }

    // --- contracts -------------------------------------------------------

    /// A TRC-20 token contract called `name`, at an address derived from the
    /// name (the same contract if `name` was deployed before). Fill blocks
    /// move the deployed tokens.
    pub fn deploy_trc20(&self, name: &str) -> TronContract {
        self.shared.deploy_trc20(name)
    }

    /// A TRC-20 token contract at a given address, e.g. mainnet USDT's
    /// `TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t`.
    pub fn deploy_trc20_at(
        &self,
        name: &str,
        address: &str,
    ) -> Result<TronContract, TronNodeError> {
        self.shared.deploy_trc20_at(name, address)
    }

    /// Any other contract (e.g. one that pays out tokens), at an address
    /// derived from `name`.
    pub fn deploy_contract(&self, name: &str) -> TronContract {
        self.shared.deploy_contract(name)
    }

    // --- transactions ----------------------------------------------------
    //
    // Each signs a transaction referencing the current tip, queues it for
    // the next block and returns its id.

    /// A TRX transfer (`TransferContract`) of `sun` from `from` to `to`
    /// (base58check). Its info has no contract and no logs.
    pub fn send_trx(&self, from: &TronAccount, to: &str, sun: u64) -> Result<TxId, TronNodeError> {
        self.shared.send_trx(from, to, sun)
    }

    /// `from` calls `transfer(to, amount)` on `token`
    /// (`TriggerSmartContract`); the info has the token's `Transfer(from,
    /// to, amount)` log.
    pub fn trc20_transfer(
        &self,
        token: &TronContract,
        from: &TronAccount,
        to: &str,
        amount: u128,
    ) -> Result<TxId, TronNodeError> {
        self.shared.trc20_transfer(token, from, to, amount)
    }

    /// Like [`trc20_transfer`](Self::trc20_transfer), but the call reverts:
    /// `contractRet` REVERT, info result FAILED, receipt REVERT, no log —
    /// although the calldata names `to` and `amount`.
    pub fn trc20_transfer_failing(
        &self,
        token: &TronContract,
        from: &TronAccount,
        to: &str,
        amount: u128,
    ) -> Result<TxId, TronNodeError> {
        self.shared.trc20_transfer_failing(token, from, to, amount)
    }

    /// A TRC-20 payment made by a contract: `caller` calls
    /// `payout(bytes32)` on `payer`, which sends `amount` of `token` from its
    /// own balance to `to`. The calldata names neither `token` nor `to`; the
    /// only trace is the token's `Transfer(payer, to, amount)` log, in an
    /// info whose `contract_address` is `payer`.
    pub fn contract_trc20_transfer(
        &self,
        caller: &TronAccount,
        payer: &TronContract,
        token: &TronContract,
        to: &str,
        amount: u128,
    ) -> Result<TxId, TronNodeError> {
        self.shared
            .contract_trc20_transfer(caller, payer, token, to, amount)
    }

    /// A successful call by `caller` of `contract` with `calldata`, whose
    /// info has the given `Transfer` logs (in that order; e.g. a batch
    /// payout with several).
    pub fn trigger(
        &self,
        caller: &TronAccount,
        contract: &TronContract,
        calldata: &[u8],
        logs: &[Trc20Log],
    ) -> Result<TxId, TronNodeError> {
        self.shared.trigger(caller, contract, calldata, logs)
    }

    /// TRX paid by a contract: `caller` calls `payout(bytes32)` on `payer`,
    /// which sends `sun` TRX from its own balance to `to`. The calldata
    /// names neither `to` nor the amount, and no log does: the only trace
    /// is the info's internal transaction (`call`, from `payer` to `to`),
    /// kept only by a node that saves them
    /// ([`TronNodeOptions::internal_tx`]).
    pub fn contract_trx_payout(
        &self,
        caller: &TronAccount,
        payer: &TronContract,
        to: &str,
        sun: u64,
    ) -> Result<TxId, TronNodeError> {
        self.shared.contract_trx_payout(caller, payer, to, sun)
    }

    /// `caller` calls `contract` with `calldata`, sending it `call_value`
    /// sun, and the contract's code makes the internal transactions `made`
    /// (in that order; no logs). If `succeeds` is false the call reverts:
    /// `contractRet` REVERT, info FAILED, and every one of `made` is kept
    /// rejected, as java-tron does.
    pub fn trigger_internal(
        &self,
        caller: &TronAccount,
        contract: &TronContract,
        calldata: &[u8],
        call_value: i64,
        made: &[InternalTx],
        succeeds: bool,
    ) -> Result<TxId, TronNodeError> {
        self.shared
            .trigger_internal(caller, contract, calldata, call_value, made, succeeds)
    }

    // --- blocks ----------------------------------------------------------

    /// Makes `n` blocks, 3 s apart; the first holds every queued
    /// transaction, in queue order. Returns the new tip.
    pub fn mine(&self, n: u64) -> Result<u64, TronNodeError> {
        self.shared.mine(n)
    }

    /// Makes `n` blocks of `per_block` generated transactions each, for
    /// benchmarks; the queued transactions go first in the first block.
    /// Of every 10 generated transactions 4 are TRX transfers, 4 TRC-20
    /// transfers, 1 a reverted TRC-20 transfer and 1 a contract-made TRC-20
    /// payment, each to a new address, from 16 fixed senders, moving the
    /// deployed TRC-20 tokens (or an own token if none is deployed).
    /// Returns the new tip. 10 000 blocks of 300 take ~10 s in a release
    /// build (signing is cheap, see [`TronAccount`]) and ~1.7 GB of memory.
    pub fn fill_blocks(&self, n: u64, per_block: usize) -> Result<u64, TronNodeError> {
        self.shared.fill_blocks(n, per_block)
    }

    /// Replaces the last `depth` blocks with a branch of
    /// `replacement.len()` blocks (longer, equal or shorter) whose block i
    /// holds the transactions `replacement[i]` names: ones from the replaced
    /// blocks (moved, keeping their ids) or queued ones. Transactions of the
    /// replaced blocks that are not named are dropped for good; queued ones
    /// not named stay queued. Every new block has another id than the one it
    /// replaces (another witness signs it). Returns the new tip.
    ///
    /// A reorg may reach below the solidified block, which java-tron never
    /// does: that is for testing what a watcher does when the impossible
    /// happens.
    pub fn reorg(&self, depth: u64, replacement: &[Vec<TxId>]) -> Result<u64, TronNodeError> {
        self.shared.reorg(depth, replacement)
    }
}

async fn bind(port: u16) -> Result<TcpListener, TronNodeError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpListener::bind(addr)
        .await
        .map_err(|source| TronNodeError::Io {
            context: format!("binding {addr}"),
            source,
        })
}

fn local_port(listener: &TcpListener) -> Result<u16, TronNodeError> {
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| TronNodeError::Io {
            context: "reading the bound port".to_owned(),
            source,
        })
}

fn spawn(router: Router, listener: TcpListener) -> Result<RunningServer, TronNodeError> {
    let incoming = TcpIncoming::from_listener(listener, true, None)
        .map_err(|e| TronNodeError::Server(format!("using the listener: {e}")))?;
    let (shutdown, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
        // A send or a drop of the sender both end the wait.
        let _ = stopped.await;
    }));
    Ok(RunningServer { shutdown, task })
}

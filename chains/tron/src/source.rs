//! A java-tron node as a [`BlockSource`], over its gRPC API: blocks by
//! number (ranges while catching up) with their transaction infos, read ahead
//! while the watcher writes; finality from the WalletSolidity service.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use paywatch_core::{
    AtHeight, BlockRef, BlockSource, FetchRange, Network, ReadAhead, SourceBlock, SourceError,
    WatchRead, WatchSet,
};
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tracing::warn;
use tron_grpc::wallet_client::WalletClient;
use tron_grpc::wallet_solidity_client::WalletSolidityClient;
use tron_grpc::{BlockExtention, BlockLimit, EmptyMessage, NumberMessage, TransactionInfo};

use crate::scan::{may_pay, scan, Tokens};
use crate::transport::{self, Budget, Paced};

/// java-tron answers `GetBlockByLimitNext2` with at most this many blocks.
pub const MAX_BLOCKS_PER_REQUEST: usize = 100;

/// A mainnet block of a few hundred transactions is about 100 kB with its
/// infos; a range of 100 stays well inside this.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct TronConfig {
    /// The full node's gRPC endpoint (java-tron: port 50051).
    pub url: String,
    /// The WalletSolidity endpoint (java-tron: port 50061); the full node's
    /// own when unset.
    pub solidity_url: Option<String>,
    pub tokens: Tokens,
    /// Blocks per range request, at most [`MAX_BLOCKS_PER_REQUEST`].
    pub blocks_per_request: usize,
    /// Ranges fetched ahead while the watcher writes.
    pub batches_in_flight: usize,
    /// `GetTransactionInfoByBlockNum` calls in flight within a range.
    pub infos_in_flight: usize,
    pub request_timeout: Duration,
    /// gRPC metadata sent with every request: a hosted provider's API key
    /// (TronGrid: `TRON-PRO-API-KEY`; others `x-token` and the like).
    pub metadata: Vec<(String, String)>,
    /// At most this many requests start per second (a provider's budget);
    /// zero for no limit of our own.
    pub requests_per_second: u32,
    /// A CA certificate (PEM) to trust besides the public roots, for an
    /// `https://` URL served with a private CA's certificate.
    pub ca_pem: Option<String>,
}

impl Default for TronConfig {
    fn default() -> Self {
        TronConfig {
            url: String::new(),
            solidity_url: None,
            tokens: Tokens::default(),
            blocks_per_request: MAX_BLOCKS_PER_REQUEST,
            batches_in_flight: 2,
            infos_in_flight: 8,
            request_timeout: Duration::from_secs(30),
            metadata: Vec::new(),
            requests_per_second: 0,
            ca_pem: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TronSetupError {
    #[error("url: {0}")]
    Url(String),
    #[error("solidity_url: {0}")]
    SolidityUrl(String),
    #[error("metadata: {0}")]
    Metadata(String),
}

/// A block and its infos as the node gave them, kept until asked for.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub(crate) height: u64,
    pub(crate) block: BlockExtention,
    /// `None` when the block could pay no watched address as the watch set
    /// stood at fetch time: no TRX to one, no contract call.
    pub(crate) infos: Option<Vec<TransactionInfo>>,
}

impl AtHeight for Fetched {
    fn height(&self) -> u64 {
        self.height
    }
}

#[derive(Debug)]
pub struct TronSource {
    shared: Arc<Shared>,
    ahead: Mutex<ReadAhead<Fetched>>,
}

#[derive(Debug)]
struct Shared {
    wallet: WalletClient<Paced<Channel>>,
    solidity: WalletSolidityClient<Paced<Channel>>,
    cfg: TronConfig,
    watch: Arc<WatchSet>,
    host: String,
    /// The node's height as last seen; read-ahead never passes it.
    known_tip: AtomicU64,
    /// A block with transactions whose infos came back empty, and how many
    /// times in a row: once by chance (a load balancer's lagging backend),
    /// every time when the node keeps no transaction history.
    empty_infos: std::sync::Mutex<(u64, u32)>,
    /// The tip as last read, whole (GetNowBlock2 answers the block with its
    /// transactions), and the solidified block (or the one read at the
    /// final height while that tip stood): neither is asked for again.
    memo: std::sync::Mutex<TipMemo>,
}

#[derive(Debug, Default)]
struct TipMemo {
    tip: Option<(BlockRef, BlockExtention)>,
    settled: Option<BlockRef>,
}

/// How many times in a row a block's infos may come back empty before the
/// node is taken to keep no transaction history.
const EMPTY_INFOS_BEFORE_HALT: u32 = 2;

/// A lazy channel to `url`: TLS for `https://` (the public roots, and
/// `ca_pem` when given), plain HTTP/2 for `http://`.
fn endpoint(url: &str, timeout: Duration, ca_pem: Option<&str>) -> Result<Channel, String> {
    let shown = shown_host(url);
    let mut e = Endpoint::from_shared(url.to_owned()).map_err(|e| format!("{shown}: {e}"))?;
    if url.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        if let Some(pem) = ca_pem {
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        e = e
            .tls_config(tls)
            .map_err(|e| format!("TLS for {shown}: {e}"))?;
    } else if !url.starts_with("http://") {
        return Err(format!(
            "{shown}: the URL must start with http:// or https://"
        ));
    }
    Ok(e.timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .tcp_nodelay(true)
        .connect_lazy())
}

impl TronSource {
    pub fn new(cfg: TronConfig, watch: Arc<WatchSet>) -> Result<TronSource, TronSetupError> {
        let ca = cfg.ca_pem.as_deref();
        let full = endpoint(&cfg.url, cfg.request_timeout, ca).map_err(TronSetupError::Url)?;
        let solid = match &cfg.solidity_url {
            Some(url) => {
                endpoint(url, cfg.request_timeout, ca).map_err(TronSetupError::SolidityUrl)?
            }
            None => full.clone(),
        };
        let metadata = transport::metadata(&cfg.metadata).map_err(TronSetupError::Metadata)?;
        let host = shown_host(&cfg.url);
        // One budget for both services: a provider counts them together.
        let budget = Arc::new(Budget::new(cfg.requests_per_second, host.clone()));
        let full = Paced::new(full, Arc::clone(&metadata), Arc::clone(&budget));
        let solid = Paced::new(solid, metadata, budget);
        let ahead = Mutex::new(ReadAhead::new(cfg.batches_in_flight));
        Ok(TronSource {
            shared: Arc::new(Shared {
                wallet: WalletClient::new(full).max_decoding_message_size(MAX_MESSAGE_BYTES),
                solidity: WalletSolidityClient::new(solid)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
                cfg,
                watch,
                host,
                known_tip: AtomicU64::new(0),
                empty_infos: std::sync::Mutex::new((0, 0)),
                memo: std::sync::Mutex::new(TipMemo::default()),
            }),
            ahead,
        })
    }

    /// The block at `height` as fetched, from read-ahead when it is there.
    async fn fetched(&self, height: u64) -> Result<Option<Fetched>, SourceError> {
        let mut ahead = self.ahead.lock().await;
        ahead.fetched(height, &self.shared).await
    }

    /// Infos skipped at fetch time are fetched now if an address issued
    /// since may be paid in the block.
    async fn complete(&self, f: &mut Fetched) -> Result<(), SourceError> {
        let wanted = f.infos.is_none() && may_pay(&f.block.transactions, &self.shared.watch.read());
        if wanted {
            f.infos = Some(infos_of(&self.shared, f.height).await?);
        }
        // Read ahead or just now: a failure clears the read-ahead, so each
        // try asks the node again.
        if f.infos.as_ref().is_some_and(|i| i.is_empty()) && !f.block.transactions.is_empty() {
            return Err(self.shared.missing_infos(f).await);
        }
        if f.infos.is_some() {
            self.shared.history_seen(f.height);
        }
        Ok(())
    }

    fn translate(&self, f: &Fetched) -> Result<SourceBlock, SourceError> {
        translate(f, &self.shared.cfg.tokens, &self.shared.watch.read())
    }
}

/// A fetched block as the watcher gets it. Free of the source, so the
/// fuzz entry (`fuzzing.rs`) runs the very same steps.
pub(crate) fn translate(
    f: &Fetched,
    tokens: &Tokens,
    watch: &WatchRead<'_>,
) -> Result<SourceBlock, SourceError> {
    let block = block_ref(&f.block, Some(f.height))?;
    // Without infos the block pays no watched address (see `complete`).
    let Some(infos) = &f.infos else {
        let timestamp_ms = header_raw(&f.block).map_or(0, |r| r.timestamp);
        return Ok(SourceBlock {
            block,
            timestamp: timestamp_ms.div_euclid(1000),
            transfers: Vec::new(),
        });
    };
    let transfers = scan(&f.block, infos, tokens, watch).map_err(|e| {
        SourceError::Transient(format!(
            "block {} at height {}: {e}",
            block.hash, block.height
        ))
    })?;
    let timestamp_ms = header_raw(&f.block).map_or(0, |r| r.timestamp);
    Ok(SourceBlock {
        block,
        timestamp: timestamp_ms.div_euclid(1000),
        transfers,
    })
}

impl FetchRange<Fetched> for Arc<Shared> {
    fn fetch_range(
        &self,
        from: u64,
        count: usize,
    ) -> impl Future<Output = Result<Vec<Fetched>, SourceError>> + Send + 'static {
        fetch_range(self.clone(), from, count)
    }

    fn batch_len(&self, from: u64) -> usize {
        Shared::batch_len(self, from)
    }
}

impl Shared {
    /// How many blocks the next range from `from` may hold: never past the
    /// node's tip as last seen.
    fn batch_len(&self, from: u64) -> usize {
        let tip = self.known_tip.load(Ordering::Relaxed);
        let room = tip.saturating_add(1).saturating_sub(from);
        let want = self.cfg.blocks_per_request.clamp(1, MAX_BLOCKS_PER_REQUEST) as u64;
        // Nothing past the tip: a block read there on speculation comes back
        // empty, and the one made meanwhile would wait for the next poll.
        // (A block asked for directly is fetched all the same.)
        room.min(want) as usize
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, TipMemo> {
        self.memo.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tip block as last read, when it is the one at `height`.
    fn tip_block(&self, height: u64) -> Option<BlockExtention> {
        let memo = self.memo();
        let (tip, block) = memo.tip.as_ref()?;
        (tip.height == height).then(|| block.clone())
    }

    /// A block's infos came back whole: any count of empty answers for it ends.
    fn history_seen(&self, height: u64) {
        let mut seen = self.empty_infos.lock().unwrap_or_else(|p| p.into_inner());
        if seen.0 == height {
            *seen = (0, 0);
        }
    }

    /// A block with transactions came back without infos. A node that keeps
    /// no transaction history (`storage.transHistory.switch = off`) answers
    /// so by transaction id too; a lagging or inconsistent backend does not.
    /// Only the first, seen again, halts the watcher.
    async fn missing_infos(&self, f: &Fetched) -> SourceError {
        let why = format!(
            "GetTransactionInfoByBlockNum at {} answers no transaction infos for block {}, \
             which has {} transactions",
            self.host,
            f.height,
            f.block.transactions.len()
        );
        let txid = f.block.transactions[0].txid.clone();
        let by_id = self
            .wallet
            .clone()
            .get_transaction_info_by_id(tron_grpc::BytesMessage { value: txid })
            .await;
        match by_id {
            Ok(info) if !info.get_ref().id.is_empty() => {
                return SourceError::Transient(format!(
                    "{why}, though it has the infos by transaction id: an inconsistent or \
                     lagging answer; asking again"
                ))
            }
            Ok(_) => {}
            Err(e) => return self.transient("GetTransactionInfoById", e),
        }
        let mut seen = self.empty_infos.lock().unwrap_or_else(|p| p.into_inner());
        *seen = if seen.0 == f.height {
            (f.height, seen.1 + 1)
        } else {
            (f.height, 1)
        };
        if seen.1 >= EMPTY_INFOS_BEFORE_HALT {
            return SourceError::Fatal(format!(
                "{why}, nor by transaction id, {} times in a row: the node keeps no transaction \
                 history (storage.transHistory.switch = off), so token payments cannot be seen. \
                 Turn it on (the node must then resync), or point rpc.url at a node that keeps it",
                seen.1
            ));
        }
        SourceError::Transient(format!(
            "{why}, nor by transaction id (storage.transHistory.switch = off on the node?)"
        ))
    }

    fn transient(&self, call: &str, status: tonic::Status) -> SourceError {
        // A Lite FullNode closes history queries; asking again never helps.
        if status.message().contains("lite fullnode") {
            return SourceError::Fatal(format!(
                "{call} at {}: {}: the node is a Lite FullNode, which closes the history queries \
                 paywatch reads. Set openHistoryQueryWhenLiteFN = true in its config (node \
                 section), or point rpc.url at a full node",
                self.host,
                status.message()
            ));
        }
        if status.code() == tonic::Code::ResourceExhausted || status.message().contains("429") {
            return SourceError::Transient(format!(
                "{call} at {}: the provider is throttling paywatch ({}); every request waits, \
                 longer while it lasts. Set rpc.requests_per_second within the plan's budget, \
                 or raise the plan",
                self.host,
                status.message()
            ));
        }
        if status.code() == tonic::Code::Unauthenticated
            || status.code() == tonic::Code::PermissionDenied
        {
            return SourceError::Transient(format!(
                "{call} at {}: the provider refused paywatch ({}: {}); check the API key in \
                 rpc.metadata",
                self.host,
                status.message(),
                status.code()
            ));
        }
        SourceError::Transient(format!(
            "{call} at {}: {} ({:?})",
            self.host,
            status.message(),
            status.code()
        ))
    }
}

/// Blocks `from..from+count` and their infos; stops at the first height the
/// node does not have. Every block must be the one asked for.
async fn fetch_range(
    shared: Arc<Shared>,
    from: u64,
    count: usize,
) -> Result<Vec<Fetched>, SourceError> {
    let blocks = if let Some(b) = (count == 1).then(|| shared.tip_block(from)).flatten() {
        // Following the chain, the block asked for is the tip just read.
        vec![b]
    } else if count == 1 {
        let b = shared
            .wallet
            .clone()
            .get_block_by_num2(NumberMessage { num: signed(from)? })
            .await
            .map_err(|e| shared.transient("GetBlockByNum2", e))?
            .into_inner();
        // An empty answer is how java-tron says there is no such block.
        if b.block_header.is_none() {
            Vec::new()
        } else {
            vec![b]
        }
    } else {
        shared
            .wallet
            .clone()
            .get_block_by_limit_next2(BlockLimit {
                start_num: signed(from)?,
                end_num: signed(from + count as u64)?,
            })
            .await
            .map_err(|e| shared.transient("GetBlockByLimitNext2", e))?
            .into_inner()
            .block
    };
    for (expected, b) in (from..).zip(&blocks) {
        let got = block_ref(b, None)?.height;
        if got != expected {
            return Err(SourceError::Transient(format!(
                "asked {} for block {expected}, it answered with block {got}",
                shared.host
            )));
        }
    }

    let mut infos: Vec<Option<Vec<TransactionInfo>>> = vec![None; blocks.len()];
    let mut calls = JoinSet::new();
    let mut next = 0;
    let limit = shared.cfg.infos_in_flight.max(1);
    while next < blocks.len() || !calls.is_empty() {
        while next < blocks.len() && calls.len() < limit {
            let height = from + next as u64;
            let wanted = may_pay(&blocks[next].transactions, &shared.watch.read());
            next += 1;
            if wanted {
                let s = shared.clone();
                calls.spawn(
                    async move { Ok::<_, SourceError>((height, infos_of(&s, height).await?)) },
                );
            }
        }
        if let Some(done) = calls.join_next().await {
            let (height, list) =
                done.map_err(|e| SourceError::Transient(format!("info task: {e}")))??;
            infos[(height - from) as usize] = Some(list);
        }
    }
    Ok(blocks
        .into_iter()
        .zip(infos)
        .enumerate()
        .map(|(i, (block, infos))| Fetched {
            height: from + i as u64,
            block,
            infos,
        })
        .collect())
}

async fn infos_of(shared: &Shared, height: u64) -> Result<Vec<TransactionInfo>, SourceError> {
    Ok(shared
        .wallet
        .clone()
        .get_transaction_info_by_block_num(NumberMessage {
            num: signed(height)?,
        })
        .await
        .map_err(|e| shared.transient("GetTransactionInfoByBlockNum", e))?
        .into_inner()
        .transaction_info)
}

fn signed(height: u64) -> Result<i64, SourceError> {
    i64::try_from(height)
        .map_err(|_| SourceError::Fatal(format!("height {height} is out of range")))
}

fn header_raw(b: &BlockExtention) -> Option<&tron_grpc::block_header::Raw> {
    b.block_header.as_ref()?.raw_data.as_ref()
}

/// A block's place: its number, its id (which begins with the number) and
/// its parent's id. `expect` checks the number against the one asked for.
pub(crate) fn block_ref(b: &BlockExtention, expect: Option<u64>) -> Result<BlockRef, SourceError> {
    let raw =
        header_raw(b).ok_or_else(|| SourceError::Transient("a block without a header".into()))?;
    let height = u64::try_from(raw.number)
        .map_err(|_| SourceError::Transient(format!("a block numbered {}", raw.number)))?;
    if let Some(want) = expect.filter(|w| *w != height) {
        return Err(SourceError::Transient(format!(
            "asked for block {want}, got block {height}"
        )));
    }
    if b.blockid.len() != 32 || b.blockid[..8] != height.to_be_bytes() {
        return Err(SourceError::Transient(format!(
            "block {height} has the id {}, which does not begin with its number",
            hex(&b.blockid)
        )));
    }
    Ok(BlockRef {
        height,
        hash: hex(&b.blockid),
        parent: hex(&raw.parent_hash),
    })
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The node's host and port, never a path or query that may hold an API key.
fn shown_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or(rest);
    host.rsplit_once('@').map_or(host, |(_, h)| h).to_owned()
}

#[async_trait]
impl BlockSource for TronSource {
    fn network(&self) -> Network {
        Network::Tron
    }

    /// Always: whether the node keeps internal transactions
    /// (`vm.saveInternalTx`) cannot be asked, and on a node that keeps them
    /// the balances simply agree.
    fn balance_backstop(&self) -> Option<paywatch_core::BalanceReads> {
        Some(paywatch_core::BalanceReads::LatestFinal)
    }

    async fn native_balances(
        &self,
        addresses: &[String],
        _at_height: u64,
    ) -> Result<Option<Vec<paywatch_core::NativeBalance>>, SourceError> {
        let shared = &self.shared;
        crate::balance::native_balances(shared.solidity.clone(), addresses, |e| {
            shared.transient("WalletSolidity/GetAccount", e)
        })
        .await
        .map(Some)
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        let b = self
            .shared
            .wallet
            .clone()
            .get_now_block2(EmptyMessage {})
            .await
            .map_err(|e| self.shared.transient("GetNowBlock2", e))?
            .into_inner();
        let tip = block_ref(&b, None)?;
        self.shared.known_tip.store(tip.height, Ordering::Relaxed);
        let mut memo = self.shared.memo();
        if memo.tip.as_ref().is_none_or(|(t, _)| t.hash != tip.hash) {
            *memo = TipMemo {
                tip: Some((tip.clone(), b)),
                settled: None,
            };
        }
        Ok(tip)
    }

    /// The latest solidified block: confirmed by 2/3 of the super
    /// representatives (19 blocks, about a minute), and irreversible.
    async fn final_height(&self) -> Result<u64, SourceError> {
        let b = self
            .shared
            .solidity
            .clone()
            .get_now_block2(EmptyMessage {})
            .await
            .map_err(|e| {
                // A FullNode port answers this for ever: it is the
                // configuration, not the node, that must change.
                if e.code() == tonic::Code::Unimplemented {
                    return SourceError::Fatal(format!(
                        "{} does not serve WalletSolidity/GetNowBlock2 (UNIMPLEMENTED): \
                         rpc.solidity_url must name the node's solidity port (java-tron: 50061), \
                         not its FullNode port; until then no payment can become final",
                        shown_host(
                            self.shared
                                .cfg
                                .solidity_url
                                .as_deref()
                                .unwrap_or(&self.shared.cfg.url)
                        )
                    ));
                }
                self.shared.transient("WalletSolidity/GetNowBlock2", e)
            })?
            .into_inner();
        let solid = block_ref(&b, None)?;
        // Irreversible: the final-height check that follows needs no read
        // of its own for it.
        let height = solid.height;
        self.shared.memo().settled = Some(solid);
        Ok(height)
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        let Some(mut f) = self.fetched(height).await? else {
            return Ok(None);
        };
        // Infos are asked by number, so after a reorg they may be another
        // branch's: the scan refuses infos that do not match the block's
        // transactions, and a block whose id changes is disconnected by the
        // canonical stream and read again with fresh infos.
        let done = match self.complete(&mut f).await {
            Ok(()) => self.translate(&f),
            Err(e) => Err(e),
        };
        if let Err(e) = &done {
            warn!(error = %e, height, "unusable answer; nothing from it is recorded");
            self.ahead.lock().await.clear();
        }
        done.map(Some)
    }

    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, SourceError> {
        // The chain below an unchanged tip is unchanged.
        let (known, tip) = {
            let memo = self.shared.memo();
            let tip = memo.tip.as_ref().map(|(t, _)| t.clone());
            let known = [tip.clone(), memo.settled.clone()]
                .into_iter()
                .flatten()
                .find(|b| b.height == height);
            (known, tip)
        };
        if known.is_some() {
            return Ok(known);
        }
        let b = self
            .shared
            .wallet
            .clone()
            .get_block_by_num2(NumberMessage {
                num: signed(height)?,
            })
            .await
            .map_err(|e| self.shared.transient("GetBlockByNum2", e))?
            .into_inner();
        if b.block_header.is_none() {
            return Ok(None);
        }
        let found = block_ref(&b, Some(height))?;
        let mut memo = self.shared.memo();
        if tip.is_some() && memo.tip.as_ref().map(|(t, _)| &t.hash) == tip.as_ref().map(|t| &t.hash)
        {
            memo.settled = Some(found.clone());
        }
        Ok(Some(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_shown_without_credentials_or_paths() {
        assert_eq!(
            shown_host("http://user:key@grpc.example:50051/x?k=1"),
            "grpc.example:50051"
        );
        assert_eq!(shown_host("127.0.0.1:50051"), "127.0.0.1:50051");
    }
}

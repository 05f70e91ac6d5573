//! A Solana RPC node as a [`BlockSource`], over plain JSON-RPC (HTTP POST):
//! heights are slots, blocks come from `getBlock` and the produced slots of a
//! window from `getBlocksWithLimit`; finality is the `finalized` commitment.
//!
//! # Skipped slots
//!
//! Most slots hold a block, some are skipped (their leader produced
//! nothing). The [`CanonicalStream`](paywatch_core::CanonicalStream) asks
//! for consecutive heights and links each block to the one below by hash, and
//! takes `None` for "the chain ends here". So a skipped slot is presented as
//! an empty block of its own, named after the produced block before it:
//!
//! - skipped slot `k` after the produced block `H` has the hash
//!   `skipped:<k>:<H>` (see [`skipped_hash`]), and its parent is `H` when
//!   `k - 1` is `H`'s slot, else `skipped:<k-1>:<H>`;
//! - a produced block whose `parentSlot` is not the slot right below it gets
//!   as parent `skipped:<slot-1>:<previousBlockhash>`, the hash of the
//!   skipped slot right below it.
//!
//! Both are worked out from a produced block's own `parentSlot` and
//! `previousBlockhash` (the skipped slots below it), never from the order in
//! which they were fetched, so the same chain always gives the same hashes,
//! and a fork that skips other slots, or builds on another block, gives other
//! ones: the stream sees it as the reorg it is.
//!
//! A skipped slot is only presented once a produced block above it is
//! known; until then the chain ends below it (`None`).
//!
//! # Following the tip
//!
//! Public endpoints budget each method on its own (40 calls per 10 s on
//! api.mainnet-beta) and a slot comes every 400 ms, so once the watcher has
//! been handed everything up to the tip, [`tip`](BlockSource::tip) asks
//! only for what is new: one `getBlocksWithLimit` from the slot past the
//! tip, and, when that lists fewer slots than a window (nothing left to
//! catch up), their blocks read whole. Those become the watcher's next
//! window, so each new block is read once, and the tip is the newest of
//! them; no `getSlot`, no header read apart from the body. A full list
//! means the watcher is behind: the tip is then `getSlot` and a header read,
//! and the read-ahead fetches windows as it does from a restart.
//!
//! The final-height check reads the block at `finalized` commitment, once
//! per height: a finalized block never changes.
//!
//! # Blocks not served yet
//!
//! The slot `getSlot` names may not be served by `getBlock` yet: agave
//! answers -32014 while it writes the block, and a load-balanced provider
//! whose getBlock backend trails its getSlot one answers so (or -32004, or
//! null) for every newest slot. That is no failure: the tip is then the
//! newest block that is served, and the next step asks again.
//!
//! # Slots a node no longer has
//!
//! A node's "cleaned up" answer (or a first available block above the slot
//! needed) is asked again at once over new connections, and halts the
//! watcher, advising `accept-gap`, only once several answers over some time
//! agree (see [`SolanaConfig::gap_confirmation`]): behind a balancer, one
//! backend restored from a snapshot says so while the others hold the slot.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use paywatch_core::{
    AtHeight, BlockRef, BlockSource, FetchRange, Network, Pacer, ReadAhead, SourceBlock,
    SourceError, WatchSet,
};
use reqwest::header::RETRY_AFTER;
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use solana_transaction_status_client_types::UiConfirmedBlock;
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::answer::{decode_answer, decode_get_block, AnswerError};
use crate::gap::{first_available_in, GapClaims, GapConfirmation, Verdict};
use crate::scan::scan_block;

/// The wait after a 429 that names none (or one we cannot read).
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest `Retry-After` followed; longer ones are capped.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Slots per window at most; a mainnet block is a few MB of JSON.
pub const MAX_BLOCKS_PER_REQUEST: usize = 100;

#[derive(Debug, Clone)]
pub struct SolanaConfig {
    /// The node's JSON-RPC endpoint (`http://host:8899`).
    pub url: String,
    /// The cluster's genesis hash; when set, a node answering
    /// `getGenesisHash` with another is refused (a fatal error).
    pub genesis_hash: Option<String>,
    /// Follow the `confirmed` commitment (payments show as confirming about
    /// 13 s before they are final) rather than only `finalized` blocks.
    /// Finality is always `finalized`.
    pub show_confirmed: bool,
    /// Requests started per second at most; zero for no limit of our own.
    pub max_requests_per_second: u32,
    /// Slots per window (one `getBlocksWithLimit`, then that many `getBlock`
    /// calls at once), at most [`MAX_BLOCKS_PER_REQUEST`].
    pub blocks_per_request: usize,
    /// Windows fetched ahead while the watcher writes.
    pub batches_in_flight: usize,
    pub request_timeout: Duration,
    /// When a node's word that it no longer has a slot is taken as a gap
    /// (see [`crate::gap`]).
    pub gap_confirmation: GapConfirmation,
}

impl Default for SolanaConfig {
    fn default() -> Self {
        SolanaConfig {
            url: String::new(),
            genesis_hash: None,
            show_confirmed: true,
            max_requests_per_second: 10,
            blocks_per_request: 8,
            batches_in_flight: 2,
            request_timeout: Duration::from_secs(30),
            gap_confirmation: GapConfirmation::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SolanaSetupError {
    #[error("url {0:?}: not an http(s) URL")]
    Url(String),
    #[error("http client: {0}")]
    Client(String),
}

/// The hash given to the skipped slot `slot`, the produced block before it
/// being `previous`.
pub fn skipped_hash(slot: u64, previous: &str) -> String {
    format!("skipped:{slot}:{previous}")
}

/// What one slot holds, as fetched.
#[derive(Debug)]
struct Fetched {
    block: BlockRef,
    timestamp: i64,
    /// `None` for a skipped slot.
    body: Option<Box<UiConfirmedBlock>>,
}

impl AtHeight for Fetched {
    fn height(&self) -> u64 {
        self.block.height
    }
}

/// A produced block's place, from its header.
#[derive(Debug, Clone)]
struct Header {
    slot: u64,
    parent_slot: u64,
    hash: String,
    previous: String,
    time: i64,
}

impl Header {
    fn of(slot: u64, b: &UiConfirmedBlock) -> Result<Header, SourceError> {
        let r = crate::scan::block_ref(slot, b)
            .map_err(|e| SourceError::Transient(format!("getBlock {slot}: {e}")))?;
        Ok(Header {
            slot,
            parent_slot: b.parent_slot,
            hash: r.hash,
            previous: r.parent,
            time: b.block_time.unwrap_or(0),
        })
    }

    /// The parent as the stream links it: the skipped slot right below when
    /// there is one.
    fn block_ref(&self) -> BlockRef {
        BlockRef {
            height: self.slot,
            hash: self.hash.clone(),
            parent: self.parent_at(self.slot.saturating_sub(1)),
        }
    }

    /// The hash at `slot`, for `parent_slot <= slot < self.slot`.
    fn parent_at(&self, slot: u64) -> String {
        if slot <= self.parent_slot {
            self.previous.clone()
        } else {
            skipped_hash(slot, &self.previous)
        }
    }

    /// The skipped slot `slot` below this block.
    fn skipped(&self, slot: u64) -> Fetched {
        Fetched {
            block: BlockRef {
                height: slot,
                hash: skipped_hash(slot, &self.previous),
                parent: self.parent_at(slot.saturating_sub(1)),
            },
            timestamp: self.time,
            body: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Details {
    Accounts,
    None,
}

#[derive(Debug)]
pub struct SolanaSource {
    shared: Arc<Shared>,
    ahead: Mutex<ReadAhead<Fetched>>,
}

#[derive(Debug)]
struct Shared {
    http: reqwest::Client,
    /// A client that keeps no connection open, for second opinions: behind
    /// a balancer that routes by connection, a new one may reach another
    /// backend.
    fresh: reqwest::Client,
    cfg: SolanaConfig,
    watch: Arc<WatchSet>,
    host: String,
    pacer: Pacer,
    /// The slot of the tip as last seen; read-ahead never passes it.
    known_tip: AtomicU64,
    /// The tip as last read whole, given again while the node's newest
    /// block is not yet served.
    last_tip: std::sync::Mutex<Option<BlockRef>>,
    /// One past the height last handed to the stream: past the last tip,
    /// the watcher is caught up and [`tip`](BlockSource::tip) reads only
    /// what is new.
    served_to: AtomicU64,
    /// The blocks read with the tip, ascending, for the stream's next ask.
    window: std::sync::Mutex<Option<Vec<Fetched>>>,
    /// The last block checked at `finalized` commitment.
    final_checked: std::sync::Mutex<Option<BlockRef>>,
    genesis_checked: AtomicBool,
    /// Answers saying a needed slot is gone, until confirmed or dismissed.
    gaps: std::sync::Mutex<GapClaims>,
}

impl SolanaSource {
    pub fn new(cfg: SolanaConfig, watch: Arc<WatchSet>) -> Result<SolanaSource, SolanaSetupError> {
        if !(cfg.url.starts_with("http://") || cfg.url.starts_with("https://")) {
            return Err(SolanaSetupError::Url(shown_host(&cfg.url)));
        }
        let client = || {
            reqwest::Client::builder()
                .timeout(cfg.request_timeout)
                .connect_timeout(cfg.request_timeout.min(Duration::from_secs(10)))
                .tcp_nodelay(true)
        };
        let built = |b: reqwest::ClientBuilder| {
            b.build()
                .map_err(|e| SolanaSetupError::Client(e.without_url().to_string()))
        };
        let http = built(client())?;
        let fresh = built(client().pool_max_idle_per_host(0))?;
        let ahead = Mutex::new(ReadAhead::new(cfg.batches_in_flight));
        Ok(SolanaSource {
            shared: Arc::new(Shared {
                http,
                fresh,
                host: shown_host(&cfg.url),
                pacer: Pacer::new(cfg.max_requests_per_second),
                cfg,
                watch,
                known_tip: AtomicU64::new(0),
                last_tip: std::sync::Mutex::new(None),
                served_to: AtomicU64::new(0),
                window: std::sync::Mutex::new(None),
                final_checked: std::sync::Mutex::new(None),
                genesis_checked: AtomicBool::new(false),
                gaps: std::sync::Mutex::new(GapClaims::default()),
            }),
            ahead,
        })
    }

    fn translate(&self, f: Fetched) -> Result<SourceBlock, SourceError> {
        let transfers = match &f.body {
            None => Vec::new(),
            Some(body) => scan_block(body, &self.shared.watch.read()).map_err(|e| {
                SourceError::Transient(format!(
                    "block {} at slot {}: {e}",
                    f.block.hash, f.block.height
                ))
            })?,
        };
        Ok(SourceBlock {
            block: f.block,
            timestamp: f.timestamp,
            transfers,
        })
    }
}

impl FetchRange<Fetched> for Arc<Shared> {
    fn fetch_range(
        &self,
        from: u64,
        count: usize,
    ) -> impl Future<Output = Result<Vec<Fetched>, SourceError>> + Send + 'static {
        let read_with_tip = self.take_window(from).map(|mut w| {
            w.truncate(count);
            w
        });
        let shared = self.clone();
        async move {
            match read_with_tip {
                Some(window) => Ok(window),
                None => fetch_range(shared, from, count, Details::Accounts).await,
            }
        }
    }

    /// The window read with the tip when it starts at `from`; else the
    /// batch size up to the tip as last seen, and nothing past it (a new
    /// block is found by the next [`tip`](BlockSource::tip), not by
    /// reading on speculation).
    fn batch_len(&self, from: u64) -> usize {
        if let Some(len) = lock(&self.window)
            .as_ref()
            .filter(|w| w.first().is_some_and(|f| f.block.height == from))
            .map(Vec::len)
        {
            return len;
        }
        let tip = self.known_tip.load(Ordering::Relaxed);
        let room = tip.saturating_add(1).saturating_sub(from);
        room.min(self.window_len() as u64) as usize
    }
}

/// A poisoned lock only means a panic elsewhere; what it guards is whole.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Slots per window.
    fn window_len(&self) -> usize {
        self.cfg.blocks_per_request.clamp(1, MAX_BLOCKS_PER_REQUEST)
    }

    /// The window read with the tip, when it starts at `from`. Any other
    /// ask drops it: the stream went elsewhere (a reorg walk).
    fn take_window(&self, from: u64) -> Option<Vec<Fetched>> {
        lock(&self.window)
            .take()
            .filter(|w| w.first().is_some_and(|f| f.block.height == from))
    }

    fn last_tip(&self) -> Option<BlockRef> {
        lock(&self.last_tip).clone()
    }

    fn remember_tip(&self, tip: &BlockRef) {
        self.known_tip.store(tip.height, Ordering::Relaxed);
        *lock(&self.last_tip) = Some(tip.clone());
    }

    /// The commitment the watcher follows.
    fn following(&self) -> &'static str {
        if self.cfg.show_confirmed {
            "confirmed"
        } else {
            "finalized"
        }
    }

    /// One JSON-RPC call; its `result` as `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, SourceError> {
        self.call_via(&self.http, method, params).await
    }

    /// [`call`](Self::call) through `http`.
    async fn call_via<T: DeserializeOwned>(
        &self,
        http: &reqwest::Client,
        method: &str,
        params: Value,
    ) -> Result<T, SourceError> {
        let body = self.post_via(http, method, params).await?;
        decode_answer(&body)
            .map_err(|e| SourceError::Transient(format!("{method} at {}: {e}", self.host)))
    }

    /// One JSON-RPC request; the answer's body, once the HTTP status is OK.
    async fn post(&self, method: &str, params: Value) -> Result<Bytes, SourceError> {
        self.post_via(&self.http, method, params).await
    }

    /// [`post`](Self::post) through `http`.
    async fn post_via(
        &self,
        http: &reqwest::Client,
        method: &str,
        params: Value,
    ) -> Result<Bytes, SourceError> {
        self.pacer.acquire().await;
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let transient =
            |what: String| SourceError::Transient(format!("{method} at {}: {what}", self.host));
        let response = http
            .post(&self.cfg.url)
            .json(&body)
            .send()
            .await
            .map_err(|e| transient(e.without_url().to_string()))?;
        let status = response.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let wait = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| paywatch_core::retry_after(v, MAX_RETRY_AFTER))
                .unwrap_or(DEFAULT_RETRY_AFTER);
            self.pacer.pause(wait);
            warn!(host = %self.host, method, wait_secs = wait.as_secs(), "rate limited by the node");
            return Err(transient(format!(
                "rate limited (HTTP 429); no requests for {} s",
                wait.as_secs()
            )));
        }
        if !status.is_success() {
            return Err(transient(format!("HTTP {status}")));
        }
        response
            .bytes()
            .await
            .map_err(|e| transient(e.without_url().to_string()))
    }

    async fn slot(&self, commitment: &str) -> Result<u64, SourceError> {
        self.call("getSlot", json!([{ "commitment": commitment }]))
            .await
    }

    async fn get_block(
        &self,
        slot: u64,
        details: Details,
        commitment: &str,
    ) -> Result<UiConfirmedBlock, SourceError> {
        self.get_block_answer(slot, details, commitment)
            .await?
            .map_err(|e| self.refused(slot, e))
    }

    /// A `getBlock` the node refused, as an error of ours.
    fn refused(&self, slot: u64, e: AnswerError) -> SourceError {
        let why = match e {
            AnswerError::NoResult => format!("no block at slot {slot}"),
            // Asking again never brings a cleaned-up block back, once every
            // backend agrees it is gone.
            AnswerError::Rpc {
                code: BLOCK_CLEANED_UP,
                message,
            } => {
                let first = first_available_in(&message);
                let says = first.map_or(message, |f| format!("its first available block is {f}"));
                return self.gap_claimed(slot, &says, first);
            }
            e => format!("slot {slot}: {e}"),
        };
        SourceError::Transient(format!("getBlock at {}: {why}", self.host))
    }

    /// The oldest block the node still serves (`getFirstAvailableBlock`).
    async fn first_available(&self) -> Result<u64, SourceError> {
        self.call("getFirstAvailableBlock", json!([])).await
    }

    /// One more answer saying `slot` is gone (`node_says` how, `first` the
    /// node's first available block when known): a transient error until
    /// enough answers over enough time confirm it, then the fatal one that
    /// names the ways out.
    fn gap_claimed(&self, slot: u64, node_says: &str, first: Option<u64>) -> SourceError {
        let rule = self.cfg.gap_confirmation;
        match lock(&self.gaps).claim(slot, first, rule) {
            Verdict::Unconfirmed {
                answers,
                needed,
                wait,
            } => {
                warn!(host = %self.host, slot, answers, "the node says a needed slot is gone; asking again before taking it as a gap");
                SourceError::Transient(format!(
                    "the node at {} says it no longer has slot {slot} ({node_says}); not yet \
                     taken as a gap: a backend just restored from a snapshot says so while the \
                     others behind the same balancer still hold the slot. Answer {answers}; a gap \
                     is confirmed by {needed} over {} s ({} s to go)",
                    self.host,
                    rule.over.as_secs(),
                    wait.as_secs()
                ))
            }
            Verdict::Confirmed {
                slot,
                first_available,
            } => {
                let says = match first_available {
                    Some(f) => format!("its first available block is {f}"),
                    None => node_says.to_owned(),
                };
                SourceError::Fatal(self.cleaned_up(slot, &says, first_available, rule))
            }
        }
    }

    /// Why a watcher that needs `slot` cannot go on at this node: what it
    /// cleaned up, and the two ways out.
    /// `first` is the node's first available block, when known.
    fn cleaned_up(
        &self,
        slot: u64,
        node_says: &str,
        first: Option<u64>,
        rule: GapConfirmation,
    ) -> String {
        let resume_at = first.map_or_else(
            || "<its first available slot>".to_owned(),
            |f| f.to_string(),
        );
        format!(
            "the node at {} no longer has slot {slot} ({node_says}; {} answers over {} s \
             agreed): paywatch needs every block from slot {slot} on, and payments in the gap would be lost if it skipped \
             ahead. Point rpc.url at a node or provider that keeps history back to slot \
             {slot} (agave with --enable-rpc-bigtable-ledger-storage, or an archive \
             provider) and restart; or, giving up on seeing payments in the skipped slots, \
             run `paywatch chain accept-gap --network solana --resume-at {resume_at} --by \
             NAME --reason TEXT` (the gap stays on record) and restart",
            self.host,
            rule.answers,
            rule.over.as_secs()
        )
    }

    /// `getBlock`, the node's own refusal kept apart from a failed request.
    async fn get_block_answer(
        &self,
        slot: u64,
        details: Details,
        commitment: &str,
    ) -> Result<Result<UiConfirmedBlock, AnswerError>, SourceError> {
        let details = match details {
            // Account keys, balances and token balances: all a payment is
            // read from, without instructions or logs (a mainnet block's
            // bulk). See `scan`.
            Details::Accounts => "accounts",
            Details::None => "none",
        };
        let params = json!([slot, {
            "encoding": "base64",
            "transactionDetails": details,
            "rewards": false,
            "maxSupportedTransactionVersion": 0,
            "commitment": commitment,
        }]);
        let body = self.post("getBlock", params.clone()).await?;
        let mut answer = decode_get_block(&body);
        // One backend's "cleaned up" is checked with others at once, over
        // new connections: a restored backend must not fail a window that
        // its neighbours serve.
        for _ in 0..SECOND_OPINIONS {
            if !answer.as_ref().is_err_and(says_cleaned_up) {
                break;
            }
            let body = self
                .post_via(&self.fresh, "getBlock", params.clone())
                .await?;
            answer = decode_get_block(&body);
        }
        Ok(answer)
    }

    /// The produced slots from `from` on, `limit` of them at most.
    async fn produced(&self, from: u64, limit: usize) -> Result<Vec<u64>, SourceError> {
        self.produced_via(&self.http, from, limit).await
    }

    /// [`produced`](Self::produced) through `http`.
    async fn produced_via(
        &self,
        http: &reqwest::Client,
        from: u64,
        limit: usize,
    ) -> Result<Vec<u64>, SourceError> {
        let slots: Vec<u64> = self
            .call_via(
                http,
                "getBlocksWithLimit",
                json!([from, limit, { "commitment": self.following() }]),
            )
            .await?;
        if slots.first().is_some_and(|s| *s < from) || slots.windows(2).any(|w| w[0] >= w[1]) {
            return Err(SourceError::Transient(format!(
                "getBlocksWithLimit at {} from {from}: slots out of order",
                self.host
            )));
        }
        Ok(slots)
    }

    async fn check_genesis(&self) -> Result<(), SourceError> {
        let Some(want) = &self.cfg.genesis_hash else {
            return Ok(());
        };
        if self.genesis_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let got: String = self.call("getGenesisHash", json!([])).await?;
        if got != *want {
            return Err(SourceError::Fatal(format!(
                "the node at {} is on another cluster: genesis hash {got}, expected {want}",
                self.host
            )));
        }
        self.genesis_checked.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// Slots `from..from + count` as far as they are known: produced blocks as
/// they are, skipped slots named after the produced block below them (see
/// the module docs). Trailing skipped slots are only given when a produced
/// block above them is known; otherwise the answer is short.
async fn fetch_range(
    shared: Arc<Shared>,
    from: u64,
    count: usize,
    details: Details,
) -> Result<Vec<Fetched>, SourceError> {
    let listed = shared.produced(from, count).await?;
    fetch_relisting(shared, from, count, listed, details, NotYet::Fails).await
}

/// A list of produced slots that starts later than the window: the blocks
/// below its first are missing from it.
#[derive(Debug)]
struct StartsLate;

/// [`fetch_listed`], asking for the list again over new connections when
/// it starts late: behind a balancer, a backend restored from a snapshot
/// lists only from its first block while the others list the window whole.
async fn fetch_relisting(
    shared: Arc<Shared>,
    from: u64,
    count: usize,
    mut listed: Vec<u64>,
    details: Details,
    not_yet_served: NotYet,
) -> Result<Vec<Fetched>, SourceError> {
    let mut relists = 0;
    loop {
        let may_relist = relists < SECOND_OPINIONS;
        let got = fetch_listed(
            shared.clone(),
            from,
            count,
            &listed,
            details,
            not_yet_served,
            may_relist,
        )
        .await?;
        match got {
            Ok(window) => return Ok(window),
            Err(StartsLate) => {
                relists += 1;
                listed = shared.produced_via(&shared.fresh, from, count).await?;
            }
        }
    }
}

/// What a listed block the node does not serve yet does to a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotYet {
    /// It fails the window: the stream asked for it, and asks again.
    Fails,
    /// The window ends below it: read with the tip, the newest block may
    /// still be being written (agave -32014; providers -32004, or null).
    EndsBelow,
}

/// [`fetch_range`] once the produced slots from `from` on are `listed`.
async fn fetch_listed(
    shared: Arc<Shared>,
    from: u64,
    count: usize,
    listed: &[u64],
    details: Details,
    not_yet_served: NotYet,
    may_relist: bool,
) -> Result<Result<Vec<Fetched>, StartsLate>, SourceError> {
    let mut end = from + count as u64;
    let inside: Vec<u64> = listed.iter().copied().filter(|s| *s < end).collect();
    let mut above = listed.iter().copied().find(|s| *s >= end);
    let commitment = shared.following();

    // Every produced block of the window at once (the pacer spaces them).
    let mut calls = JoinSet::new();
    for slot in inside.iter().copied() {
        let s = shared.clone();
        calls.spawn(async move {
            let b = s.get_block_answer(slot, details, commitment).await?;
            Ok::<_, SourceError>((slot, b))
        });
    }
    let mut answers = Vec::with_capacity(inside.len());
    while let Some(done) = calls.join_next().await {
        answers.push(done.map_err(|e| SourceError::Transient(format!("getBlock task: {e}")))??);
    }
    answers.sort_by_key(|(slot, _)| *slot);
    if not_yet_served == NotYet::EndsBelow {
        if let Some(first) = answers
            .iter()
            .position(|(_, a)| a.as_ref().is_err_and(not_yet))
        {
            // The skipped slots right below it are named after it: they
            // wait for it too.
            answers.truncate(first);
            end = answers.last().map_or(from, |(slot, _)| slot + 1);
            above = None;
        }
    }
    let mut blocks: Vec<(u64, UiConfirmedBlock)> = Vec::with_capacity(answers.len());
    for (slot, answer) in answers {
        blocks.push((slot, answer.map_err(|e| shared.refused(slot, e))?));
    }

    // The block above the window names the skipped slots at its end.
    let trailing = inside.last().map_or(count > 0, |last| last + 1 < end);
    let above = match above {
        Some(slot) if trailing => {
            let b = shared.get_block(slot, Details::None, commitment).await?;
            Some(Header::of(slot, &b)?)
        }
        _ => None,
    };

    let mut out = Vec::with_capacity(usize::try_from(end - from).unwrap_or(count));
    let mut next = from;
    let mut last_produced: Option<u64> = None;
    let mut anchors: Vec<(Header, Option<UiConfirmedBlock>)> = Vec::new();
    for (slot, b) in blocks {
        anchors.push((Header::of(slot, &b)?, Some(b)));
    }
    if let Some(h) = above {
        anchors.push((h, None));
    }
    for (header, body) in anchors {
        // The node's list of produced slots and the block's parent agree.
        let consistent = match last_produced {
            Some(prev) => header.parent_slot == prev,
            None => header.parent_slot < from || (header.slot == 0 && from == 0),
        };
        if !consistent && last_produced.is_none() {
            if may_relist {
                return Ok(Err(StartsLate));
            }
            // A node without long-term storage lists produced slots only
            // from its first available block: a watcher behind that finds
            // its window starting too late, not an inconsistent node.
            let first = shared.first_available().await?;
            if from < first {
                return Err(shared.gap_claimed(
                    from,
                    &format!("its first available block is {first}"),
                    Some(first),
                ));
            }
        }
        if !consistent {
            return Err(SourceError::Transient(format!(
                "{}: block {} at slot {} has parent slot {}, but the produced slots listed from \
                 {from} disagree",
                shared.host, header.hash, header.slot, header.parent_slot
            )));
        }
        for skipped in next..header.slot.min(end) {
            out.push(header.skipped(skipped));
        }
        if let Some(body) = body {
            out.push(Fetched {
                block: header.block_ref(),
                timestamp: header.time,
                body: matches!(details, Details::Accounts).then(|| Box::new(body)),
            });
        }
        next = header.slot + 1;
        last_produced = Some(header.slot);
    }
    debug!(from, count, got = out.len(), "fetched slots");
    debug_assert!(out.len() <= count);
    Ok(Ok(out))
}

/// The node's host and port, never a path or query that may hold an API key.
fn shown_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or(rest);
    host.rsplit_once('@').map_or(host, |(_, h)| h).to_owned()
}

#[async_trait]
impl BlockSource for SolanaSource {
    fn network(&self) -> Network {
        Network::Solana
    }

    /// The latest block at the commitment followed (`confirmed` when
    /// `show_confirmed`, else `finalized`). Once the stream has everything
    /// up to the last tip, only what is new is read (see the module docs).
    async fn tip(&self) -> Result<BlockRef, SourceError> {
        self.shared.check_genesis().await?;
        let caught_up = self
            .shared
            .last_tip()
            .filter(|t| t.height < self.shared.served_to.load(Ordering::Relaxed));
        match caught_up {
            Some(last) => self.tip_past(last).await,
            None => self.tip_at_slot().await,
        }
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        self.shared.slot("finalized").await
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        let mut ahead = self.ahead.lock().await;
        let Some(f) = ahead.fetched(height, &self.shared).await? else {
            return Ok(None);
        };
        let done = self.translate(f);
        match &done {
            Ok(_) => {
                self.shared.served_to.store(height + 1, Ordering::Relaxed);
                lock(&self.shared.gaps).served(height);
            }
            Err(e) => {
                warn!(error = %e, slot = height, "unusable answer; nothing from it is recorded");
                ahead.clear();
            }
        }
        done.map(Some)
    }

    /// Asked only to check the final height: the block as finalized (a
    /// header, `transactionDetails: "none"`), kept since it never changes.
    /// A slot the node skipped, or has not finalized by the time it is
    /// asked (a lagging backend), is read at the commitment followed.
    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, SourceError> {
        if let Some(known) = lock(&self.shared.final_checked)
            .as_ref()
            .filter(|b| b.height == height)
        {
            return Ok(Some(known.clone()));
        }
        match self
            .shared
            .get_block_answer(height, Details::None, "finalized")
            .await?
        {
            Ok(b) => {
                let found = Header::of(height, &b)?.block_ref();
                *lock(&self.shared.final_checked) = Some(found.clone());
                Ok(Some(found))
            }
            Err(e) if not_yet(&e) || skipped(&e) => {
                let got = fetch_range(self.shared.clone(), height, 1, Details::None).await?;
                Ok(got.into_iter().next().map(|f| f.block))
            }
            Err(e) => Err(self.shared.refused(height, e)),
        }
    }
}

impl SolanaSource {
    /// The tip when the stream has everything up to `last`: the produced
    /// slots past it, read whole as the stream's next window when they are
    /// all there is; `last` again when nothing is new.
    async fn tip_past(&self, last: BlockRef) -> Result<BlockRef, SourceError> {
        let from = last.height + 1;
        let limit = self.shared.window_len();
        let listed = self.shared.produced(from, limit).await?;
        if listed.len() >= limit {
            // More than a window is new: catching up, window by window.
            return self.tip_at_slot().await;
        }
        let Some(&newest) = listed.last() else {
            return Ok(last);
        };
        let count = usize::try_from(newest - from + 1).unwrap_or(usize::MAX);
        let window = fetch_relisting(
            self.shared.clone(),
            from,
            count,
            listed,
            Details::Accounts,
            NotYet::EndsBelow,
        )
        .await?;
        let Some(tip) = window.last().map(|f| f.block.clone()) else {
            return Ok(last);
        };
        self.shared.remember_tip(&tip);
        *lock(&self.shared.window) = Some(window);
        Ok(tip)
    }

    /// The tip by `getSlot` and that block's header; the last tip again
    /// when the slot has not moved.
    async fn tip_at_slot(&self) -> Result<BlockRef, SourceError> {
        let commitment = self.shared.following();
        let slot = self.shared.slot(commitment).await?;
        let last = self.shared.last_tip();
        if let Some(last) = last.as_ref().filter(|t| t.height == slot) {
            return Ok(last.clone());
        }
        let b = match self
            .shared
            .get_block_answer(slot, Details::None, commitment)
            .await?
        {
            Ok(b) => b,
            // The slot getSlot just named is still being written (agave
            // -32014), or the provider's getBlock backend trails its getSlot
            // one (-32004, or null): "not yet", not a failing node. The tip
            // is the newest block that is served.
            Err(e) if not_yet(&e) => return self.tip_below(slot, last).await,
            Err(e) => {
                return Err(SourceError::Transient(format!(
                    "getBlock at {}: slot {slot}: {e}",
                    self.shared.host
                )))
            }
        };
        let tip = Header::of(slot, &b)?.block_ref();
        self.shared.remember_tip(&tip);
        Ok(tip)
    }

    /// The newest block the node serves below `newest`, the slot it named
    /// but does not serve yet; `last` when none above it is served. Were
    /// this an error, a provider whose getBlock backend always trails by a
    /// slot would never let the watcher start: by the next try the newest
    /// slot has moved, and is "not yet" again.
    async fn tip_below(
        &self,
        newest: u64,
        last: Option<BlockRef>,
    ) -> Result<BlockRef, SourceError> {
        let commitment = self.shared.following();
        let floor = last
            .as_ref()
            .map_or(newest.saturating_sub(NOT_YET_LOOK_BACK), |l| l.height + 1);
        let below: Vec<u64> = if floor < newest {
            self.shared
                .call(
                    "getBlocks",
                    json!([floor, newest - 1, { "commitment": commitment }]),
                )
                .await?
        } else {
            Vec::new()
        };
        for slot in below.iter().rev().take(NOT_YET_TRIES).copied() {
            match self
                .shared
                .get_block_answer(slot, Details::None, commitment)
                .await?
            {
                Ok(b) => {
                    let tip = Header::of(slot, &b)?.block_ref();
                    debug!(newest, tip = slot, "the newest block is not served yet");
                    self.shared.remember_tip(&tip);
                    return Ok(tip);
                }
                Err(e) if not_yet(&e) => continue,
                Err(e) => return Err(self.shared.refused(slot, e)),
            }
        }
        last.ok_or_else(|| {
            SourceError::Transient(format!(
                "getBlock at {}: no block up to slot {newest} is served yet",
                self.shared.host
            ))
        })
    }
}

/// Slots looked back for a served tip below one not served yet (a minute).
const NOT_YET_LOOK_BACK: u64 = 150;
/// Produced blocks tried there, newest first.
const NOT_YET_TRIES: usize = 3;

/// agave's `RpcCustomError::BlockCleanedUp`: the slot is older than the
/// node's ledger keeps.
const BLOCK_CLEANED_UP: i64 = -32001;
/// Asks again, at once, after a "cleaned up" `getBlock` or a list of
/// produced slots that starts late. Behind a round-robin balancer with one
/// restored backend of three, and the window's other calls in between,
/// five answers all from it are about one slot in 240.
const SECOND_OPINIONS: usize = 4;

fn says_cleaned_up(e: &AnswerError) -> bool {
    matches!(
        e,
        AnswerError::Rpc {
            code: BLOCK_CLEANED_UP,
            ..
        }
    )
}

/// agave's `SlotSkipped` (-32007) and `LongTermStorageSlotSkipped` (-32009).
fn skipped(e: &AnswerError) -> bool {
    matches!(
        e,
        AnswerError::Rpc {
            code: -32007 | -32009,
            ..
        }
    )
}

/// A node's way of saying a block exists but is not served yet.
fn not_yet(e: &AnswerError) -> bool {
    matches!(
        e,
        AnswerError::NoResult
            | AnswerError::Rpc {
                code: -32014 | -32004,
                ..
            }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_shown_without_credentials_or_paths() {
        assert_eq!(
            shown_host("https://user:key@rpc.example:8899/x?api-key=1"),
            "rpc.example:8899"
        );
    }

    #[test]
    fn skipped_slots_link_between_produced_blocks() {
        // 10 produced, 11 and 12 skipped, 13 produced on 10.
        let h = Header {
            slot: 13,
            parent_slot: 10,
            hash: "C".into(),
            previous: "A".into(),
            time: 0,
        };
        let s11 = h.skipped(11).block;
        let s12 = h.skipped(12).block;
        let b13 = h.block_ref();
        assert_eq!(s11.parent, "A");
        assert_eq!(s12.parent, s11.hash);
        assert_eq!(b13.parent, s12.hash);
        assert_eq!(s12.hash, "skipped:12:A");
        // No skipped slot below: the parent is the previous blockhash.
        let d = Header {
            slot: 14,
            parent_slot: 13,
            hash: "D".into(),
            previous: "C".into(),
            time: 0,
        };
        assert_eq!(d.block_ref().parent, "C");
    }
}

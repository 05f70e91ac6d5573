//! An Electrum server (ElectrumX, Fulcrum, electrs) as a [`BlockSource`],
//! for a network watched without a full node of its own.
//!
//! Electrum answers per address, not per block. The source subscribes every
//! watched address, keeps each one's history (txid, height) and builds
//! `block(h)` from the transactions the histories place at `h`. To answer
//! truthfully about the server's current chain:
//!
//! - histories are read again, all of them, whenever the server's tip
//!   changed, and count only if the tip was the same before and after the
//!   reading: the *snapshot*, a tip whose whole chain the histories describe;
//! - `block(h)` first checks that the snapshot's tip is still on the server's
//!   chain (then the block at `h` is its ancestor and the histories cover
//!   it), and proves every transaction it reports to that header's merkle
//!   root; a failed proof means the histories are stale, and the call fails
//!   as transient after marking them for a full re-read.
//!
//! Between tip changes, only addresses whose subscription status changed
//! (the server's notifications: mostly mempool news) are read again.
//!
//! electrum-client's API is blocking: every call runs on a blocking thread,
//! one at a time, over one connection that is opened on first use and again
//! after any transport error.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bitcoin::block::Header;
use bitcoin::hex::DisplayHex as _;
use bitcoin::{BlockHash, ScriptBuf, Txid};
use electrum_client::raw_client::RawClient;
use electrum_client::utils::validate_merkle_proof;
use electrum_client::{
    Batch, ElectrumApi, GetHeadersRes, GetHistoryRes, GetMerkleRes, Param, ToElectrumScriptHash,
};
use paywatch_core::{
    BlockRef, BlockSource, Network, SourceBlock, SourceError, Transfer, Unconfirmed, WatchSet,
};
use serde_json::Value;
use tracing::{debug, warn};

use crate::address::script_for_address;
use crate::block::{from_hex, transaction_id, transaction_outputs, Output};
use crate::params::{Chain, Params};
use crate::scan::scan_outputs;

/// How long one read or write on the socket may take.
const TIMEOUT: Duration = Duration::from_secs(30);
const CLIENT_NAME: &str = concat!("paywatch/", env!("CARGO_PKG_VERSION"));
/// The protocol version asked for: every server in use speaks 1.4, and it
/// still has the `blockchain.scripthash.*` methods (1.7 replaced them).
const PROTOCOL_VERSION: &str = "1.4";
/// How often one call starts over when the server's chain moves under it.
const ATTEMPTS: usize = 3;
const HEADER_LEN: usize = 80;

/// The genesis blocks of the chains paywatch knows, as servers report them
/// (`server.features`): a server on another of these is a misconfiguration.
const GENESIS: &[(Network, Chain, &str, &str)] = &[
    (
        Network::Bitcoin,
        Chain::Main,
        "Bitcoin mainnet",
        "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f",
    ),
    (
        Network::Bitcoin,
        Chain::Test,
        "Bitcoin testnet3",
        "000000000933ea01ad0ee984209779baaec3ced90fa3f408719526f8d77f4943",
    ),
    (
        Network::Bitcoin,
        Chain::Test,
        "Bitcoin testnet4",
        "00000000da84f2bafbbc53dee25a72ae507ff4914b867c565be350b0da8bf043",
    ),
    (
        Network::Bitcoin,
        Chain::Test,
        "Bitcoin signet",
        "00000008819873e925422c1ff0f99f7cc9bbb232af63a077a480a3633bee1ef6",
    ),
    (
        Network::Bitcoin,
        Chain::Regtest,
        "Bitcoin regtest",
        "0f9188f13cb7b2c71f2a335e3a4fc328bf5beb436012afca590b1a11466e2206",
    ),
    (
        Network::Litecoin,
        Chain::Main,
        "Litecoin mainnet",
        "12a765e31ffd4059bada1e25190f6e98c99d9714d334efa41a195a7e7e04bfe2",
    ),
    (
        Network::Litecoin,
        Chain::Test,
        "Litecoin testnet4",
        "4966625a4b2851d9fdee139e56211a0d88575f59ed816ff5e6a63deb4e3e29a0",
    ),
    (
        Network::Litecoin,
        Chain::Regtest,
        "Litecoin regtest",
        "530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9",
    ),
];

#[derive(Debug, Clone)]
pub struct ElectrumConfig {
    pub params: Params,
    /// `tcp://host:port` or `host:port`. Plain TCP only: this build has no
    /// TLS, so a remote server is reached through a tunnel.
    pub url: String,
    /// A block with this many confirmations is final.
    pub confirmations: u32,
    /// Addresses or transactions asked about per batched request.
    pub batch_size: usize,
    /// The most addresses this source subscribes to. A server holds one
    /// subscription per address and most limit them per client; past this
    /// number the source stops with an error saying so.
    pub max_subscriptions: usize,
    /// Follow the server's mempool, so payments show at zero confirmations.
    pub mempool: bool,
}

/// What went wrong with an Electrum server, said so an operator can act.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectrumError {
    #[error(
        "the Electrum source needs a watch set that lists its addresses (WatchSet::listing): \
         an Electrum server is asked about each address by name"
    )]
    NotListing,
    #[error(
        "the watch set is for {watch}, but the Electrum source is configured for {configured}"
    )]
    WrongNetwork { watch: Network, configured: Network },
    #[error("Electrum server URL '{url}': {reason}")]
    InvalidUrl { url: String, reason: String },
    /// Unreachable, closed the connection, or too slow.
    #[error("Electrum server at {url}: {detail}")]
    Transport { url: String, detail: String },
    /// The server refused a request.
    #[error("Electrum server at {url} answered {method} with an error: {message}")]
    Server {
        url: String,
        method: String,
        message: String,
    },
    #[error("Electrum server at {url} sent an unusable answer to {method}: {detail}")]
    BadAnswer {
        url: String,
        method: String,
        detail: String,
    },
    #[error(
        "Electrum server at {url} serves {theirs} (genesis block {genesis}), \
         but paywatch is configured for {network} {chain}"
    )]
    WrongChain {
        url: String,
        theirs: String,
        genesis: String,
        network: Network,
        chain: Chain,
    },
    /// More watched addresses than `max_subscriptions`.
    #[error(
        "{count} {network} addresses are watched, more than the Electrum source's limit of \
         {limit} (electrum.max_subscriptions): an Electrum server holds one subscription per \
         address. Watch {network} with a full node source instead, or raise the server's \
         subscription limit and electrum.max_subscriptions together"
    )]
    TooManyAddresses {
        network: Network,
        count: usize,
        limit: usize,
    },
    /// The server refused a subscription for its own limit.
    #[error(
        "Electrum server at {url} refused to watch more addresses after {subscribed} of the \
         {count} {network} addresses: {message}. Raise the server's subscription limit \
         (ElectrumX MAX_SESSION_SUBS/MAX_SUBS, Fulcrum max_subs_per_ip/max_subs) above \
         electrum.max_subscriptions, or watch {network} with a full node source"
    )]
    SubscriptionLimit {
        url: String,
        network: Network,
        subscribed: usize,
        count: usize,
        message: String,
    },
    /// A history placed a transaction in a block that does not hold it.
    #[error(
        "Electrum server at {url}: server history behind its headers at height {height} \
         ({detail}); retrying"
    )]
    StaleHistory {
        url: String,
        height: u64,
        detail: String,
    },
    #[error("Electrum server at {url}: its chain kept changing while {doing}; retrying")]
    Unsettled { url: String, doing: String },
}

impl ElectrumError {
    /// Whether this needs an operator: retrying will not help.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            ElectrumError::NotListing
                | ElectrumError::WrongNetwork { .. }
                | ElectrumError::InvalidUrl { .. }
                | ElectrumError::WrongChain { .. }
                | ElectrumError::TooManyAddresses { .. }
                | ElectrumError::SubscriptionLimit { .. }
        )
    }

    /// Whether the connection can no longer be trusted to be in step.
    fn drops_connection(&self) -> bool {
        matches!(
            self,
            ElectrumError::Transport { .. }
                | ElectrumError::BadAnswer { .. }
                | ElectrumError::WrongChain { .. }
                | ElectrumError::SubscriptionLimit { .. }
        )
    }
}

impl From<ElectrumError> for SourceError {
    fn from(e: ElectrumError) -> SourceError {
        if e.is_fatal() {
            SourceError::Fatal(e.to_string())
        } else {
            SourceError::Transient(e.to_string())
        }
    }
}

/// An Electrum server as one network's [`BlockSource`].
pub struct ElectrumSource {
    inner: Arc<Inner>,
}

impl fmt::Debug for ElectrumSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cfg = &self.inner.cfg;
        f.debug_struct("ElectrumSource")
            .field("url", &self.inner.url)
            .field("network", &cfg.params.network)
            .field("chain", &cfg.params.chain)
            .field("confirmations", &cfg.confirmations)
            .field("batch_size", &cfg.batch_size)
            .field("max_subscriptions", &cfg.max_subscriptions)
            .field("mempool", &cfg.mempool)
            .finish_non_exhaustive()
    }
}

struct Inner {
    cfg: ElectrumConfig,
    /// `host:port`, what the socket connects to.
    addr: String,
    /// `tcp://host:port`, what messages name.
    url: String,
    watch: Arc<WatchSet>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    conn: Option<Conn>,
    /// How many of the watch set's listed addresses were taken in.
    listed: usize,
    watched: Vec<Watched>,
    known: HashSet<ScriptBuf>,
    /// Indexes into `watched` whose history must be read again.
    dirty: BTreeSet<usize>,
    /// The tip the histories describe; `None`: read them all again.
    snapshot: Option<Tip>,
    /// Outputs of the transactions fetched, by txid.
    txs: HashMap<Txid, Arc<[OwnedOutput]>>,
}

struct Conn {
    client: RawClient<TcpStream>,
    /// `watched[..subscribed]` are subscribed on this connection.
    subscribed: usize,
    /// Set when the client's idea of its subscriptions may differ from the server's.
    broken: bool,
}

struct Watched {
    script: ScriptBuf,
    /// (txid, height): 0 in the mempool, -1 in it with unconfirmed inputs.
    /// `None` until first read.
    history: Option<Vec<(Txid, i32)>>,
}

#[derive(Debug, Clone)]
struct Tip {
    height: u64,
    hash: BlockHash,
    header: Header,
}

impl Tip {
    fn block_ref(&self) -> BlockRef {
        block_ref(self.height, &self.header)
    }
}

struct OwnedOutput {
    index: u32,
    value: u64,
    script: ScriptBuf,
}

/// One request of a batch, kept so it can be asked again alone.
struct Call {
    method: &'static str,
    params: Vec<Param>,
}

impl ElectrumSource {
    /// Checks the configuration; connects on first use.
    pub fn new(cfg: ElectrumConfig, watch: Arc<WatchSet>) -> Result<ElectrumSource, ElectrumError> {
        if !watch.is_listing() {
            return Err(ElectrumError::NotListing);
        }
        if watch.network() != cfg.params.network {
            return Err(ElectrumError::WrongNetwork {
                watch: watch.network(),
                configured: cfg.params.network,
            });
        }
        let addr = socket_address(&cfg.url)?;
        let url = format!("tcp://{addr}");
        Ok(ElectrumSource {
            inner: Arc::new(Inner {
                cfg,
                addr,
                url,
                watch,
                state: Mutex::new(State::default()),
            }),
        })
    }

    pub fn params(&self) -> &Params {
        &self.inner.cfg.params
    }

    /// Runs `f` on a blocking thread with the connection (opened if need
    /// be). A connection that served before and fails now (the server
    /// restarted, or closed it as idle) is replaced once, at once.
    async fn run<T, F>(&self, f: F) -> Result<T, SourceError>
    where
        T: Send + 'static,
        F: Fn(&Inner, &mut Conn, &mut State) -> Result<T, ElectrumError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut state = inner.lock();
            let reused = state.conn.is_some();
            match inner.with_conn(&mut state, &f) {
                Err(ElectrumError::Transport { detail, .. }) if reused => {
                    debug!(url = %inner.url, %detail, "the Electrum connection failed; opening a new one");
                    inner.with_conn(&mut state, &f)
                }
                result => result,
            }
        })
        .await
        .map_err(|e| SourceError::Transient(format!("Electrum call to {}: {e}", self.inner.url)))?
        .map_err(SourceError::from)
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                // A call panicked halfway: trust nothing it may have left.
                self.state.clear_poison();
                let mut guard = poisoned.into_inner();
                guard.conn = None;
                guard.snapshot = None;
                guard
            }
        }
    }

    fn with_conn<T>(
        &self,
        st: &mut State,
        f: impl Fn(&Inner, &mut Conn, &mut State) -> Result<T, ElectrumError>,
    ) -> Result<T, ElectrumError> {
        let mut conn = match st.conn.take() {
            Some(c) => c,
            None => {
                // Notifications sent before are lost: read every history again.
                st.snapshot = None;
                self.connect()?
            }
        };
        let result = f(self, &mut conn, st);
        let keep = !conn.broken && result.as_ref().err().is_none_or(|e| !e.drops_connection());
        if keep {
            st.conn = Some(conn);
        } else {
            debug!(url = %self.url, "dropping the Electrum connection");
            st.snapshot = None;
        }
        result
    }

    fn connect(&self) -> Result<Conn, ElectrumError> {
        let client = RawClient::new(self.addr.as_str(), Some(TIMEOUT))
            .map_err(|e| self.error("connect", e))?;
        client
            .raw_call(
                "server.version",
                [
                    Param::String(CLIENT_NAME.to_owned()),
                    Param::String(PROTOCOL_VERSION.to_owned()),
                ],
            )
            .map_err(|e| self.error("server.version", e))?;
        let features = client
            .raw_call("server.features", Vec::new())
            .map_err(|e| self.error("server.features", e))?;
        let genesis = features
            .get("genesis_hash")
            .and_then(Value::as_str)
            .ok_or_else(|| self.bad("server.features", format!("no genesis_hash in {features}")))?;
        self.check_genesis(genesis)?;
        debug!(url = %self.url, "connected to the Electrum server");
        Ok(Conn {
            client,
            subscribed: 0,
            broken: false,
        })
    }

    /// A server on another known chain is refused; an unknown one (a custom
    /// signet, say) is let through with a warning.
    fn check_genesis(&self, genesis: &str) -> Result<(), ElectrumError> {
        let genesis = genesis.trim().to_ascii_lowercase();
        let params = &self.cfg.params;
        let mine = |(n, c, _, _): &&(Network, Chain, &str, &str)| {
            *n == params.network && *c == params.chain
        };
        match GENESIS.iter().find(|g| g.3 == genesis) {
            Some(g) if mine(&g) => Ok(()),
            Some((_, _, theirs, _)) => Err(ElectrumError::WrongChain {
                url: self.url.clone(),
                theirs: (*theirs).to_owned(),
                genesis,
                network: params.network,
                chain: params.chain,
            }),
            None => {
                warn!(url = %self.url, %genesis, network = %params.network, chain = %params.chain,
                    "the Electrum server's genesis block is none paywatch knows; assuming it serves the configured chain");
                Ok(())
            }
        }
    }

    fn batch_size(&self) -> usize {
        self.cfg.batch_size.max(1)
    }

    // --- the chain ---------------------------------------------------------

    /// The server's tip, fresh.
    fn best(&self, conn: &mut Conn) -> Result<Tip, ElectrumError> {
        const METHOD: &str = "blockchain.headers.subscribe";
        let raw = conn
            .client
            .block_headers_subscribe_raw()
            .map_err(|e| self.error(METHOD, e))?;
        // The subscription's own notifications are not needed: drop them.
        while conn
            .client
            .block_headers_pop_raw()
            .map_err(|e| self.error(METHOD, e))?
            .is_some()
        {}
        let height = u64::try_from(raw.height).map_err(|e| self.bad(METHOD, e.to_string()))?;
        let header = self.header(METHOD, &raw.header)?;
        Ok(Tip {
            height,
            hash: header.block_hash(),
            header,
        })
    }

    fn header(&self, method: &str, bytes: &[u8]) -> Result<Header, ElectrumError> {
        if bytes.len() != HEADER_LEN {
            return Err(self.bad(
                method,
                format!("a header of {} bytes, not {HEADER_LEN}", bytes.len()),
            ));
        }
        bitcoin::consensus::deserialize(bytes).map_err(|e| self.bad(method, e.to_string()))
    }

    /// The headers at `heights` on the server's current chain; `None` past its tip.
    fn headers_at(
        &self,
        conn: &mut Conn,
        heights: &[u64],
    ) -> Result<Vec<Option<Header>>, ElectrumError> {
        const METHOD: &str = "blockchain.block.headers";
        let calls = heights
            .iter()
            .map(|&h| {
                let h = usize::try_from(h).map_err(|e| self.bad(METHOD, e.to_string()))?;
                Ok(Call {
                    method: METHOD,
                    params: vec![Param::Usize(h), Param::Usize(1)],
                })
            })
            .collect::<Result<Vec<_>, ElectrumError>>()?;
        let mut out = Vec::with_capacity(heights.len());
        for answer in self.ask(conn, &calls)? {
            let got: GetHeadersRes =
                serde_json::from_value(answer?).map_err(|e| self.bad(METHOD, e.to_string()))?;
            out.push(match got.count {
                0 => None,
                1 => Some(self.header(METHOD, &got.raw_headers)?),
                n => return Err(self.bad(METHOD, format!("{n} headers for a request of 1"))),
            });
        }
        Ok(out)
    }

    // --- addresses and their histories ----------------------------------------

    /// Brings the histories in line with the server's current tip: takes in
    /// new addresses, subscribes them, and reads again every history if the
    /// tip moved, else those the server said changed. Returns the snapshot.
    fn sync(&self, conn: &mut Conn, st: &mut State) -> Result<Tip, ElectrumError> {
        for _ in 0..ATTEMPTS {
            let before = self.best(conn)?;
            self.take_in_addresses(st)?;
            self.subscribe(conn, st)?;
            self.collect_notifications(conn, st)?;
            let full = st.snapshot.as_ref().is_none_or(|s| s.hash != before.hash);
            let todo: Vec<usize> = if full {
                st.snapshot = None;
                (0..st.watched.len()).collect()
            } else {
                st.dirty.iter().copied().collect()
            };
            // Nothing asked since `before`: the histories describe it as they are.
            let settled = todo.is_empty() || {
                if let Err(e) = self.read_histories(conn, st, &todo) {
                    // Those read so far may be of a newer chain than the snapshot's.
                    st.snapshot = None;
                    return Err(e);
                }
                self.best(conn)?.hash == before.hash
            };
            if settled {
                if full {
                    st.prune_txs();
                    debug!(url = %self.url, tip = %before.hash, height = before.height,
                        addresses = st.watched.len(), "read every address history");
                }
                st.snapshot = Some(before.clone());
                return Ok(before);
            }
            // Some histories may be of the old chain, some of the new.
            st.snapshot = None;
        }
        Err(self.unsettled("reading address histories"))
    }

    fn has_new_addresses(&self, st: &State) -> bool {
        !self.watch.addresses_from(st.listed).is_empty()
    }

    fn take_in_addresses(&self, st: &mut State) -> Result<(), ElectrumError> {
        let fresh = self.watch.addresses_from(st.listed);
        let count = st.listed + fresh.len();
        if count > self.cfg.max_subscriptions {
            return Err(ElectrumError::TooManyAddresses {
                network: self.cfg.params.network,
                count,
                limit: self.cfg.max_subscriptions,
            });
        }
        for address in fresh {
            st.listed += 1;
            match script_for_address(self.cfg.params.network, &address) {
                Ok((_, script)) => {
                    if st.known.insert(script.clone()) {
                        st.dirty.insert(st.watched.len());
                        st.watched.push(Watched {
                            script,
                            history: None,
                        });
                    }
                }
                Err(e) => {
                    warn!(%address, error = %e, "not an address an Electrum server can watch; it is never matched");
                }
            }
        }
        Ok(())
    }

    fn subscribe(&self, conn: &mut Conn, st: &mut State) -> Result<(), ElectrumError> {
        let count = st.watched.len();
        while conn.subscribed < count {
            let start = conn.subscribed;
            let end = start.saturating_add(self.batch_size()).min(count);
            let scripts: Vec<&bitcoin::Script> = st.watched[start..end]
                .iter()
                .map(|w| w.script.as_script())
                .collect();
            // The client records the subscriptions before it asks: whatever
            // goes wrong now leaves it out of step with the server.
            conn.broken = true;
            let statuses = conn
                .client
                .batch_script_subscribe(scripts.iter().copied())
                .map_err(|e| self.subscribe_error(e, start, end, count))?;
            if statuses.len() != scripts.len() {
                return Err(self.bad(
                    "blockchain.scripthash.subscribe",
                    format!(
                        "{} answers to {} subscriptions",
                        statuses.len(),
                        scripts.len()
                    ),
                ));
            }
            // electrum-client reads a refused subscription in a batch as "no
            // history yet" (null). Ask for the last one again, alone: a
            // limit the server reached within this batch refuses it too.
            if let (Some(None), Some(last)) = (statuses.last(), scripts.last()) {
                let hash = last.to_electrum_scripthash();
                conn.client
                    .raw_call(
                        "blockchain.scripthash.subscribe",
                        [Param::String(hash.as_slice().to_lower_hex_string())],
                    )
                    .map_err(|e| self.subscribe_error(e, end - 1, end, count))?;
            }
            conn.broken = false;
            conn.subscribed = end;
        }
        Ok(())
    }

    /// What a failure while subscribing `watched[from..to]` means.
    fn subscribe_error(
        &self,
        e: electrum_client::Error,
        from: usize,
        to: usize,
        count: usize,
    ) -> ElectrumError {
        match self.error("blockchain.scripthash.subscribe", e) {
            ElectrumError::Server { message, .. } if is_subscription_limit(&message) => {
                ElectrumError::SubscriptionLimit {
                    url: self.url.clone(),
                    network: self.cfg.params.network,
                    subscribed: from,
                    count,
                    message,
                }
            }
            ElectrumError::Transport { url, detail } => ElectrumError::Transport {
                url,
                detail: format!(
                    "{detail} (while subscribing addresses {} to {to} of {count}; if this \
                     repeats, the server may be dropping clients with many subscriptions)",
                    from + 1
                ),
            },
            other => other,
        }
    }

    /// Marks the addresses the server notified about since the last look.
    fn collect_notifications(&self, conn: &mut Conn, st: &mut State) -> Result<(), ElectrumError> {
        for (i, w) in st.watched[..conn.subscribed].iter().enumerate() {
            while conn
                .client
                .script_pop(&w.script)
                .map_err(|e| self.error("blockchain.scripthash.subscribe", e))?
                .is_some()
            {
                st.dirty.insert(i);
            }
        }
        Ok(())
    }

    fn read_histories(
        &self,
        conn: &mut Conn,
        st: &mut State,
        todo: &[usize],
    ) -> Result<(), ElectrumError> {
        const METHOD: &str = "blockchain.scripthash.get_history";
        for chunk in todo.chunks(self.batch_size()) {
            let calls: Vec<Call> = chunk
                .iter()
                .map(|&i| Call {
                    method: METHOD,
                    params: vec![Param::String(
                        st.watched[i]
                            .script
                            .to_electrum_scripthash()
                            .as_slice()
                            .to_lower_hex_string(),
                    )],
                })
                .collect();
            for (&i, answer) in chunk.iter().zip(self.ask(conn, &calls)?) {
                let history: Vec<GetHistoryRes> =
                    serde_json::from_value(answer?).map_err(|e| self.bad(METHOD, e.to_string()))?;
                st.watched[i].history =
                    Some(history.into_iter().map(|h| (h.tx_hash, h.height)).collect());
                st.dirty.remove(&i);
            }
        }
        Ok(())
    }

    // --- blocks and transactions ------------------------------------------------

    fn block(
        &self,
        conn: &mut Conn,
        st: &mut State,
        height: u64,
    ) -> Result<Option<SourceBlock>, ElectrumError> {
        for _ in 0..ATTEMPTS {
            let behind = st.snapshot.as_ref().is_none_or(|s| height > s.height);
            if behind || self.has_new_addresses(st) {
                self.sync(conn, st)?;
            }
            let Some(snapshot) = st.snapshot.clone() else {
                continue;
            };
            if height > snapshot.height {
                return Ok(None);
            }
            match self.block_in(conn, st, height, &snapshot)? {
                Some(block) => return Ok(Some(block)),
                // The server left the snapshot's chain: read it again.
                None => st.snapshot = None,
            }
        }
        Err(self.unsettled(&format!("reading block {height}")))
    }

    /// The block at `height` with what the histories place there, each
    /// transaction proven to be in it; `None` if the snapshot's tip is no
    /// longer on the server's chain. Headers, proofs and transactions go in
    /// one batch: a server that holds back small answers (ElectrumX 2 pads
    /// and delays them up to a second) costs one wait per block, not three.
    fn block_in(
        &self,
        conn: &mut Conn,
        st: &mut State,
        height: u64,
        snapshot: &Tip,
    ) -> Result<Option<SourceBlock>, ElectrumError> {
        const HEADERS: &str = "blockchain.block.headers";
        const MERKLE: &str = "blockchain.transaction.get_merkle";
        const TX: &str = "blockchain.transaction.get";
        let at = usize::try_from(height).map_err(|e| self.bad(HEADERS, e.to_string()))?;
        let tip_at =
            usize::try_from(snapshot.height).map_err(|e| self.bad(HEADERS, e.to_string()))?;
        let height_i64 = i64::try_from(height).unwrap_or(i64::MAX);
        let txids: Vec<Txid> = st
            .watched
            .iter()
            .filter_map(|w| w.history.as_ref())
            .flatten()
            .filter(|(_, h)| i64::from(*h) == height_i64)
            .map(|(t, _)| *t)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let fetch: Vec<Txid> = txids
            .iter()
            .filter(|t| !st.txs.contains_key(*t))
            .copied()
            .collect();

        let mut calls = vec![Call {
            method: HEADERS,
            params: vec![Param::Usize(at), Param::Usize(1)],
        }];
        if at != tip_at {
            calls.push(Call {
                method: HEADERS,
                params: vec![Param::Usize(tip_at), Param::Usize(1)],
            });
        }
        calls.extend(txids.iter().map(|t| Call {
            method: MERKLE,
            params: vec![Param::String(t.to_string()), Param::Usize(at)],
        }));
        calls.extend(fetch.iter().map(|t| Call {
            method: TX,
            params: vec![Param::String(t.to_string())],
        }));
        let mut answers = Vec::with_capacity(calls.len());
        for chunk in calls.chunks(self.batch_size().saturating_mul(2).max(2)) {
            answers.extend(self.ask(conn, chunk)?);
        }
        let mut answers = answers.into_iter();
        let mut header_at = || -> Result<Option<Header>, ElectrumError> {
            let value = answers
                .next()
                .ok_or_else(|| self.bad(HEADERS, "no answer".to_owned()))??;
            let got: GetHeadersRes =
                serde_json::from_value(value).map_err(|e| self.bad(HEADERS, e.to_string()))?;
            match got.count {
                0 => Ok(None),
                1 => self.header(HEADERS, &got.raw_headers).map(Some),
                n => Err(self.bad(HEADERS, format!("{n} headers for a request of 1"))),
            }
        };
        let header = header_at()?;
        let tip_header = if at != tip_at { header_at()? } else { header };
        // With the snapshot's tip still on the server's chain, the block at
        // `height` is its ancestor, and the histories cover it.
        let (Some(header), true) = (
            header,
            tip_header.is_some_and(|h| h.block_hash() == snapshot.hash),
        ) else {
            return Ok(None);
        };
        let mut answers: Vec<Result<Value, ElectrumError>> = answers.collect();
        let tx_answers = answers.split_off(txids.len().min(answers.len()));

        let mut placed: Vec<(usize, Txid)> = Vec::with_capacity(txids.len());
        for (txid, answer) in txids.iter().zip(answers) {
            let proof = answer.and_then(|v| {
                serde_json::from_value::<GetMerkleRes>(v)
                    .map_err(|e| self.bad(MERKLE, e.to_string()))
            });
            let stale = |detail: String| ElectrumError::StaleHistory {
                url: self.url.clone(),
                height,
                detail,
            };
            match proof {
                Ok(p)
                    if p.block_height == at
                        && validate_merkle_proof(txid, &header.merkle_root, &p) =>
                {
                    placed.push((p.pos, *txid));
                }
                Ok(_) => {
                    st.snapshot = None;
                    return Err(stale(format!(
                        "transaction {txid} does not prove to block {}",
                        header.block_hash()
                    )));
                }
                Err(e @ ElectrumError::Server { .. }) => {
                    st.snapshot = None;
                    return Err(stale(e.to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        for (txid, answer) in fetch.iter().zip(tx_answers) {
            let outputs = self.outputs_of(txid, &answer?)?;
            st.txs.insert(*txid, outputs);
        }
        placed.sort_unstable();
        let ordered: Vec<Txid> = placed.into_iter().map(|(_, t)| t).collect();
        Ok(Some(SourceBlock {
            block: block_ref(height, &header),
            timestamp: i64::from(header.time),
            transfers: self.scan(st, &ordered),
        }))
    }

    /// Caches the outputs of `txids`; says whether it asked the server. With
    /// `skip_missing`, a transaction the server no longer has (it left the
    /// mempool) is left out.
    fn fetch_txs(
        &self,
        conn: &mut Conn,
        st: &mut State,
        txids: &[Txid],
        skip_missing: bool,
    ) -> Result<bool, ElectrumError> {
        const METHOD: &str = "blockchain.transaction.get";
        let missing: Vec<Txid> = txids
            .iter()
            .filter(|t| !st.txs.contains_key(*t))
            .copied()
            .collect();
        for chunk in missing.chunks(self.batch_size()) {
            let calls: Vec<Call> = chunk
                .iter()
                .map(|t| Call {
                    method: METHOD,
                    params: vec![Param::String(t.to_string())],
                })
                .collect();
            for (txid, answer) in chunk.iter().zip(self.ask(conn, &calls)?) {
                let value = match answer {
                    Ok(v) => v,
                    Err(ElectrumError::Server { message, .. }) if skip_missing => {
                        debug!(%txid, %message, "transaction gone from the server; it is seen once mined");
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let outputs = self.outputs_of(txid, &value)?;
                st.txs.insert(*txid, outputs);
            }
        }
        Ok(!missing.is_empty())
    }

    fn outputs_of(&self, txid: &Txid, value: &Value) -> Result<Arc<[OwnedOutput]>, ElectrumError> {
        const METHOD: &str = "blockchain.transaction.get";
        let bad = |why: String| self.bad(METHOD, format!("transaction {txid}: {why}"));
        let hex = value
            .as_str()
            .ok_or_else(|| bad(format!("expected hex, got {value}")))?;
        let bytes = from_hex(hex).map_err(|e| bad(e.to_string()))?;
        // The merkle proof covers the txid, not these bytes: they must hash
        // to it, MWEB-flagged ones (a HogEx, a peg-out) included.
        let got = transaction_id(&bytes).map_err(|e| bad(e.to_string()))?;
        if got != *txid {
            return Err(bad(format!("the bytes are transaction {got}")));
        }
        let outputs = transaction_outputs(&bytes).map_err(|e| bad(e.to_string()))?;
        Ok(outputs
            .iter()
            .map(|o| OwnedOutput {
                index: o.index,
                value: o.value,
                script: o.script.to_owned(),
            })
            .collect())
    }

    /// The outputs of the cached `txids` that pay watched scripts, in order.
    fn scan(&self, st: &State, txids: &[Txid]) -> Vec<Transfer> {
        let watch = self.watch.read();
        let mut transfers = Vec::new();
        for txid in txids {
            let Some(outputs) = st.txs.get(txid) else {
                continue;
            };
            let borrowed: Vec<Output<'_>> = outputs
                .iter()
                .map(|o| Output {
                    index: o.index,
                    value: o.value,
                    script: &o.script,
                })
                .collect();
            transfers.extend(scan_outputs(
                &txid.to_string(),
                &borrowed,
                &self.cfg.params,
                &watch,
            ));
        }
        transfers
    }

    fn unconfirmed(&self, conn: &mut Conn, st: &mut State) -> Result<Unconfirmed, ElectrumError> {
        let snapshot = self.sync(conn, st)?;
        let entries = || {
            st.watched
                .iter()
                .filter_map(|w| w.history.as_ref())
                .flatten()
        };
        // ElectrumX may list a transaction just mined both ways for a moment.
        let mined: HashSet<&Txid> = entries().filter(|(_, h)| *h > 0).map(|(t, _)| t).collect();
        let txids: Vec<Txid> = entries()
            .filter(|(t, h)| *h <= 0 && !mined.contains(t))
            .map(|(t, _)| *t)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let fetched = self.fetch_txs(conn, st, &txids, true)?;
        let transfers = self.scan(st, &txids);
        // Nothing asked since the snapshot's tip was read: it still holds.
        let tip_held = !fetched || self.best(conn)?.hash == snapshot.hash;
        debug!(
            pool = txids.len(),
            watched = transfers.len(),
            "Electrum mempool read"
        );
        Ok(Unconfirmed {
            // A block in between moved transactions out: not a full picture.
            tip: if tip_held {
                snapshot.hash.to_string()
            } else {
                String::new()
            },
            transfers,
        })
    }

    // --- requests and errors ---------------------------------------------------

    /// One batched request; each answer is the result or the server's error
    /// for that request. electrum-client reads an error inside a batch as
    /// `null` (or fails the whole batch with it), and none of the methods
    /// batched here ever answers `null`: those are asked again alone, which
    /// brings back the server's own error.
    fn ask(
        &self,
        conn: &mut Conn,
        calls: &[Call],
    ) -> Result<Vec<Result<Value, ElectrumError>>, ElectrumError> {
        let Some(first) = calls.first() else {
            return Ok(Vec::new());
        };
        let mut batch = Batch::default();
        for call in calls {
            batch.raw(call.method.to_owned(), call.params.clone());
        }
        let answers: Vec<Option<Value>> = match conn.client.batch_call(&batch) {
            Ok(answers) if answers.len() == calls.len() => answers.into_iter().map(Some).collect(),
            Ok(answers) => {
                return Err(self.bad(
                    first.method,
                    format!("{} answers to {} requests", answers.len(), calls.len()),
                ))
            }
            Err(electrum_client::Error::Protocol(_)) => calls.iter().map(|_| None).collect(),
            Err(e) => return Err(self.error(first.method, e)),
        };
        let mut out = Vec::with_capacity(calls.len());
        for (call, answer) in calls.iter().zip(answers) {
            match answer {
                Some(v) if !v.is_null() => out.push(Ok(v)),
                _ => match conn.client.raw_call(call.method, call.params.clone()) {
                    Ok(v) if v.is_null() => out.push(Err(self.bad(call.method, "null".to_owned()))),
                    Ok(v) => out.push(Ok(v)),
                    Err(e @ electrum_client::Error::Protocol(_)) => {
                        out.push(Err(self.error(call.method, e)))
                    }
                    Err(e) => return Err(self.error(call.method, e)),
                },
            }
        }
        Ok(out)
    }

    fn error(&self, method: &str, e: electrum_client::Error) -> ElectrumError {
        use electrum_client::Error as E;
        let transport = |detail: String| ElectrumError::Transport {
            url: self.url.clone(),
            detail: format!("{method}: {detail}"),
        };
        match e {
            E::Protocol(v) => ElectrumError::Server {
                url: self.url.clone(),
                method: method.to_owned(),
                message: server_message(&v),
            },
            E::IOError(e) => transport(io_detail(&e)),
            E::SharedIOError(e) => transport(io_detail(&e)),
            E::AllAttemptsErrored(errors) if errors.is_empty() => {
                transport("the host name resolves to no address".to_owned())
            }
            E::AllAttemptsErrored(errors) => transport(
                errors
                    .iter()
                    .map(|e| match e {
                        E::IOError(e) => io_detail(e),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            // A closed connection reads as an empty line, which is no JSON.
            E::JSON(e) if e.is_eof() => transport("the server closed the connection".to_owned()),
            E::JSON(e) => self.bad(method, e.to_string()),
            E::InvalidResponse(v) => self.bad(method, v.to_string()),
            E::Hex(e) => self.bad(method, e.to_string()),
            E::Bitcoin(e) => self.bad(method, e.to_string()),
            other => transport(other.to_string()),
        }
    }

    fn bad(&self, method: &str, detail: String) -> ElectrumError {
        ElectrumError::BadAnswer {
            url: self.url.clone(),
            method: method.to_owned(),
            detail,
        }
    }

    fn unsettled(&self, doing: &str) -> ElectrumError {
        ElectrumError::Unsettled {
            url: self.url.clone(),
            doing: doing.to_owned(),
        }
    }
}

impl State {
    /// Keeps only the transactions some history still names.
    fn prune_txs(&mut self) {
        if self.txs.is_empty() {
            return;
        }
        let named: HashSet<&Txid> = self
            .watched
            .iter()
            .filter_map(|w| w.history.as_ref())
            .flatten()
            .map(|(t, _)| t)
            .collect();
        self.txs.retain(|t, _| named.contains(t));
    }
}

fn block_ref(height: u64, header: &Header) -> BlockRef {
    BlockRef {
        height,
        hash: header.block_hash().to_string(),
        // Like the node source: the genesis block has no parent.
        parent: if height == 0 {
            String::new()
        } else {
            header.prev_blockhash.to_string()
        },
    }
}

/// `tcp://host:port` or `host:port` → `host:port`.
fn socket_address(url: &str) -> Result<String, ElectrumError> {
    let bad = |reason: String| ElectrumError::InvalidUrl {
        url: url.to_owned(),
        reason,
    };
    let trimmed = url.trim();
    let rest = match trimmed.split_once("://") {
        None => trimmed,
        Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
            "tcp" => rest,
            "ssl" | "tls" => {
                return Err(bad(
                    "TLS is not built into paywatch; reach the server over plain tcp:// \
                     (through stunnel or an SSH tunnel when it is not on this host)"
                        .to_owned(),
                ))
            }
            other => {
                return Err(bad(format!(
                    "unknown scheme '{other}://'; expected tcp://host:port or host:port"
                )))
            }
        },
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(bad(
            "no port; expected host:port, e.g. 127.0.0.1:50001".to_owned()
        ));
    };
    if host.is_empty() || host == "[]" {
        return Err(bad(
            "no host; expected host:port, e.g. 127.0.0.1:50001".to_owned()
        ));
    }
    if host.contains(['/', '@', ' ']) {
        return Err(bad(format!("'{host}' is not a host name")));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad(
            "an IPv6 address goes in brackets, e.g. [::1]:50001".to_owned()
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(format!("{host}:{p}")),
        _ => Err(bad(format!(
            "port '{port}' is not a number from 1 to 65535"
        ))),
    }
}

/// ElectrumX: "your address subscription limit 50,000 reached", "server
/// subscription limit 250,000 reached"; Fulcrum: "Subscription limit reached".
fn is_subscription_limit(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("subscription") || m.contains("subs")) && m.contains("limit")
        || m.contains("too many subscriptions")
}

fn server_message(v: &Value) -> String {
    let message = v.get("message").and_then(Value::as_str);
    let code = v.get("code").and_then(Value::as_i64);
    let mut out = match (message, code) {
        (Some(m), Some(c)) => format!("{m} (code {c})"),
        (Some(m), None) => m.to_owned(),
        _ => v.to_string(),
    };
    if out.contains("excessive resource usage") {
        out.push_str(
            "; the server rate-limits this client (ElectrumX: COST_SOFT_LIMIT/COST_HARD_LIMIT)",
        );
    }
    out
}

fn io_detail(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => format!("no answer within {TIMEOUT:?}"),
        _ => e.to_string(),
    }
}

#[async_trait]
impl BlockSource for ElectrumSource {
    fn network(&self) -> Network {
        self.inner.cfg.params.network
    }

    async fn tip(&self) -> Result<BlockRef, SourceError> {
        self.run(|inner, conn, st| inner.sync(conn, st).map(|t| t.block_ref()))
            .await
    }

    async fn final_height(&self) -> Result<u64, SourceError> {
        let confirmations = u64::from(self.inner.cfg.confirmations.max(1));
        self.run(move |inner, conn, _| {
            let best = inner.best(conn)?;
            Ok((best.height + 1).saturating_sub(confirmations))
        })
        .await
    }

    async fn block(&self, height: u64) -> Result<Option<SourceBlock>, SourceError> {
        self.run(move |inner, conn, st| inner.block(conn, st, height))
            .await
    }

    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, SourceError> {
        self.run(move |inner, conn, _| {
            let headers = inner.headers_at(conn, &[height])?;
            Ok(headers
                .into_iter()
                .next()
                .flatten()
                .map(|h| block_ref(height, &h)))
        })
        .await
    }

    async fn unconfirmed(&self) -> Result<Option<Unconfirmed>, SourceError> {
        if !self.inner.cfg.mempool {
            return Ok(None);
        }
        self.run(|inner, conn, st| inner.unconfirmed(conn, st).map(Some))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::net::TcpListener;

    /// A one-connection Electrum server that answers each batch in reverse
    /// order (as ElectrumX may: it runs a batch's requests concurrently) and
    /// refuses every subscription past the first `limit`.
    fn fake_server(limit: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut out = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut subscribed = 0;
            loop {
                let mut batch = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    batch.push(serde_json::from_str::<Value>(&line).unwrap());
                    if reader.buffer().is_empty() {
                        break;
                    }
                }
                let mut answers = Vec::new();
                for request in batch {
                    let id = request["id"].clone();
                    let answer = match request["method"].as_str().unwrap() {
                        "server.version" => serde_json::json!({"result": ["fake", "1.4"]}),
                        "server.features" => {
                            serde_json::json!({"result": {"genesis_hash": GENESIS[7].3}})
                        }
                        "blockchain.headers.subscribe" => {
                            serde_json::json!({"result": {"height": 5, "hex": "00".repeat(HEADER_LEN)}})
                        }
                        "blockchain.scripthash.subscribe" if subscribed < limit => {
                            subscribed += 1;
                            serde_json::json!({"result": null})
                        }
                        "blockchain.scripthash.subscribe" => serde_json::json!({"error": {
                            "code": 1,
                            "message": format!("your address subscription limit {limit} reached"),
                        }}),
                        _ => {
                            serde_json::json!({"error": {"code": -32601, "message": "unknown method"}})
                        }
                    };
                    let mut answer = answer;
                    answer["jsonrpc"] = "2.0".into();
                    answer["id"] = id;
                    answers.push(answer);
                }
                for answer in answers.iter().rev() {
                    writeln!(out, "{answer}").unwrap();
                }
            }
        });
        addr
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_subscription_limit_inside_a_batch_is_named() {
        let params = Params::new(Network::Litecoin, Chain::Regtest).unwrap();
        let watch = Arc::new(
            WatchSet::new(Network::Litecoin)
                .keyed(crate::scan::watch_key(Network::Litecoin))
                .listing(),
        );
        for i in 0..3u8 {
            let mut script = vec![0x00, 0x14];
            script.extend([i; 20]);
            let address = crate::address::address_for_script(
                &params,
                ScriptBuf::from_bytes(script).as_script(),
            )
            .unwrap();
            watch.insert(&address);
        }
        let cfg = ElectrumConfig {
            params,
            url: fake_server(2),
            confirmations: 6,
            batch_size: 10,
            max_subscriptions: 10,
            mempool: true,
        };
        let source = ElectrumSource::new(cfg, watch).unwrap();
        let err = source.tip().await.unwrap_err();
        let SourceError::Fatal(msg) = &err else {
            panic!("a server limit needs an operator: {err}");
        };
        for needle in [
            "your address subscription limit 2 reached",
            "MAX_SESSION_SUBS",
            "max_subscriptions",
            "full node",
            "of the 3 litecoin addresses",
        ] {
            assert!(msg.contains(needle), "{needle}: {msg}");
        }
    }

    #[test]
    fn urls() {
        assert_eq!(
            socket_address("tcp://127.0.0.1:50001").unwrap(),
            "127.0.0.1:50001"
        );
        assert_eq!(
            socket_address(" electrum.example:50001 ").unwrap(),
            "electrum.example:50001"
        );
        assert_eq!(socket_address("TCP://[::1]:50001/").unwrap(), "[::1]:50001");
        for (url, needle) in [
            ("ssl://electrum.example:50002", "TLS"),
            ("http://electrum.example:50001", "unknown scheme"),
            ("electrum.example", "no port"),
            (":50001", "no host"),
            ("electrum.example:0", "port '0'"),
            ("electrum.example:port", "port 'port'"),
            ("::1:50001", "brackets"),
        ] {
            let e = socket_address(url).unwrap_err();
            assert!(e.is_fatal(), "{e}");
            assert!(e.to_string().contains(needle), "{url}: {e}");
        }
    }

    #[test]
    fn subscription_limits_are_recognised() {
        for m in [
            "your address subscription limit 50,000 reached",
            "server subscription limit 250,000 reached",
            "Subscription limit reached (code 50)",
            "too many subscriptions",
        ] {
            assert!(is_subscription_limit(m), "{m}");
        }
        for m in [
            "history too large",
            "excessive resource usage",
            "unknown method",
        ] {
            assert!(!is_subscription_limit(m), "{m}");
        }
    }

    #[test]
    fn fatal_and_transient() {
        let limit = ElectrumError::SubscriptionLimit {
            url: "tcp://h:1".into(),
            network: Network::Litecoin,
            subscribed: 3,
            count: 9,
            message: "your address subscription limit 3 reached".into(),
        };
        let SourceError::Fatal(msg) = SourceError::from(limit) else {
            panic!("a server limit needs an operator");
        };
        assert!(
            msg.contains("tcp://h:1") && msg.contains("max_subscriptions"),
            "{msg}"
        );
        let transport = ElectrumError::Transport {
            url: "tcp://h:1".into(),
            detail: "connection refused".into(),
        };
        assert!(SourceError::from(transport).is_transient());
    }

    #[test]
    fn the_genesis_table_matches_the_bitcoin_crate() {
        use bitcoin::blockdata::constants::genesis_block;
        for (network, hash) in [
            (bitcoin::Network::Bitcoin, GENESIS[0].3),
            (bitcoin::Network::Testnet, GENESIS[1].3),
            (bitcoin::Network::Testnet4, GENESIS[2].3),
            (bitcoin::Network::Signet, GENESIS[3].3),
            (bitcoin::Network::Regtest, GENESIS[4].3),
        ] {
            assert_eq!(
                genesis_block(network).block_hash().to_string(),
                hash,
                "{network}"
            );
        }
    }
}

//! An Electrum server (ElectrumX, Fulcrum, electrs) as a [`BlockSource`],
//! for a network watched without a full node of its own.
//!
//! Electrum answers per address, not per block. The source subscribes every
//! watched address, keeps each one's history (txid, height) and builds
//! `block(h)` from the transactions the histories place at `h`. To answer
//! truthfully about the server's current chain:
//!
//! - a history is read when the server's status for the address (a hash
//!   of its history, given with the subscription and in each notification)
//!   differs from the one the history held hashes to, and on a new tip
//!   when it has a transaction in the mempool; the histories count only if
//!   the tip was the same before and after the reading: the *snapshot*, a
//!   tip whose whole chain the histories describe (see `history` for why
//!   nothing more is read, and what covers news that come late);
//! - `block(h)` takes its header from one read in a batch with the
//!   snapshot's tip, which showed the tip still on the server's chain (then
//!   the block at `h` is its ancestor and the histories cover it), and
//!   proves every transaction it reports to that header's merkle root; a
//!   failed proof means the histories naming it are stale, and the call
//!   fails as transient after marking them for reading;
//! - while catching up, the headers above `h` come in the same batch and
//!   answer the next blocks with no history entries, until the snapshot
//!   changes or the stream walks back (`ahead`).
//!
//! electrum-client's API is blocking: every call runs on a blocking thread,
//! one at a time, over one connection that is opened on first use and again
//! after any transport error.
//!
//! Here: the source and its `BlockSource` answers. `conn` opens and keeps
//! the connection (`genesis` checks its chain, `url` where it is, `tap`
//! notes the subscriptions the server refused as the answers pass), `ask`
//! sends batches, `chain` reads the tip and headers, `subscribe` and
//! `history` keep the watched addresses' histories (`look_up` reads those
//! of addresses no longer watched), `blocks` builds a block
//! from them with `ahead`'s headers, `txs` fetches and scans transactions,
//! `mempool` the unconfirmed ones; `config` and `error` are public.

mod ahead;
mod ask;
mod blocks;
mod chain;
mod config;
mod conn;
mod error;
mod genesis;
mod history;
mod look_up;
mod mempool;
mod subscribe;
mod tap;
mod txs;
mod url;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bitcoin::{BlockHash, ScriptBuf, Txid};
use paywatch_core::{
    Activity, BlockRef, BlockSource, Network, Probe, SourceBlock, SourceError, Unconfirmed,
    WatchSet,
};
use tracing::debug;

use crate::params::Params;

pub use config::ElectrumConfig;
pub use error::ElectrumError;

use ahead::Ahead;
use chain::{block_ref, Tip};
use conn::Conn;
use history::Watched;
use txs::OwnedOutput;
use url::socket_address;

/// How often one call starts over when the server's chain moves under it.
const ATTEMPTS: usize = 3;

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
    /// The lowest block handed out that the server's later news showed was
    /// missing a transaction, to be read again (see `history`); `NONE_MISSED`
    /// when there is none. Apart from `state`, which a long call holds.
    missed: AtomicU64,
}

const NONE_MISSED: u64 = u64::MAX;

#[derive(Default)]
struct State {
    conn: Option<Conn>,
    /// How many of the watch set's listed addresses were taken in, of
    /// which generation of the list.
    listed: usize,
    generation: u64,
    watched: Vec<Watched>,
    known: HashSet<ScriptBuf>,
    /// Indexes into `watched` whose history must be read again.
    dirty: BTreeSet<usize>,
    /// The tip the histories describe; `None`: read them all again.
    snapshot: Option<Tip>,
    /// Outputs of the transactions fetched, by txid.
    txs: HashMap<Txid, Arc<[OwnedOutput]>>,
    /// Headers read ahead of the blocks asked for, on the snapshot's chain.
    ahead: Option<Ahead>,
    /// The height and hash of the last block `block` handed out.
    handed: Option<(u64, BlockHash)>,
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
                missed: AtomicU64::new(NONE_MISSED),
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

    fn missed_from(&self) -> Option<u64> {
        Some(self.inner.missed.load(Ordering::SeqCst)).filter(|h| *h != NONE_MISSED)
    }

    fn looks_up_addresses(&self) -> bool {
        true
    }

    async fn activity_after(&self, probes: &[Probe]) -> Result<Vec<Activity>, SourceError> {
        let probes = probes.to_vec();
        self.run(move |inner, conn, _| inner.activity_after(conn, &probes))
            .await
    }

    fn missed_queued(&self, from: u64) {
        // A lower height noted meanwhile stays.
        let _ = self.inner.missed.compare_exchange(
            from,
            NONE_MISSED,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

//! Prometheus metrics on a listener of their own (`metrics.listen`): a
//! scraper needs no API token, and metrics stay up with the API off.
//!
//! Chain standing and intent counts are read from the database at scrape
//! time, so they agree with `paywatch status` and hold across instances.
//! What only a running watcher sees (reorgs, source errors and latency) is
//! kept in memory, per process, as atomics.
//!
//! The text exposition format 0.0.4 is written by hand. Latency is kept in
//! whole microseconds and printed as decimal seconds from integers: the
//! crate denies float arithmetic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use paywatch_core::{Network, WatchSet};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::app::Context;
use crate::clock::Clock;
use crate::reconcile::Status;
use crate::settings::MetricsSettings;
use crate::store::{ChainStatus, Store, StoreError};

/// The content type of the text exposition format.
pub const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds of the source latency buckets, in microseconds.
const BUCKETS_US: [u64; 11] = [
    5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
    10_000_000,
];

/// Every state a watcher records; each gets a series, so an alert on
/// `state="halted"` sees a 0 rather than no data while all is well.
const WATCHER_STATES: [&str; 5] = ["starting", "running", "degraded", "stalled", "halted"];

/// A latency histogram. Each slot counts its own bucket only (the last one
/// is above every bound): one increment per observation, and the cumulative
/// Prometheus counts are summed at scrape time.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    slots: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub(crate) fn observe(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let slot = BUCKETS_US
            .iter()
            .position(|bound| us <= *bound)
            .unwrap_or(BUCKETS_US.len());
        self.slots[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }
}

/// What one network's watcher counts while it runs.
#[derive(Debug, Default)]
pub(crate) struct WatcherMetrics {
    reorgs: AtomicU64,
    reorg_depth_max: AtomicU64,
    source_errors: AtomicU64,
    source_requests: Histogram,
    /// 1 while this process holds the network's watcher lease.
    lease_held: AtomicU64,
    leases_lost: AtomicU64,
    /// Unix ms of the watcher's last step that reached its node and the
    /// database without error (or of the start of its tenure); 0 before.
    last_step_ms: AtomicU64,
    /// 1 while this process's money settings differ from those in force:
    /// it will not take the lease.
    money_settings_differ: AtomicU64,
    /// Addresses out of the live set, looked up by the sweep, as counted
    /// at the start of its last round.
    dormant_addresses: AtomicU64,
    /// Dormant addresses the sweep found money at and put back.
    dormant_woken: AtomicU64,
    /// Addresses whose node balance the backstop compared with the money
    /// recorded.
    backstop_checked: AtomicU64,
    /// Addresses it could not compare: they had sent something (swept).
    backstop_swept: AtomicU64,
    /// Differences it recorded: money no recorded transfer explains.
    unexplained_balances: AtomicU64,
    /// Blocks handed out without every transfer (an Ethereum block the
    /// node could not trace) still read again, and given up on.
    unread_blocks: AtomicU64,
    /// 1 while polling stands in for the node's push.
    push_fallback: AtomicU64,
    unread_blocks_given_up: AtomicU64,
}

impl WatcherMetrics {
    pub(crate) fn record_reorg(&self, depth: u64) {
        self.reorgs.fetch_add(1, Ordering::Relaxed);
        self.reorg_depth_max.fetch_max(depth, Ordering::Relaxed);
    }

    pub(crate) fn record_source_error(&self) {
        self.source_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn observe_source_request(&self, took: Duration) {
        self.source_requests.observe(took);
    }

    pub(crate) fn set_lease_held(&self, held: bool) {
        self.lease_held.store(u64::from(held), Ordering::Relaxed);
    }

    pub(crate) fn set_money_settings_differ(&self, differ: bool) {
        self.money_settings_differ
            .store(u64::from(differ), Ordering::Relaxed);
    }

    pub(crate) fn set_dormant_addresses(&self, count: u64) {
        self.dormant_addresses.store(count, Ordering::Relaxed);
    }

    pub(crate) fn record_backstop(&self, checked: u64, swept: u64) {
        self.backstop_checked.fetch_add(checked, Ordering::Relaxed);
        self.backstop_swept.fetch_add(swept, Ordering::Relaxed);
    }

    pub(crate) fn set_unread_blocks(&self, unread: paywatch_core::UnreadBlocks) {
        self.unread_blocks.store(unread.waiting, Ordering::Relaxed);
        self.unread_blocks_given_up
            .store(unread.given_up, Ordering::Relaxed);
    }

    pub(crate) fn set_push_fallback(&self, polling: bool) {
        self.push_fallback
            .store(u64::from(polling), Ordering::Relaxed);
    }

    pub(crate) fn record_unexplained_balance(&self) {
        self.unexplained_balances.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_dormant_woken(&self, count: u64) {
        self.dormant_woken.fetch_add(count, Ordering::Relaxed);
    }

    pub(crate) fn record_lease_lost(&self) {
        self.leases_lost.fetch_add(1, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn money_settings_differ(&self) -> bool {
        self.money_settings_differ.load(Ordering::Relaxed) == 1
    }

    #[cfg(test)]
    pub(crate) fn holds_lease(&self) -> bool {
        self.lease_held.load(Ordering::Relaxed) == 1
    }

    pub(crate) fn record_step(&self) {
        let now = u64::try_from(crate::store::now_ms()).unwrap_or(0);
        self.last_step_ms.store(now, Ordering::Relaxed);
    }
}

/// What the reconcile loop of this process counts.
#[derive(Debug, Default)]
pub(crate) struct ReconcileMetrics {
    failures: AtomicU64,
    /// Unix ms of the last pass that ran to the end; 0 before.
    last_ok_ms: AtomicU64,
}

impl ReconcileMetrics {
    pub(crate) fn record_pass(&self, ok: bool) {
        if ok {
            let now = u64::try_from(crate::store::now_ms()).unwrap_or(0);
            self.last_ok_ms.store(now, Ordering::Relaxed);
        } else {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A network's live watch set, and the most addresses its source may hold
/// (an Electrum server's `max_subscriptions`), when it has a limit.
#[derive(Debug, Clone)]
struct WatchGauge {
    set: Arc<WatchSet>,
    limit: Option<usize>,
}

/// What the `/metrics` handler reads from: the database, and the counters
/// of every enabled network's watcher, which the watchers a daemon starts
/// with this state (see [`crate::app::run_until_with_metrics`]) write to.
/// Cheap to clone; clones share the counters.
#[derive(Debug, Clone)]
pub struct MetricsState {
    store: Store,
    clock: Arc<dyn Clock>,
    networks: Vec<Network>,
    counters: BTreeMap<Network, Arc<WatcherMetrics>>,
    reconcile: Arc<ReconcileMetrics>,
    watch: BTreeMap<Network, WatchGauge>,
    /// Enabled networks that issue from an imported pool (no account key).
    pools: Vec<Network>,
    /// Intents per status over the whole table, with the reversed count,
    /// and when they were counted: a pass over years of history, so made
    /// every [`WHOLE_COUNT_EVERY`], not at each scrape.
    whole_counts: Arc<tokio::sync::Mutex<Option<WholeCounts>>>,
}

/// When the whole table was counted, its counts per status, and reversed.
type WholeCounts = (std::time::Instant, Vec<(String, i64)>, i64);

/// How old the settled statuses' counts may be: they only grow, and
/// nothing alerts on them.
const WHOLE_COUNT_EVERY: Duration = Duration::from_secs(300);

impl MetricsState {
    /// Fresh counters, all zero, for `ctx`'s enabled networks.
    pub fn new(ctx: &Context) -> MetricsState {
        let networks = ctx.settings.enabled_networks();
        let settings_of = |n: &Network| ctx.settings.network(*n);
        let watch = networks
            .iter()
            .filter_map(|n| {
                let set = ctx.watch.get(n)?.clone();
                let limit = settings_of(n)
                    .filter(|ns| ns.source == "electrum")
                    .map(|ns| ns.electrum.max_subscriptions);
                Some((*n, WatchGauge { set, limit }))
            })
            .collect();
        let pools = networks
            .iter()
            .filter(|n| settings_of(n).is_some_and(|ns| ns.account_key.is_none()))
            .copied()
            .collect();
        MetricsState {
            store: ctx.store.clone(),
            clock: ctx.clock.clone(),
            counters: networks.iter().map(|n| (*n, Arc::default())).collect(),
            networks,
            reconcile: Arc::default(),
            watch,
            pools,
            whole_counts: Arc::default(),
        }
    }

    /// The whole table's counts, counted again once they are
    /// [`WHOLE_COUNT_EVERY`] old.
    async fn whole_counts(&self) -> Result<(Vec<(String, i64)>, i64), StoreError> {
        let mut cached = self.whole_counts.lock().await;
        if let Some((at, counts, reversed)) = cached.as_ref() {
            if at.elapsed() < WHOLE_COUNT_EVERY {
                return Ok((counts.clone(), *reversed));
            }
        }
        let (counts, reversed) = self.store.intent_counts_by_status().await?;
        *cached = Some((std::time::Instant::now(), counts.clone(), reversed));
        Ok((counts, reversed))
    }

    /// A network outside the set gets counters nobody scrapes: its watcher
    /// still runs, only unobserved.
    pub(crate) fn watcher(&self, network: Network) -> Arc<WatcherMetrics> {
        self.counters.get(&network).cloned().unwrap_or_default()
    }

    pub(crate) fn reconcile(&self) -> Arc<ReconcileMetrics> {
        self.reconcile.clone()
    }

    /// What only the database knows. An error leaves these families out
    /// of the scrape, which still answers with what this process knows.
    async fn read_database(&self) -> Result<Stored, StoreError> {
        let mut chains = Vec::with_capacity(self.networks.len());
        for network in &self.networks {
            chains.push((*network, self.store.chain_status(*network).await?));
        }
        let (stored, reversed) = self.whole_counts().await?;
        let open_now = self.store.open_intent_counts().await?;
        // Every status gets a series, 0 when no intent has it.
        let mut intents: Vec<(String, i64)> = Status::ALL
            .iter()
            .map(|s| (s.as_str().to_owned(), 0))
            .collect();
        for (status, n) in stored {
            match intents.iter_mut().find(|(s, _)| *s == status) {
                Some(slot) => slot.1 = n,
                None => intents.push((status, n)),
            }
        }
        // The open statuses as of now: what alerts and the storefront's
        // operators watch.
        for status in [
            Status::AwaitingPayment,
            Status::Confirming,
            Status::NeedsReview,
        ] {
            if let Some(slot) = intents.iter_mut().find(|(s, _)| s == status.as_str()) {
                slot.1 = open_now.of_status(status.as_str());
            }
        }
        let open = open_now.payable_by_network();
        let backlog = self.store.operations_backlog().await?;
        let free = backlog.free_pool_addresses;
        let pools = self
            .pools
            .iter()
            .map(|n| (*n, free.get(n.as_str()).copied().unwrap_or(0)))
            .collect();
        let gaps = self.store.open_balance_gap_counts().await?;
        let balance_gaps_open = self
            .networks
            .iter()
            .map(|n| {
                let open = gaps.iter().find(|(g, _)| g == n.as_str());
                (*n, open.map_or(0, |(_, c)| *c))
            })
            .collect();
        let now = self.clock.now_ms();
        let age_secs = |since: Option<i64>| since.map_or(0, |at| (now - at).max(0) / 1000);
        Ok(Stored {
            chains,
            intents,
            open,
            reversed,
            pools,
            balance_gaps_open,
            webhooks_pending: backlog.webhooks_pending,
            webhook_oldest_secs: age_secs(backlog.webhook_oldest_at),
            reconcile_queue: backlog.reconcile_queue,
        })
    }

    async fn read(&self) -> Scrape {
        let stored = match self.read_database().await {
            Ok(stored) => Some(stored),
            Err(e) => {
                // One line, so a log search shows all of it.
                let why = e
                    .to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                warn!(error = %why, "metrics: the database did not answer");
                None
            }
        };
        Scrape {
            stored,
            watchers: self
                .networks
                .iter()
                .map(|n| (*n, self.watcher(*n), self.watch.get(n).cloned()))
                .collect(),
            reconcile: self.reconcile.clone(),
        }
    }
}

/// What one scrape read from the database.
#[derive(Debug)]
struct Stored {
    /// A status is None until the watcher first starts on this database.
    chains: Vec<(Network, Option<ChainStatus>)>,
    intents: Vec<(String, i64)>,
    /// Open intents (awaiting payment or confirming) per network with any,
    /// whether or not the network is enabled.
    open: Vec<(String, i64)>,
    /// Intents whose settled money a reorg took back.
    reversed: i64,
    /// Free addresses of each network that issues from a pool.
    pools: Vec<(Network, i64)>,
    /// Balance gaps nobody marked handled, per watched network.
    balance_gaps_open: Vec<(Network, i64)>,
    webhooks_pending: i64,
    webhook_oldest_secs: i64,
    reconcile_queue: i64,
}

/// Everything one exposition is written from.
#[derive(Debug)]
struct Scrape {
    /// None when the database did not answer.
    stored: Option<Stored>,
    watchers: Vec<(Network, Arc<WatcherMetrics>, Option<WatchGauge>)>,
    reconcile: Arc<ReconcileMetrics>,
}

pub fn router(state: MetricsState) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(state)
}

/// Always 200 while the process runs: a database that does not answer is
/// `paywatch_database_up 0` beside what the process itself knows, so its
/// alert names the cause; a process that does not answer is `up == 0`.
async fn scrape(State(state): State<MetricsState>) -> Response {
    let scrape = state.read().await;
    ([(CONTENT_TYPE, EXPOSITION)], render(&scrape)).into_response()
}

/// Binds `metrics.listen`; `None` when metrics are off.
pub(crate) async fn bind(settings: &MetricsSettings) -> std::io::Result<Option<TcpListener>> {
    let listen = settings.listen.trim();
    if listen.is_empty() {
        return Ok(None);
    }
    Ok(Some(TcpListener::bind(listen).await?))
}

/// Serves `/metrics` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    state: MetricsState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    info!(?addr, "metrics listening");
    // A scraper or two: a small cap, and slow clients shed as on the API.
    let limits = crate::api::connections::Limits {
        max_connections: METRICS_CONNECTIONS,
        header_read_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        max_per_client: METRICS_CONNECTIONS_PER_CLIENT,
        uncapped: Default::default(),
    };
    crate::api::connections::serve(listener, router(state), limits, shutdown).await
}

/// Connections the metrics listener serves at once, and from one client.
const METRICS_CONNECTIONS: usize = 64;
const METRICS_CONNECTIONS_PER_CLIENT: usize = 8;

/// A chain gauge's value in a stored chain status; None leaves it out.
type HeightOf = fn(&ChainStatus) -> Option<u64>;
/// A watcher's in-memory count.
type CountOf = fn(&WatcherMetrics) -> u64;
/// A figure of a network's live watch set.
type WatchOf = fn(&WatchGauge) -> usize;

fn render(scrape: &Scrape) -> String {
    let mut out = Text::default();
    out.family(
        "paywatch_build_info",
        "gauge",
        "Always 1; the version of the paywatch binary in its label.",
    );
    out.sample(
        "paywatch_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    out.family(
        "paywatch_database_up",
        "gauge",
        "1 when the database answered this scrape; 0 leaves out every family read from it.",
    );
    out.sample(
        "paywatch_database_up",
        &[],
        u8::from(scrape.stored.is_some()),
    );
    if let Some(stored) = &scrape.stored {
        render_stored(&mut out, stored);
    }
    render_process(&mut out, scrape);
    out.0
}

/// The families read from the database: the same from every instance.
fn render_stored(out: &mut Text, stored: &Stored) {
    let heights: [(&str, &str, HeightOf); 5] = [
        (
            "paywatch_chain_tip_height",
            "Height of the best block the chain source reported.",
            |s| s.tip_height,
        ),
        (
            "paywatch_chain_cursor_height",
            "Height of the last block applied to the database.",
            |s| s.cursor_height,
        ),
        (
            "paywatch_chain_final_height",
            "Highest height the source reports final.",
            |s| s.final_height,
        ),
        (
            "paywatch_chain_lag_blocks",
            "Blocks between the source's tip and the applied cursor.",
            |s| Some(s.tip_height?.saturating_sub(s.cursor_height?)),
        ),
        (
            "paywatch_chain_finality_lag_blocks",
            "Blocks between the source's tip and its final height: payments in them are confirming.",
            |s| Some(s.tip_height?.saturating_sub(s.final_height?)),
        ),
    ];
    for (name, help, value) in heights {
        out.family(name, "gauge", help);
        for (network, status) in &stored.chains {
            if let Some(v) = status.as_ref().and_then(value) {
                out.sample(name, &[("network", network.as_str())], v);
            }
        }
    }

    out.family(
        "paywatch_watcher_up",
        "gauge",
        "1 while the watcher is running, 0 when starting, degraded or halted.",
    );
    for (network, status) in &stored.chains {
        // A stalled watcher is up: it polls and answers; its own alert says why.
        let up = u8::from(matches!(state_of(status), "running" | "stalled"));
        out.sample("paywatch_watcher_up", &[("network", network.as_str())], up);
    }
    out.family(
        "paywatch_watcher_state",
        "gauge",
        "1 for the watcher's current state.",
    );
    for (network, status) in &stored.chains {
        let current = state_of(status);
        let mut states: Vec<&str> = WATCHER_STATES.to_vec();
        if !states.contains(&current) {
            states.push(current);
        }
        for state in states {
            out.sample(
                "paywatch_watcher_state",
                &[("network", network.as_str()), ("state", state)],
                u8::from(state == current),
            );
        }
    }

    let name = "paywatch_pool_free_addresses";
    out.family(
        name,
        "gauge",
        "Imported pool addresses not yet issued, for each network that issues from a pool; at 0 intent creation answers 503.",
    );
    for (network, free) in &stored.pools {
        out.sample(name, &[("network", network.as_str())], free);
    }

    let name = "paywatch_balance_gaps_open";
    out.family(
        name,
        "gauge",
        "Balance gaps nobody has marked handled, read from the database (the same on every instance): money at an issued address that no recorded transfer explains (alert unexplained_balance, GET /v1/review-queue balance_gaps, the console's queue).",
    );
    for (network, open) in &stored.balance_gaps_open {
        out.sample(name, &[("network", network.as_str())], open);
    }

    out.family(
        "paywatch_intents",
        "gauge",
        "Payment intents per status: awaiting_payment, confirming and needs_review as of this scrape, the others as counted at most 5 minutes ago.",
    );
    for (status, n) in &stored.intents {
        out.sample("paywatch_intents", &[("status", status)], n);
    }
    let name = "paywatch_intents_open";
    out.family(
        name,
        "gauge",
        "Open intents (awaiting payment or confirming) per network, enabled or not; a network switched off with open intents has no watcher series.",
    );
    for (network, n) in &stored.open {
        out.sample(name, &[("network", network)], n);
    }
    let review = stored
        .intents
        .iter()
        .find(|(s, _)| s == Status::NeedsReview.as_str())
        .map_or(0, |(_, n)| *n);
    let gauges: [(&str, &str, i64); 5] = [
        (
            "paywatch_review_queue",
            "Intents waiting for an operator (status needs_review).",
            review,
        ),
        (
            "paywatch_intents_reversed",
            "Intents whose settled money a reorg took back (exception reversed); a rise is a reversed credit.",
            stored.reversed,
        ),
        (
            "paywatch_webhook_deliveries_pending",
            "Webhook deliveries not yet acknowledged by the endpoint.",
            stored.webhooks_pending,
        ),
        (
            "paywatch_webhook_oldest_pending_seconds",
            "Age of the oldest event whose webhook the endpoint has not acknowledged; 0 when none waits.",
            stored.webhook_oldest_secs,
        ),
        (
            "paywatch_reconcile_queue_depth",
            "Addresses waiting for reconcile to look at their intents again.",
            stored.reconcile_queue,
        ),
    ];
    for (name, help, value) in gauges {
        out.family(name, "gauge", help);
        out.sample(name, &[], value);
    }
}

/// The families this process knows by itself, present even when the
/// database does not answer.
fn render_process(out: &mut Text, scrape: &Scrape) {
    let counters: [(&str, &str, &str, CountOf); 14] = [
        (
            "paywatch_reorgs_total",
            "counter",
            "Reorganisations seen by this process.",
            |m| m.reorgs.load(Ordering::Relaxed),
        ),
        (
            "paywatch_reorg_depth_max",
            "gauge",
            "Most blocks disconnected by one reorganisation seen by this process.",
            |m| m.reorg_depth_max.load(Ordering::Relaxed),
        ),
        (
            "paywatch_source_errors_total",
            "counter",
            "Failed requests to the chain source.",
            |m| m.source_errors.load(Ordering::Relaxed),
        ),
        (
            "paywatch_watcher_lease_held",
            "gauge",
            "1 while this process holds the network's watcher lease and runs its watcher.",
            |m| m.lease_held.load(Ordering::Relaxed),
        ),
        (
            "paywatch_money_settings_differ",
            "gauge",
            "1 while this process's money settings for the network differ from those in force (paywatch config apply): it will not take the watcher lease.",
            |m| m.money_settings_differ.load(Ordering::Relaxed),
        ),
        (
            "paywatch_watcher_leases_lost_total",
            "counter",
            "Watcher leases this process lost while running the watcher (taken over after a stall, or not renewable).",
            |m| m.leases_lost.load(Ordering::Relaxed),
        ),
        (
            "paywatch_dormant_addresses",
            "gauge",
            "Issued addresses out of the live watch set (intent ended, no money for dormant_after_secs), looked up once per sweep instead; counted at the start of this process's last sweep.",
            |m| m.dormant_addresses.load(Ordering::Relaxed),
        ),
        (
            "paywatch_dormant_addresses_woken_total",
            "counter",
            "Dormant addresses at which this process's sweep found money, and put back in the live watch set.",
            |m| m.dormant_woken.load(Ordering::Relaxed),
        ),
        (
            "paywatch_backstop_checked_total",
            "counter",
            "Addresses whose node balance this process's balance backstop compared with the money recorded (Ethereum without traces, Tron).",
            |m| m.backstop_checked.load(Ordering::Relaxed),
        ),
        (
            "paywatch_backstop_swept_total",
            "counter",
            "Addresses the balance backstop could not compare because they had sent something (a merchant's sweep): it sees nothing there after.",
            |m| m.backstop_swept.load(Ordering::Relaxed),
        ),
        (
            "paywatch_unexplained_balances_total",
            "counter",
            "Balance gaps this process recorded: money at an issued address that no recorded transfer explains. Per process; paywatch_balance_gaps_open is what is still open.",
            |m| m.unexplained_balances.load(Ordering::Relaxed),
        ),
        (
            "paywatch_push_fallback",
            "gauge",
            "1 while the node's push (Bitcoin and Litecoin: its P2P announcements) cannot be heard and the watcher polls every poll_interval_ms instead (logged once with alert=p2p_fallback, with why); 0 while it is heard, or where the source has none.",
            |m| m.push_fallback.load(Ordering::Relaxed),
        ),
        (
            "paywatch_untraced_blocks",
            "gauge",
            "Ethereum blocks handed out without their traces (the node could not trace them) whose ETH sent by contracts this process still asks for.",
            |m| m.unread_blocks.load(Ordering::Relaxed),
        ),
        (
            "paywatch_untraced_blocks_given_up_total",
            "counter",
            "Ethereum blocks this process gave up tracing after rpc.trace_retry_secs (alert eth_traces_unavailable): ETH sent by contracts in them may be unseen, and the balance backstop compares their addresses.",
            |m| m.unread_blocks_given_up.load(Ordering::Relaxed),
        ),
    ];
    for (name, kind, help, value) in counters {
        out.family(name, kind, help);
        for (network, counters, _) in &scrape.watchers {
            out.sample(name, &[("network", network.as_str())], value(counters));
        }
    }

    // Only where this process has watched: a standby has nothing to say.
    let name = "paywatch_watcher_last_step_timestamp_seconds";
    out.family(
        name,
        "gauge",
        "Unix time of this process's last watcher step that read the node and wrote the database without error (or of the start of its lease).",
    );
    for (network, counters, _) in &scrape.watchers {
        let ms = counters.last_step_ms.load(Ordering::Relaxed);
        if ms > 0 {
            out.sample(name, &[("network", network.as_str())], ms / 1000);
        }
    }

    let watch_gauges: [(&str, &str, WatchOf); 2] = [
        (
            "paywatch_watch_set_addresses",
            "Addresses in this process's live watch set (filled while it holds the network's lease).",
            |w| w.set.len(),
        ),
        (
            "paywatch_watch_set_limit",
            "The most addresses the network's source may watch (an Electrum server's max_subscriptions); 0 when unlimited.",
            |w| w.limit.unwrap_or(0),
        ),
    ];
    for (name, help, value) in watch_gauges {
        out.family(name, "gauge", help);
        for (network, _, watch) in &scrape.watchers {
            if let Some(w) = watch {
                out.sample(name, &[("network", network.as_str())], value(w));
            }
        }
    }

    // Tron contracts the scan could not read and skipped, naming no watched
    // address (a hostile or newer encoding): logged one by one, counted here.
    let name = "paywatch_tron_unreadable_contracts_skipped_total";
    out.family(
        name,
        "counter",
        "Tron TransferContracts this process could not read and skipped because they named no watched address.",
    );
    out.sample(name, &[], paywatch_tron::unreadable_contracts_skipped());

    let name = "paywatch_source_request_seconds";
    out.family(
        name,
        "histogram",
        "Time the chain source took to answer one poll for blocks or for finality.",
    );
    for (network, counters, _) in &scrape.watchers {
        out.histogram(
            name,
            &[("network", network.as_str())],
            &counters.source_requests,
        );
    }

    let name = "paywatch_http_request_seconds";
    out.family(
        name,
        "histogram",
        "Time the API took to answer, per route template and status class (throttled answers included).",
    );
    for (route, class, h) in crate::api::latency::by_route() {
        out.histogram(name, &[("route", &route), ("status", class)], &h);
    }

    let name = "paywatch_http_refused_total";
    out.family(
        name,
        "counter",
        "Requests and connections refused to protect other clients, by why (the client is named in the log line beside each).",
    );
    for (why, count) in crate::api::refusals::counts() {
        out.sample(name, &[("why", why)], count);
    }

    let name = "paywatch_reconcile_failures_total";
    out.family(
        name,
        "counter",
        "Reconcile passes of this process that failed (each is retried).",
    );
    out.sample(name, &[], scrape.reconcile.failures.load(Ordering::Relaxed));
    let name = "paywatch_reconcile_last_success_timestamp_seconds";
    out.family(
        name,
        "gauge",
        "Unix time of this process's last reconcile pass that ran to the end.",
    );
    let ok_ms = scrape.reconcile.last_ok_ms.load(Ordering::Relaxed);
    if ok_ms > 0 {
        out.sample(name, &[], ok_ms / 1000);
    }
}

fn state_of(status: &Option<ChainStatus>) -> &str {
    // No row yet: the watcher has not started on this database.
    status
        .as_ref()
        .map_or("starting", |s| s.watcher_state.as_str())
}

/// An exposition being written. Writing to a String cannot fail, so the
/// `fmt::Result`s are dropped.
#[derive(Debug, Default)]
struct Text(String);

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{key}=\"{}\"", escape(val));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, bound) in BUCKETS_US.iter().enumerate() {
            cumulative += h.slots[i].load(Ordering::Relaxed);
            self.bucket(&bucket, labels, &seconds(*bound), cumulative);
        }
        cumulative += h.slots[BUCKETS_US.len()].load(Ordering::Relaxed);
        self.bucket(&bucket, labels, "+Inf", cumulative);
        let sum = seconds(h.sum_us.load(Ordering::Relaxed));
        self.sample(&format!("{name}_sum"), labels, sum);
        // The +Inf bucket's count, not a counter of its own: the two always agree.
        self.sample(&format!("{name}_count"), labels, cumulative);
    }

    fn bucket(&mut self, name: &str, labels: &[(&str, &str)], le: &str, count: u64) {
        let mut all = labels.to_vec();
        all.push(("le", le));
        self.sample(name, &all, count);
    }
}

/// Microseconds as decimal seconds without trailing zeros: 2_500_000 → "2.5".
fn seconds(us: u64) -> String {
    let (whole, frac) = (us / 1_000_000, us % 1_000_000);
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:06}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Label values escape backslash, double quote and newline.
fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn seconds_are_printed_from_integer_microseconds() {
        assert_eq!(seconds(0), "0");
        assert_eq!(seconds(5_000), "0.005");
        assert_eq!(seconds(1_000_000), "1");
        assert_eq!(seconds(2_500_000), "2.5");
        assert_eq!(seconds(12_345_678), "12.345678");
        assert_eq!(seconds(u64::MAX), "18446744073709.551615");
    }

    #[test]
    fn histogram_buckets_are_cumulative_with_sum_and_count() {
        let h = Histogram::default();
        for took in [ms(3), ms(5), ms(7), ms(2_000), ms(20_000)] {
            h.observe(took);
        }
        let mut t = Text::default();
        t.histogram("x_seconds", &[("network", "bitcoin")], &h);
        let expected = "\
x_seconds_bucket{network=\"bitcoin\",le=\"0.005\"} 2
x_seconds_bucket{network=\"bitcoin\",le=\"0.01\"} 3
x_seconds_bucket{network=\"bitcoin\",le=\"0.025\"} 3
x_seconds_bucket{network=\"bitcoin\",le=\"0.05\"} 3
x_seconds_bucket{network=\"bitcoin\",le=\"0.1\"} 3
x_seconds_bucket{network=\"bitcoin\",le=\"0.25\"} 3
x_seconds_bucket{network=\"bitcoin\",le=\"0.5\"} 3
x_seconds_bucket{network=\"bitcoin\",le=\"1\"} 3
x_seconds_bucket{network=\"bitcoin\",le=\"2.5\"} 4
x_seconds_bucket{network=\"bitcoin\",le=\"5\"} 4
x_seconds_bucket{network=\"bitcoin\",le=\"10\"} 4
x_seconds_bucket{network=\"bitcoin\",le=\"+Inf\"} 5
x_seconds_sum{network=\"bitcoin\"} 22.015
x_seconds_count{network=\"bitcoin\"} 5
";
        assert_eq!(t.0, expected);
    }

    #[test]
    fn reorgs_count_and_keep_the_deepest() {
        let m = WatcherMetrics::default();
        m.record_reorg(3);
        m.record_reorg(1);
        assert_eq!(m.reorgs.load(Ordering::Relaxed), 2);
        assert_eq!(m.reorg_depth_max.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn label_values_are_escaped() {
        let mut t = Text::default();
        t.sample("m", &[("state", "a\"b\\c\nd")], 1);
        assert_eq!(t.0, "m{state=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn a_chain_without_a_row_is_down_and_starting() {
        let scrape = Scrape {
            stored: Some(Stored {
                chains: vec![(Network::Bitcoin, None)],
                intents: vec![("needs_review".into(), 2)],
                open: vec![("tron".into(), 5)],
                reversed: 1,
                pools: vec![(Network::Bitcoin, 7)],
                balance_gaps_open: vec![(Network::Bitcoin, 2)],
                webhooks_pending: 3,
                webhook_oldest_secs: 90,
                reconcile_queue: 4,
            }),
            watchers: vec![(Network::Bitcoin, Arc::default(), None)],
            reconcile: Arc::default(),
        };
        let text = render(&scrape);
        assert!(text.contains("paywatch_database_up 1\n"));
        assert!(text.contains("paywatch_watcher_up{network=\"bitcoin\"} 0\n"));
        assert!(text.contains("paywatch_watcher_state{network=\"bitcoin\",state=\"starting\"} 1\n"));
        assert!(text.contains("paywatch_watcher_state{network=\"bitcoin\",state=\"halted\"} 0\n"));
        assert!(!text.contains("paywatch_chain_tip_height{"));
        assert!(text.contains("paywatch_review_queue 2\n"));
        assert!(text.contains("paywatch_intents_reversed 1\n"));
        assert!(text.contains("paywatch_pool_free_addresses{network=\"bitcoin\"} 7\n"));
        assert!(text.contains("paywatch_webhook_deliveries_pending 3\n"));
        assert!(text.contains("paywatch_webhook_oldest_pending_seconds 90\n"));
        assert!(text.contains("paywatch_reconcile_queue_depth 4\n"));
        assert!(text.contains("paywatch_balance_gaps_open{network=\"bitcoin\"} 2\n"));
        assert!(text.contains("paywatch_intents_open{network=\"tron\"} 5\n"));
        // Nothing stepped yet: no freshness to report.
        assert!(!text.contains("paywatch_watcher_last_step_timestamp_seconds{"));
    }

    #[test]
    fn a_database_that_does_not_answer_is_a_gauge_beside_what_the_process_knows() {
        let counters = Arc::new(WatcherMetrics::default());
        counters.set_lease_held(true);
        counters.record_step();
        let reconcile = Arc::new(ReconcileMetrics::default());
        reconcile.record_pass(false);
        let scrape = Scrape {
            stored: None,
            watchers: vec![(Network::Litecoin, counters, None)],
            reconcile,
        };
        let text = render(&scrape);
        assert!(text.contains("paywatch_database_up 0\n"), "{text}");
        assert!(text.contains("paywatch_build_info{version=\""), "{text}");
        assert!(text.contains("paywatch_watcher_lease_held{network=\"litecoin\"} 1\n"));
        assert!(
            text.contains("paywatch_watcher_last_step_timestamp_seconds{network=\"litecoin\"} ")
        );
        assert!(text.contains("paywatch_reconcile_failures_total 1\n"));
        // Nothing read from the database is made up.
        for absent in [
            "paywatch_watcher_up{",
            "paywatch_intents{",
            "paywatch_review_queue ",
        ] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
    }
}

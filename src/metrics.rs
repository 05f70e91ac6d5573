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
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use paywatch_core::Network;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::app::Context;
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

    pub(crate) fn record_lease_lost(&self) {
        self.leases_lost.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the `/metrics` handler reads from: the database, and the counters
/// of every enabled network's watcher, which the watchers a daemon starts
/// with this state (see [`crate::app::run_until_with_metrics`]) write to.
/// Cheap to clone; clones share the counters.
#[derive(Debug, Clone)]
pub struct MetricsState {
    store: Store,
    networks: Vec<Network>,
    counters: BTreeMap<Network, Arc<WatcherMetrics>>,
}

impl MetricsState {
    /// Fresh counters, all zero, for `ctx`'s enabled networks.
    pub fn new(ctx: &Context) -> MetricsState {
        let networks = ctx.settings.enabled_networks();
        MetricsState {
            store: ctx.store.clone(),
            counters: networks.iter().map(|n| (*n, Arc::default())).collect(),
            networks,
        }
    }

    /// A network outside the set gets counters nobody scrapes: its watcher
    /// still runs, only unobserved.
    pub(crate) fn watcher(&self, network: Network) -> Arc<WatcherMetrics> {
        self.counters.get(&network).cloned().unwrap_or_default()
    }

    async fn read(&self) -> Result<Scrape, StoreError> {
        let mut chains = Vec::with_capacity(self.networks.len());
        for network in &self.networks {
            chains.push(ChainRow {
                network: *network,
                status: self.store.chain_status(*network).await?,
                counters: self.watcher(*network),
            });
        }
        let (stored, reversed) = self.store.intent_counts_by_status().await?;
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
        Ok(Scrape {
            chains,
            intents,
            reversed,
        })
    }
}

/// Everything one exposition is written from.
#[derive(Debug)]
struct Scrape {
    chains: Vec<ChainRow>,
    intents: Vec<(String, i64)>,
    /// Intents whose settled money a reorg took back.
    reversed: i64,
}

#[derive(Debug)]
struct ChainRow {
    network: Network,
    /// None until the watcher first starts on this database.
    status: Option<ChainStatus>,
    counters: Arc<WatcherMetrics>,
}

pub fn router(state: MetricsState) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(state)
}

async fn scrape(State(state): State<MetricsState>) -> Response {
    match state.read().await {
        Ok(scrape) => ([(CONTENT_TYPE, EXPOSITION)], render(&scrape)).into_response(),
        Err(e) => {
            // One line, so a scraper's "last error" shows all of it.
            let why = format!("metrics unavailable: {e}")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            warn!(error = %why, "metrics scrape failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!("{why}\n"),
            )
                .into_response()
        }
    }
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
    let listener =
        crate::api::bounded_listener::BoundedListener::new(listener, METRICS_CONNECTIONS);
    let limits = crate::api::connections::Limits {
        header_read_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        max_per_client: METRICS_CONNECTIONS_PER_CLIENT,
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

fn render(scrape: &Scrape) -> String {
    let mut out = Text::default();
    let heights: [(&str, &str, HeightOf); 4] = [
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
    ];
    for (name, help, value) in heights {
        out.family(name, "gauge", help);
        for c in &scrape.chains {
            if let Some(v) = c.status.as_ref().and_then(value) {
                out.sample(name, &[("network", c.network.as_str())], v);
            }
        }
    }

    out.family(
        "paywatch_watcher_up",
        "gauge",
        "1 while the watcher is running, 0 when starting, degraded or halted.",
    );
    for c in &scrape.chains {
        // A stalled watcher is up: it polls and answers; its own alert says why.
        let up = u8::from(matches!(state_of(c), "running" | "stalled"));
        out.sample(
            "paywatch_watcher_up",
            &[("network", c.network.as_str())],
            up,
        );
    }
    out.family(
        "paywatch_watcher_state",
        "gauge",
        "1 for the watcher's current state.",
    );
    for c in &scrape.chains {
        let current = state_of(c);
        let mut states: Vec<&str> = WATCHER_STATES.to_vec();
        if !states.contains(&current) {
            states.push(current);
        }
        for state in states {
            out.sample(
                "paywatch_watcher_state",
                &[("network", c.network.as_str()), ("state", state)],
                u8::from(state == current),
            );
        }
    }

    let counters: [(&str, &str, &str, CountOf); 5] = [
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
            "paywatch_watcher_leases_lost_total",
            "counter",
            "Watcher leases this process lost while running the watcher (taken over after a stall, or not renewable).",
            |m| m.leases_lost.load(Ordering::Relaxed),
        ),
    ];
    for (name, kind, help, value) in counters {
        out.family(name, kind, help);
        for c in &scrape.chains {
            out.sample(name, &[("network", c.network.as_str())], value(&c.counters));
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
    for c in &scrape.chains {
        out.histogram(name, c.network.as_str(), &c.counters.source_requests);
    }

    out.family("paywatch_intents", "gauge", "Payment intents per status.");
    for (status, n) in &scrape.intents {
        out.sample("paywatch_intents", &[("status", status)], n);
    }
    let review = scrape
        .intents
        .iter()
        .find(|(s, _)| s == Status::NeedsReview.as_str())
        .map_or(0, |(_, n)| *n);
    out.family(
        "paywatch_review_queue",
        "gauge",
        "Intents waiting for an operator (status needs_review).",
    );
    out.sample("paywatch_review_queue", &[], review);
    out.family(
        "paywatch_intents_reversed",
        "gauge",
        "Intents whose settled money a reorg took back (exception reversed); a rise is a reversed credit.",
    );
    out.sample("paywatch_intents_reversed", &[], scrape.reversed);
    out.0
}

fn state_of(c: &ChainRow) -> &str {
    // No row yet: the watcher has not started on this database.
    c.status
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

    fn histogram(&mut self, name: &str, network: &str, h: &Histogram) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, bound) in BUCKETS_US.iter().enumerate() {
            cumulative += h.slots[i].load(Ordering::Relaxed);
            let le = seconds(*bound);
            self.sample(&bucket, &[("network", network), ("le", &le)], cumulative);
        }
        cumulative += h.slots[BUCKETS_US.len()].load(Ordering::Relaxed);
        self.sample(&bucket, &[("network", network), ("le", "+Inf")], cumulative);
        let sum = seconds(h.sum_us.load(Ordering::Relaxed));
        self.sample(&format!("{name}_sum"), &[("network", network)], sum);
        // The +Inf bucket's count, not a counter of its own: the two always agree.
        self.sample(
            &format!("{name}_count"),
            &[("network", network)],
            cumulative,
        );
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
        t.histogram("x_seconds", "bitcoin", &h);
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
            chains: vec![ChainRow {
                network: Network::Bitcoin,
                status: None,
                counters: Arc::default(),
            }],
            intents: vec![("needs_review".into(), 2)],
            reversed: 1,
        };
        let text = render(&scrape);
        assert!(text.contains("paywatch_watcher_up{network=\"bitcoin\"} 0\n"));
        assert!(text.contains("paywatch_watcher_state{network=\"bitcoin\",state=\"starting\"} 1\n"));
        assert!(text.contains("paywatch_watcher_state{network=\"bitcoin\",state=\"halted\"} 0\n"));
        assert!(!text.contains("paywatch_chain_tip_height{"));
        assert!(text.contains("paywatch_review_queue 2\n"));
        assert!(text.contains("paywatch_intents_reversed 1\n"));
    }
}

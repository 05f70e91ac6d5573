//! Prometheus metrics over real HTTP, on SQLite and PostgreSQL, next to a
//! running daemon on the bitcoin dev chain: the values are the database's
//! and the watcher's, every line is valid exposition, and a database that
//! no longer answers is a gauge at 0 beside what the process knows.

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use bitcoin::hashes::{sha256, Hash};
use bitcoin::{Address, ScriptBuf, WPubkeyHash};
use common::{Backend, TestDb};
use paywatch::app::{self, Context};
use paywatch::intents::{parse_pool, NewIntent};
use paywatch::metrics::{self, MetricsState};
use paywatch::settings::Settings;
use paywatch_core::Network;
use reqwest::StatusCode;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// `n` distinct mainnet P2WPKH addresses nobody holds a key for.
fn pool(n: u32) -> Vec<String> {
    (0..n)
        .map(|i| {
            let h = sha256::Hash::hash(&i.to_le_bytes());
            let pkh = WPubkeyHash::from_slice(&h[..20]).unwrap();
            Address::from_script(&ScriptBuf::new_p2wpkh(&pkh), bitcoin::Network::Bitcoin)
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The bitcoin dev chain mining every second, metrics off unless `listen`,
/// the API off unless `api`.
async fn context(db: &TestDb, listen: &str, api: &str) -> Context {
    let mut s = Settings::load(None).expect("defaults load");
    s.database.url = db.url.clone();
    s.metrics.listen = listen.to_owned();
    s.api.listen = api.to_owned();
    s.rates.fixed.insert("BTC".into(), "50000".into());
    s.devchain.block_secs = 1;
    s.devchain.enabled = true;
    let n = s.networks.get_mut("bitcoin").expect("bitcoin settings");
    n.enabled = true;
    n.source = "devchain".into();
    n.poll_interval_ms = 100;
    let ctx = Context::build(s).await.expect("context builds");
    let parsed = parse_pool("pool.txt", &pool(4).join("\n"), Network::Bitcoin).unwrap();
    ctx.store
        .import_addresses(Network::Bitcoin, &parsed, ctx.clock.now_ms())
        .await
        .expect("imported");
    ctx
}

struct Daemon {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), app::AppError>>,
}

/// `paywatch run` on `ctx`, its watchers counting into `metrics`.
fn start(ctx: &Context, metrics: MetricsState) -> Daemon {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(app::run_until_with_metrics(ctx.clone(), metrics, async {
        let _ = stopped.await;
    }));
    Daemon { stop, task }
}

impl Daemon {
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the daemon stops")
            .expect("daemon task")
            .expect("the daemon ran");
    }
}

/// The metric names in the `expr:` lines of the shipped alert rules.
fn alert_rule_metrics() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus-alerts.yml");
    let rules = std::fs::read_to_string(path).expect("deploy/prometheus-alerts.yml");
    let mut names = BTreeSet::new();
    for line in rules.lines() {
        let Some(expr) = line.trim().strip_prefix("expr:") else {
            continue;
        };
        metric_names(expr, &mut names);
    }
    assert!(
        names.len() >= 5,
        "too few metrics found in {path}: {names:?}"
    );
    names
}

/// The paywatch metric names in `text`.
fn metric_names(text: &str, into: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(at) = rest.find("paywatch_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        into.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
}

/// The metric names in every query (`expr`) of the shipped Grafana dashboard.
fn dashboard_metrics() -> BTreeSet<String> {
    fn exprs(v: &serde_json::Value, names: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr", serde_json::Value::String(e)) => metric_names(e, names),
                        _ => exprs(value, names),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| exprs(i, names)),
            _ => {}
        }
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana-dashboard.json");
    let text = std::fs::read_to_string(path).expect("deploy/grafana-dashboard.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut names = BTreeSet::new();
    exprs(&json, &mut names);
    assert!(
        names.len() >= 15,
        "too few metrics found in {path}: {names:?}"
    );
    names
}

/// A port free a moment ago, to hand to the daemon.
fn free_port() -> String {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    free.local_addr().unwrap().to_string()
}

/// One parsed sample line: name, labels, value as written.
type Sample = (String, BTreeMap<String, String>, String);

/// Parses an exposition strictly enough for our own output: every sample is
/// `name{labels} value` with an integer or decimal value, and its family
/// was announced by `# HELP` and `# TYPE` lines before it.
fn parse(text: &str) -> Vec<Sample> {
    let mut helped = HashSet::new();
    let mut typed = HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap().to_owned();
            let kind = parts.next().unwrap_or("");
            assert!(
                ["gauge", "counter", "histogram"].contains(&kind),
                "type of {name}: {line}"
            );
            typed.insert(name);
            continue;
        }
        assert!(!line.starts_with('#'), "stray comment: {line}");
        let (series, value) = line.rsplit_once(' ').expect("name and value");
        assert!(is_number(value), "value not integer or decimal: {line}");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').expect("labels close");
                (name, parse_labels(inner, line))
            }
            None => (series, BTreeMap::new()),
        };
        assert!(
            !name.is_empty()
                && name.starts_with("paywatch_")
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name: {line}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        assert!(
            helped.contains(family) && typed.contains(family),
            "no HELP/TYPE before {line}"
        );
        samples.push((name.to_owned(), labels, value.to_owned()));
    }
    samples
}

fn parse_labels(inner: &str, line: &str) -> BTreeMap<String, String> {
    inner
        .split("\",")
        .map(|pair| {
            let (k, v) = pair
                .split_once("=\"")
                .unwrap_or_else(|| panic!("label: {line}"));
            (k.to_owned(), v.trim_end_matches('"').to_owned())
        })
        .collect()
}

fn is_number(v: &str) -> bool {
    let mut parts = v.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let frac = parts.next();
    !whole.is_empty()
        && whole.chars().all(|c| c.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_digit()))
}

/// The value of `name` with exactly `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<String> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    samples
        .iter()
        .find(|(n, l, _)| n == name && *l == want)
        .map(|(_, _, v)| v.clone())
}

fn int(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> u64 {
    value(samples, name, labels)
        .unwrap_or_else(|| panic!("no {name}{labels:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{name}{labels:?} not an integer"))
}

async fn get(url: &str) -> (StatusCode, String, String) {
    let resp = reqwest::get(url).await.expect("HTTP answer");
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, content_type, resp.text().await.unwrap())
}

async fn scrape_reports_the_chain_and_intents(b: Backend) {
    let db = TestDb::new(b).await;
    let api = free_port();
    let ctx = context(&db, "", &api).await;
    let state = MetricsState::new(&ctx);
    let daemon = start(&ctx, state.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let (stop_metrics, metrics_stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(metrics::serve(listener, state, async {
        let _ = metrics_stopped.await;
    }));

    ctx.intents
        .create(&NewIntent {
            kind: "order".into(),
            reference: "metrics-1".into(),
            account: "acct-metrics".into(),
            asset: "BTC".into(),
            network: "bitcoin".into(),
            usd_amount: "50".into(),
        })
        .await
        .expect("intent created");

    // A few mined blocks, so heights are not all zero.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = ctx.store.chain_status(Network::Bitcoin).await.unwrap();
        if status.is_some_and(|s| s.tip_height.unwrap_or(0) >= 2 && s.cursor_height.is_some()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dev chain never reached height 2"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The daemon's API answers a health check: its latency is scraped.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match reqwest::get(format!("http://{api}/healthz")).await {
            Ok(resp) if resp.status().is_success() => break,
            _ => {
                assert!(Instant::now() < deadline, "the API never answered on {api}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    // The chain moves every second: keep a scrape with no block around it.
    let (status, content_type, body, chain) = {
        let mut tries = 0;
        loop {
            let before = ctx
                .store
                .chain_status(Network::Bitcoin)
                .await
                .unwrap()
                .unwrap();
            let (status, content_type, body) = get(&url).await;
            let after = ctx
                .store
                .chain_status(Network::Bitcoin)
                .await
                .unwrap()
                .unwrap();
            let steady = (before.tip_height, before.cursor_height, before.final_height)
                == (after.tip_height, after.cursor_height, after.final_height)
                && before.watcher_state == after.watcher_state;
            if steady {
                break (status, content_type, body, after);
            }
            tries += 1;
            assert!(tries < 20, "the chain never held still around a scrape");
        }
    };
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let samples = parse(&body);

    for (status, n) in [
        ("awaiting_payment", 1),
        ("confirming", 0),
        ("paid", 0),
        ("expired", 0),
        ("needs_review", 0),
        ("resolved", 0),
    ] {
        assert_eq!(
            int(&samples, "paywatch_intents", &[("status", status)]),
            n,
            "{body}"
        );
    }
    assert_eq!(int(&samples, "paywatch_review_queue", &[]), 0);
    assert_eq!(
        int(&samples, "paywatch_intents_open", &[("network", "bitcoin")]),
        1
    );

    let btc = [("network", "bitcoin")];
    let tip = chain.tip_height.unwrap();
    let cursor = chain.cursor_height.unwrap();
    assert!(tip >= 2, "{chain:?}");
    assert_eq!(
        int(&samples, "paywatch_chain_tip_height", &btc),
        tip,
        "{body}"
    );
    assert_eq!(int(&samples, "paywatch_chain_cursor_height", &btc), cursor);
    assert_eq!(
        int(&samples, "paywatch_chain_lag_blocks", &btc),
        tip - cursor
    );
    assert_eq!(
        value(&samples, "paywatch_chain_final_height", &btc),
        chain.final_height.map(|h| h.to_string())
    );
    let running = chain.watcher_state == "running";
    assert_eq!(
        int(&samples, "paywatch_watcher_up", &btc),
        u64::from(running)
    );
    for state in ["starting", "running", "degraded", "halted"] {
        assert_eq!(
            int(
                &samples,
                "paywatch_watcher_state",
                &[("network", "bitcoin"), ("state", state)]
            ),
            u64::from(state == chain.watcher_state),
            "{state}: {body}"
        );
    }

    // The daemon's own watcher counts into what this server scrapes.
    assert_eq!(int(&samples, "paywatch_reorgs_total", &btc), 0);
    assert_eq!(int(&samples, "paywatch_reorg_depth_max", &btc), 0);
    assert_eq!(int(&samples, "paywatch_source_errors_total", &btc), 0);
    let polls = int(&samples, "paywatch_source_request_seconds_count", &btc);
    assert!(polls >= 1, "{body}");
    assert_eq!(
        int(
            &samples,
            "paywatch_source_request_seconds_bucket",
            &[("network", "bitcoin"), ("le", "+Inf")]
        ),
        polls
    );
    assert!(value(&samples, "paywatch_source_request_seconds_sum", &btc).is_some());

    assert_eq!(int(&samples, "paywatch_intents_reversed", &[]), 0);

    // What an on-call engineer is paged on.
    assert_eq!(int(&samples, "paywatch_database_up", &[]), 1);
    assert_eq!(
        int(
            &samples,
            "paywatch_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1
    );
    // Four imported, one issued.
    assert_eq!(
        int(&samples, "paywatch_pool_free_addresses", &btc),
        3,
        "{body}"
    );
    assert_eq!(int(&samples, "paywatch_webhook_deliveries_pending", &[]), 0);
    assert_eq!(
        int(&samples, "paywatch_webhook_oldest_pending_seconds", &[]),
        0
    );
    assert!(value(&samples, "paywatch_reconcile_queue_depth", &[]).is_some());
    assert_eq!(int(&samples, "paywatch_reconcile_failures_total", &[]), 0);
    assert_eq!(
        value(&samples, "paywatch_chain_finality_lag_blocks", &btc),
        chain
            .final_height
            .map(|f| tip.saturating_sub(f).to_string())
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for fresh in [
        "paywatch_watcher_last_step_timestamp_seconds",
        "paywatch_reconcile_last_success_timestamp_seconds",
    ] {
        let labels: &[(&str, &str)] = if fresh.contains("watcher") { &btc } else { &[] };
        let at = int(&samples, fresh, labels);
        assert!(at <= now && now - at < 60, "{fresh} {at}, now {now}");
    }
    // The watcher samples its heights for the console's lag chart.
    let samples_taken = ctx.store.chain_samples(Network::Bitcoin, 0).await.unwrap();
    assert!(
        samples_taken
            .first()
            .is_some_and(|s| s.tip_height.is_some() && s.cursor_height.is_some()),
        "{samples_taken:?}"
    );
    // The issued address is in the live set; the dev chain has no limit.
    assert!(int(&samples, "paywatch_watch_set_addresses", &btc) >= 1);
    assert_eq!(int(&samples, "paywatch_watch_set_limit", &btc), 0);

    assert!(
        int(
            &samples,
            "paywatch_http_request_seconds_count",
            &[("route", "/healthz"), ("status", "2xx")]
        ) >= 1,
        "{body}"
    );

    // Every reason the API refuses for has its count, from the start.
    for why in [
        "too_many_failures",
        "too_many_streams",
        "connections_per_client",
        "idle_connection_closed",
    ] {
        let _ = int(&samples, "paywatch_http_refused_total", &[("why", why)]);
    }

    // Every metric the shipped dashboard queries is in a live scrape.
    for metric in dashboard_metrics() {
        assert!(
            samples.iter().any(|(name, _, _)| *name == metric),
            "deploy/grafana-dashboard.json queries {metric}, which paywatch does not export:\n{body}"
        );
    }
    // Every metric the shipped alert rules watch is in a live scrape.
    for metric in alert_rule_metrics() {
        assert!(
            samples.iter().any(|(name, _, _)| *name == metric),
            "deploy/prometheus-alerts.yml watches {metric}, which paywatch does not export:\n{body}"
        );
    }

    // Stopping the daemon closes the database. The scrape still answers, so
    // its alert names the database rather than every series vanishing.
    daemon.stop().await;
    let (status, _, body) = get(&url).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let samples = parse(&body);
    assert_eq!(int(&samples, "paywatch_database_up", &[]), 0, "{body}");
    assert_eq!(
        int(
            &samples,
            "paywatch_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1
    );
    // The lease was handed back at stop; nothing read from the database is
    // made up.
    assert_eq!(int(&samples, "paywatch_watcher_lease_held", &btc), 0);
    for gone in [
        "paywatch_intents",
        "paywatch_watcher_up",
        "paywatch_chain_tip_height",
    ] {
        assert!(
            !samples.iter().any(|(name, _, _)| name == gone),
            "{gone} without a database:\n{body}"
        );
    }

    let _ = stop_metrics.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the metrics server stops")
        .unwrap()
        .expect("served");
}

on_both_databases!(scrape_reports_the_chain_and_intents);

/// `paywatch run` serves metrics on `metrics.listen` and stops them with
/// everything else. The port is found free first, then handed over: the
/// daemon alone knows what it bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_metrics_on_metrics_listen_until_shutdown() {
    let db = TestDb::new(Backend::Sqlite).await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    let ctx = context(&db, &addr.to_string(), "").await;
    let (stop, stopped) = oneshot::channel::<()>();
    let daemon = Daemon {
        stop,
        task: tokio::spawn(app::run_until(ctx, async {
            let _ = stopped.await;
        })),
    };
    let url = format!("http://{addr}/metrics");

    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        if let Ok(resp) = reqwest::get(&url).await {
            assert_eq!(resp.status(), StatusCode::OK);
            break resp.text().await.unwrap();
        }
        assert!(Instant::now() < deadline, "nothing served on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let samples = parse(&body);
    assert_eq!(
        int(
            &samples,
            "paywatch_intents",
            &[("status", "awaiting_payment")]
        ),
        0
    );

    daemon.stop().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "metrics still served after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_metrics_port_is_a_startup_error_naming_the_key() {
    let db = TestDb::new(Backend::Sqlite).await;
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let ctx = context(&db, &addr, "").await;
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        app::run_until(ctx, std::future::pending()),
    )
    .await
    .expect("refused at once")
    .expect_err("a taken port cannot be served");
    let shown = err.to_string();
    assert!(
        shown.contains("metrics.listen") && shown.contains(&addr),
        "{shown}"
    );
}

/// GitHub's anchor for a Markdown heading: lower case, spaces to dashes,
/// other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// An alert without a runbook leaves the on-call engineer guessing at 3 am:
/// every shipped rule names its section of the README, and that section
/// exists and says what to do.
#[test]
fn every_alert_rule_has_a_runbook_in_the_readme() {
    let root = env!("CARGO_MANIFEST_DIR");
    let rules = std::fs::read_to_string(format!("{root}/deploy/prometheus-alerts.yml")).unwrap();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    // Each heading's anchor, with the text under it up to the next heading.
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        if line.starts_with('#') && line.contains("# ") {
            let title = line.trim_start_matches('#');
            current = Some(anchor(title));
            sections.insert(anchor(title), String::new());
        } else if let Some(c) = &current {
            sections.get_mut(c).unwrap().push_str(line);
        }
    }

    let mut alerts: Vec<(String, Option<String>)> = Vec::new();
    for line in rules.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("- alert:") {
            alerts.push((name.trim().to_owned(), None));
        } else if let Some(url) = line.strip_prefix("runbook_url:") {
            let last = alerts.last_mut().expect("a runbook_url inside a rule");
            assert!(last.1.is_none(), "{} has two runbooks", last.0);
            last.1 = Some(url.trim().trim_matches('"').to_owned());
        }
    }
    assert!(alerts.len() >= 15, "{alerts:?}");
    for (alert, url) in alerts {
        let url = url.unwrap_or_else(|| panic!("{alert} has no runbook_url"));
        let fragment = url
            .strip_prefix("README.md#")
            .unwrap_or_else(|| panic!("{alert}'s runbook {url} is not a README section"));
        let text = sections
            .get(fragment)
            .unwrap_or_else(|| panic!("{alert}'s runbook #{fragment} is no README heading"));
        assert!(
            text.split_whitespace().count() >= 30,
            "{alert}'s runbook #{fragment} says too little to act on: {text:?}"
        );
    }
}

//! Configuration: built-in defaults, then the file, then `PAYWATCH__…`
//! environment variables. Validated once at start; a bad value names its key.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use paywatch_core::{Amount, Asset, Method, Network};
use rust_decimal::Decimal;
use serde::Deserialize;

use crate::intents::{parse_rate, IntentPolicy};
use crate::reconcile::{Tolerance, MAX_BASIS_POINTS};

pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    #[error("configuration could not be read: {0}")]
    Load(#[from] config::ConfigError),
    #[error("configuration: {0}")]
    Invalid(String),
}

#[derive(Clone, Deserialize)]
pub struct DatabaseSettings {
    pub url: String,
}

impl fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &paywatch_core::shown_url(&self.url))
            .finish()
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct IntentSettings {
    pub expiry_secs: i64,
    pub topup_amounts_usd: Vec<String>,
    #[serde(default)]
    pub quote_decimals: BTreeMap<String, u32>,
    #[serde(default = "max_open_per_reference")]
    pub max_open_per_reference: usize,
}

fn max_open_per_reference() -> usize {
    crate::intents::DEFAULT_MAX_OPEN_PER_REFERENCE
}

#[derive(Debug, Clone, Deserialize)]
pub struct HttpRateSettings {
    pub url: String,
    pub max_age_secs: i64,
    pub refresh_secs: i64,
}

/// `rates.source = "exchanges"`: the median of several exchanges' prices.
#[derive(Debug, Clone, Deserialize)]
pub struct ExchangeRateSettings {
    /// Built-in provider names, e.g. `["coinbase", "kraken", "bitstamp"]`.
    pub providers: Vec<String>,
    /// Fresh answers needed for a rate.
    pub quorum: usize,
    /// The largest (max - min) / median allowed between fresh answers.
    pub max_spread_bps: u32,
    pub max_age_secs: i64,
    pub refresh_secs: i64,
    /// A base URL other than a provider's public API, by provider name.
    #[serde(default)]
    pub urls: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RateSettings {
    pub source: String,
    pub stablecoins_at_par: bool,
    #[serde(default)]
    pub fixed: BTreeMap<String, String>,
    pub http: HttpRateSettings,
    pub exchanges: ExchangeRateSettings,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReconcileSettings {
    pub interval_ms: u64,
    pub batch_size: i64,
    /// How long a refund's transaction may take to be seen paying its
    /// destination before the case reopens.
    pub refund_check_secs: u32,
    /// Per method ("ASSET:network"): `{ basis_points = 50, max = "0.001" }`.
    #[serde(default)]
    pub tolerance: BTreeMap<String, serde_json::Value>,
    /// Per method ("ASSET:network"): a coin amount, e.g. "0.0001". Money of
    /// the method's own asset under it, arriving after a settlement, is
    /// recorded and shown but opens no case.
    #[serde(default)]
    pub dust_floor: BTreeMap<String, String>,
}

/// The storefront's event feed (`paywatch_events`, `GET /v1/events`).
#[derive(Debug, Clone, Deserialize)]
pub struct EventSettings {
    /// Events older than this many days are pruned with their delivered
    /// webhook rows (one still to be sent stays); 0 keeps every event. A
    /// reader whose cursor falls behind is told to re-read.
    pub retention_days: u64,
}

/// Chain rows kept.
#[derive(Debug, Clone, Deserialize)]
pub struct BlockSettings {
    /// Blocks below the reorg window connected more than this many days ago
    /// are pruned, hourly, except those holding a transfer and the block
    /// after each; 0 keeps every block. A rescan reads stored blocks only,
    /// so it cannot start below what was pruned.
    pub retention_days: u64,
}

/// Leadership per network when several instances share one database.
#[derive(Debug, Clone, Deserialize)]
pub struct LeaseSettings {
    /// A holder that has not renewed for this long loses its lease.
    pub ttl_ms: u64,
    /// How often a holder renews.
    pub renew_ms: u64,
    /// How often an instance without the lease asks for it.
    pub retry_ms: u64,
    /// This instance's name in the lease table; empty: host, pid and a
    /// random suffix.
    #[serde(default)]
    pub instance: String,
}

impl LeaseSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        if self.renew_ms == 0 || self.retry_ms == 0 {
            return Err(SettingsError::Invalid(
                "leases.renew_ms and leases.retry_ms must be at least 1".into(),
            ));
        }
        // Two renewals must fit in one lease, or one slow renewal loses it.
        if self.renew_ms.saturating_mul(2) > self.ttl_ms {
            return Err(SettingsError::Invalid(format!(
                "leases.ttl_ms ({}) must be at least twice leases.renew_ms ({})",
                self.ttl_ms, self.renew_ms
            )));
        }
        if i64::try_from(self.ttl_ms).is_err() {
            return Err(SettingsError::Invalid("leases.ttl_ms is too large".into()));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct NetworkSettings {
    pub enabled: bool,
    pub source: String,
    pub confirmations: u64,
    pub max_reorg_depth: usize,
    pub poll_interval_ms: u64,
    pub events_per_transaction: usize,
    pub blocks_per_poll: usize,
    /// First height to scan on a fresh database; the node's tip when unset.
    pub start_height: Option<u64>,
    /// Seconds after an intent's expiry that money seen in time may take to
    /// become final and still settle without a person; the network's
    /// default (reconcile::time_policy) when unset.
    #[serde(default)]
    pub confirm_within_secs: Option<i64>,
    #[serde(default)]
    pub contracts: BTreeMap<String, String>,
    /// Which chain of the network the node and keys are on: main, test or regtest.
    #[serde(default = "main_chain")]
    pub chain: String,
    /// For `source = "node"`: the full node's RPC.
    #[serde(default)]
    pub rpc: RpcSettings,
    /// For `source = "electrum"`: an Electrum server.
    #[serde(default)]
    pub electrum: ElectrumSettings,
    /// Show payments waiting in the node's mempool as `confirming`.
    #[serde(default = "yes")]
    pub mempool: bool,
    /// Start even though this network is off and intents on it are still
    /// open: the operator accepts that payments to them are not seen.
    #[serde(default)]
    pub leave_open_intents_unwatched: bool,
    /// Account-level extended public key that fresh addresses are derived
    /// from (BIP84 zpub/xpub for Bitcoin and Litecoin). Without one,
    /// addresses come from imported pools only.
    pub account_key: Option<Secret>,
    /// Ethereum: `finalized` (the node's finalized block tag) or
    /// `confirmations` (the `confirmations` setting, for nodes without it).
    #[serde(default = "finalized")]
    pub finality: String,
    /// Ethereum: the chain id the node must serve (1 mainnet, 31337 anvil).
    pub chain_id: Option<u64>,
    /// Ethereum: ask `debug_traceBlockByHash` for ETH that contracts send.
    /// Without it, such payments are not seen (see the README).
    #[serde(default)]
    pub traces: bool,
    /// Ethereum and Tron: how long after an intent ended (paid, expired,
    /// resolved) the balance backstop still compares its address's balance
    /// with the coin recorded there. A customer who pays through a contract
    /// days after expiry is seen only within this.
    #[serde(default = "backstop_after_end_secs")]
    pub backstop_after_end_secs: u64,
}

fn backstop_after_end_secs() -> u64 {
    86_400
}

fn finalized() -> String {
    "finalized".to_owned()
}

impl NetworkSettings {
    /// The token contract of a method on this network: config first (dev
    /// chains deploy their own), then the mainnet default.
    pub fn contract(&self, method: Method) -> Option<String> {
        let configured = self
            .contracts
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(method.asset().as_str()))
            .map(|(_, v)| v.clone());
        configured.or_else(|| method.default_contract().map(str::to_owned))
    }
}

fn main_chain() -> String {
    "main".to_owned()
}

fn yes() -> bool {
    true
}

/// A value never shown in logs or Debug output.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[derive(Clone, Deserialize)]
pub struct RpcSettings {
    /// http://host:port of the node (bitcoind, litecoind, an Ethereum node).
    #[serde(default)]
    pub url: String,
    /// Ethereum: ws(s):// endpoint whose newHeads wakes the watcher at once.
    pub ws_url: Option<String>,
    /// Tron: the WalletSolidity gRPC endpoint (java-tron port 50061) that
    /// says which blocks are solidified; `url`'s own service when unset.
    pub solidity_url: Option<String>,
    /// Solana, Ethereum and Tron: requests started per second at most
    /// (public endpoints and hosted providers rate-limit; a 429's
    /// Retry-After is honoured besides). 0: no limit. Unset: 10 on Solana,
    /// no limit on Ethereum (a batch is one request) and Tron.
    pub requests_per_second: Option<u32>,
    /// Tron: gRPC metadata sent with every request, such as a hosted
    /// provider's API key (`TRON-PRO-API-KEY = "…"` for TronGrid).
    #[serde(default)]
    pub metadata: BTreeMap<String, Secret>,
    /// Tron: a CA certificate (PEM file) trusted besides the public roots,
    /// for an `https://` endpoint whose certificate a private CA signed.
    pub ca_file: Option<String>,
    /// Solana: the cluster's genesis hash the node must serve.
    pub genesis_hash: Option<String>,
    /// Ethereum: batched requests in flight while catching up.
    #[serde(default = "batches_in_flight")]
    pub batches_in_flight: usize,
    /// A request without an answer in this time is retried.
    #[serde(default = "timeout_secs")]
    pub timeout_secs: u64,
    /// Bitcoin Core's `.cookie`; re-read when the node restarts. Used when no user is set.
    pub cookie_file: Option<String>,
    pub user: Option<String>,
    pub password: Option<Secret>,
    /// Blocks fetched per batched request while catching up.
    #[serde(default = "blocks_per_request")]
    pub blocks_per_request: usize,
    /// Bitcoin and Litecoin with `mempool`: a watch-only wallet on the node
    /// (created when missing) that the watched addresses are imported into,
    /// so each poll lists only the waiting transactions paying them instead
    /// of the node's whole mempool. Unset: `getrawmempool` every poll.
    pub mempool_wallet: Option<String>,
    /// Bitcoin and Litecoin with source "node": where the node's P2P port
    /// is (host:port), whose announcements of new blocks and transactions
    /// wake the watcher at once. Unset: the RPC URL's host on the chain's
    /// P2P port; "off": poll only.
    pub p2p: Option<String>,
    /// Ethereum with `traces`: `debug_traceBlockByHash` calls per batched
    /// request, apart from blocks and logs (8); fewer while the node
    /// cannot serve them in time.
    pub traces_per_request: Option<usize>,
    /// Ethereum with `traces`: the tracer's timeout per transaction sent
    /// with each trace call (20; geth's own is 5), at most three quarters
    /// of `timeout_secs`.
    pub trace_timeout_secs: Option<u64>,
    /// Ethereum with `traces`: how long the traces of a block the node
    /// could not trace are asked for again before it goes to the operator
    /// as an `eth_traces_unavailable` alert (3600).
    pub trace_retry_secs: Option<u64>,
}

impl fmt::Debug for RpcSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RpcSettings")
            .field("url", &paywatch_core::shown_url(&self.url))
            .field(
                "ws_url",
                &self.ws_url.as_deref().map(paywatch_core::shown_url),
            )
            .field(
                "solidity_url",
                &self.solidity_url.as_deref().map(paywatch_core::shown_url),
            )
            .field("metadata", &self.metadata)
            .field("ca_file", &self.ca_file)
            .field("cookie_file", &self.cookie_file)
            .field("user", &self.user)
            .field("password", &self.password)
            .field("blocks_per_request", &self.blocks_per_request)
            .field("mempool_wallet", &self.mempool_wallet)
            .field("p2p", &self.p2p)
            .finish()
    }
}

fn blocks_per_request() -> usize {
    100
}

fn batches_in_flight() -> usize {
    2
}

fn max_connections() -> usize {
    1024
}

fn auth_failures_per_minute() -> u32 {
    crate::api::AUTH_FAILURES_PER_MINUTE
}

fn max_connections_per_client() -> usize {
    64
}

fn header_read_timeout_secs() -> u64 {
    5
}

fn event_stream_secs() -> u64 {
    300
}

fn max_streams_per_page() -> usize {
    8
}

fn trusted_proxy_header() -> String {
    "X-Forwarded-For".to_owned()
}

fn max_streams_per_client() -> usize {
    32
}

fn max_event_streams() -> usize {
    512
}

fn request_timeout_secs() -> u64 {
    30
}

fn timeout_secs() -> u64 {
    30
}

impl Default for RpcSettings {
    fn default() -> Self {
        RpcSettings {
            url: String::new(),
            ws_url: None,
            solidity_url: None,
            requests_per_second: None,
            metadata: BTreeMap::new(),
            ca_file: None,
            genesis_hash: None,
            batches_in_flight: batches_in_flight(),
            timeout_secs: timeout_secs(),
            cookie_file: None,
            user: None,
            password: None,
            blocks_per_request: blocks_per_request(),
            traces_per_request: None,
            trace_timeout_secs: None,
            trace_retry_secs: None,
            mempool_wallet: None,
            p2p: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ElectrumSettings {
    /// tcp://host:port (plain TCP; put TLS in front with a local tunnel).
    #[serde(default)]
    pub url: String,
    /// Scripthash calls per batched request.
    #[serde(default = "electrum_batch")]
    pub batch_size: usize,
    /// The most addresses to subscribe on one server; above it paywatch
    /// refuses to start that watcher rather than miss payments.
    #[serde(default = "electrum_max_subscriptions")]
    pub max_subscriptions: usize,
    /// How long an address whose intent ended (paid, expired, resolved)
    /// and that saw no money stays subscribed; then it is dormant: out of
    /// the subscriptions, looked up by the sweep instead.
    #[serde(default = "electrum_dormant_after_secs")]
    pub dormant_after_secs: u64,
    /// How long one sweep takes to look every dormant address up once: the
    /// longest a payment to a dormant address goes unseen.
    #[serde(default = "electrum_sweep_every_secs")]
    pub sweep_every_secs: u64,
}

fn electrum_batch() -> usize {
    100
}

fn electrum_dormant_after_secs() -> u64 {
    3 * 24 * 3600
}

fn electrum_sweep_every_secs() -> u64 {
    24 * 3600
}

fn electrum_max_subscriptions() -> usize {
    10_000
}

impl Default for ElectrumSettings {
    fn default() -> Self {
        ElectrumSettings {
            url: String::new(),
            batch_size: electrum_batch(),
            max_subscriptions: electrum_max_subscriptions(),
            dormant_after_secs: electrum_dormant_after_secs(),
            sweep_every_secs: electrum_sweep_every_secs(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct DevchainSettings {
    /// The configuration says it is a development setup: only then may a
    /// network run on a simulated chain, or a simulated customer pay.
    pub enabled: bool,
    pub block_secs: u64,
    pub autopay: bool,
    /// Dev only, with `autopay`: the wallet of a local regtest node
    /// (`source = "node"`, `chain = "regtest"`) pays that network's open
    /// intents and mines a block every `block_secs`. On unless turned off;
    /// `deploy/devnet.sh` turns it off, as it pays on its nodes itself.
    #[serde(default = "yes")]
    pub regtest_customer: bool,
}

/// The HTTP API: where it listens and who may call it.
#[derive(Debug, Clone, Deserialize)]
pub struct ApiSettings {
    /// `host:port`; empty serves no API.
    pub listen: String,
    pub max_body_bytes: usize,
    /// Connections served at once; more wait to be accepted (backpressure).
    #[serde(default = "max_connections")]
    pub max_connections: usize,
    /// Connections from one client address at once; the next is closed, so
    /// one client cannot hold the slots every other one needs.
    #[serde(default = "max_connections_per_client")]
    pub max_connections_per_client: usize,
    /// A request's head must arrive within this of the connection opening
    /// or of the last answer (a keep-alive connection idle this long closes).
    #[serde(default = "header_read_timeout_secs")]
    pub header_read_timeout_secs: u64,
    /// A request, body included, is answered within this (503 past it).
    #[serde(default = "request_timeout_secs")]
    pub request_timeout_secs: u64,
    /// Failed token attempts one client address may make in a minute; the
    /// request after the last is refused (429) for a minute.
    #[serde(default = "auth_failures_per_minute")]
    pub auth_failures_per_minute: u32,
    /// paywatch is reached over TLS (a proxy in front terminates it): the
    /// console's cookie is then `Secure` with the `__Host-` prefix.
    #[serde(default)]
    pub behind_tls: bool,
    /// How long one live status stream stays open; the browser's
    /// EventSource then reconnects with `Last-Event-ID` and misses nothing.
    /// Bounded so a listener that went away is let go, and a slot is not
    /// held for ever by one page.
    #[serde(default = "event_stream_secs")]
    pub event_stream_secs: u64,
    /// Live status streams open at once; the next is refused (503
    /// `too_many_streams`, Retry-After), so open checkout pages never take
    /// every connection the storefront's calls need.
    #[serde(default = "max_event_streams")]
    pub max_event_streams: usize,
    /// Live status streams one payment page (view token) may hold at once:
    /// a few tabs. One page opened again and again never takes another
    /// checkout's place.
    #[serde(default = "max_streams_per_page")]
    pub max_streams_per_page: usize,
    /// Payers' live status streams one client (an address, an IPv6 /64;
    /// behind a trusted proxy the client it names) may hold at once, over
    /// every page: many checkouts behind one office's or carrier's NAT,
    /// never the whole payers' share.
    #[serde(default = "max_streams_per_client")]
    pub max_streams_per_client: usize,
    /// Reverse proxies you run in front of paywatch (CIDRs or addresses):
    /// only a request from one of them is believed about its client
    /// (`Forwarded`, `X-Forwarded-For`), and every per-client limit keys on
    /// that client. Empty: the TCP peer is the client.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// The header the trusted proxies write the client's address in:
    /// `X-Forwarded-For` (nginx, HAProxy, most load balancers) or
    /// `Forwarded` (RFC 7239). The other is never read: a proxy passes it
    /// on as the client wrote it.
    #[serde(default = "trusted_proxy_header")]
    pub trusted_proxy_header: String,
    /// Role (`storefront`, `operator`, `support`) → SHA-256 hashes (hex) of
    /// its bearer tokens. Tokens themselves are never configured or stored.
    pub tokens: BTreeMap<String, Vec<String>>,
}

/// Prometheus metrics, on a listener of their own.
#[derive(Debug, Clone, Deserialize)]
pub struct MetricsSettings {
    /// `host:port` serving `GET /metrics`; empty serves none.
    pub listen: String,
}

/// Webhook delivery of the outbox, for storefronts that do not share the
/// database. Off while `url` is empty.
#[derive(Clone, Deserialize)]
pub struct WebhookSettings {
    /// Where each outbox row is POSTed; empty delivers nothing.
    pub url: String,
    /// Key of the HMAC-SHA256 in `Paywatch-Signature`.
    pub secret: Secret,
    /// A request without a complete answer in this time failed.
    pub timeout_secs: u64,
    /// The first retry waits this long; each failure doubles it.
    pub base_backoff_ms: u64,
    /// Retries wait at most this long.
    pub max_backoff_secs: u64,
    /// Rows sent at once (each to a different intent).
    pub batch: i64,
    /// Allows an `http://` URL whose host is loopback (a receiver on the
    /// same machine, or a test); any other URL must be `https://`.
    #[serde(default)]
    pub allow_http_to_loopback: bool,
}

impl fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("url", &self.shown_url())
            .field("secret", &self.secret)
            .field("timeout_secs", &self.timeout_secs)
            .field("base_backoff_ms", &self.base_backoff_ms)
            .field("max_backoff_secs", &self.max_backoff_secs)
            .field("batch", &self.batch)
            .field("allow_http_to_loopback", &self.allow_http_to_loopback)
            .finish()
    }
}

impl WebhookSettings {
    pub fn enabled(&self) -> bool {
        !self.url.trim().is_empty()
    }

    /// The URL fit for logs: scheme, host and port only, since a webhook
    /// URL often carries a token in its path or query.
    pub fn shown_url(&self) -> String {
        paywatch_core::shown_url(&self.url)
    }

    /// A receiver must be able to tell our requests from anyone's, so a
    /// URL without a guessing-proof secret is refused rather than sent unsigned.
    fn validate(&self) -> Result<(), SettingsError> {
        let invalid = |m: &str| Err(SettingsError::Invalid(format!("webhooks.{m}")));
        if !self.enabled() {
            return Ok(());
        }
        // Over plain HTTP anyone on the path reads every payment, and can
        // hold and replay requests within the signature's window.
        match reqwest::Url::parse(self.url.trim()) {
            Ok(u) if u.scheme() == "https" && u.has_host() => {}
            Ok(u) if u.scheme() == "http" && u.has_host() => {
                let host = u.host_str().unwrap_or("");
                let loopback = host.eq_ignore_ascii_case("localhost")
                    || host
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                if !loopback {
                    return invalid("url: must be https:// (plain http:// is allowed only to loopback, with allow_http_to_loopback)");
                }
                if !self.allow_http_to_loopback {
                    return invalid("url: plain http:// to loopback needs webhooks.allow_http_to_loopback = true");
                }
            }
            _ => return invalid("url: not an https:// URL"),
        }
        if self.secret.0.len() < 16 {
            return invalid("secret: at least 16 bytes are required when webhooks.url is set");
        }
        if self.timeout_secs == 0 {
            return invalid("timeout_secs must be at least 1");
        }
        if self.base_backoff_ms == 0 || self.max_backoff_secs == 0 {
            return invalid("base_backoff_ms and max_backoff_secs must be at least 1");
        }
        if self.batch < 1 {
            return invalid("batch must be at least 1");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub api: ApiSettings,
    pub metrics: MetricsSettings,
    pub webhooks: WebhookSettings,
    pub events: EventSettings,
    pub blocks: BlockSettings,
    pub intents: IntentSettings,
    pub rates: RateSettings,
    pub reconcile: ReconcileSettings,
    pub leases: LeaseSettings,
    pub networks: BTreeMap<String, NetworkSettings>,
    pub devchain: DevchainSettings,
    /// SHA-256 (first 16 hex digits) of the effective configuration as
    /// `paywatch config check` prints it (secrets redacted): which
    /// configuration an instance runs, recorded at start. Empty for
    /// settings built in code.
    #[serde(skip)]
    pub config_hash: String,
}

impl Settings {
    /// Defaults, then `file` if given, then the environment.
    pub fn load(file: Option<&str>) -> Result<Settings, SettingsError> {
        let config = Settings::merged(file)?;
        let mut unknown = Vec::new();
        let settings: Settings =
            serde_ignored::deserialize(config.clone(), |path| unknown.push(path.to_string()))?;
        if let Some(why) = crate::config_keys::describe_unknown(&config, file, &unknown) {
            return Err(SettingsError::Invalid(why));
        }
        settings.validate()?;
        let mut settings = settings;
        settings.config_hash = crate::config_report::effective(&config)
            .map(|text| crate::money_settings::short_hash(text.as_bytes()))
            .unwrap_or_default();
        Ok(settings)
    }

    fn merged(file: Option<&str>) -> Result<config::Config, SettingsError> {
        let mut builder = config::Config::builder().add_source(config::File::from_str(
            DEFAULT_TOML,
            config::FileFormat::Toml,
        ));
        if let Some(path) = file {
            builder = builder.add_source(config::File::with_name(path).required(true));
        }
        builder = builder.add_source(
            config::Environment::with_prefix("PAYWATCH")
                .prefix_separator("__")
                .separator("__"),
        );
        Ok(builder.build()?)
    }

    /// What `load` would run with, secrets redacted, and every mistake it
    /// would refuse (not only the first): `paywatch config check`.
    pub fn check(file: Option<&str>) -> crate::config_report::ConfigReport {
        let config = match Settings::merged(file) {
            Ok(c) => c,
            Err(e) => {
                return crate::config_report::ConfigReport {
                    effective: None,
                    problems: vec![e.to_string()],
                }
            }
        };
        let mut problems = Vec::new();
        let mut unknown = Vec::new();
        match serde_ignored::deserialize::<_, _, Settings>(config.clone(), |path| {
            unknown.push(path.to_string())
        }) {
            Ok(settings) => {
                problems.extend(crate::config_keys::describe_unknown(
                    &config, file, &unknown,
                ));
                problems.extend(settings.problems());
                for problem in crate::chains::setup_problems(&settings) {
                    // Some are the settings' own checks found again.
                    if !problems.contains(&problem) {
                        problems.push(problem);
                    }
                }
            }
            Err(e) => problems.push(SettingsError::from(e).to_string()),
        }
        crate::config_report::ConfigReport {
            effective: crate::config_report::effective(&config),
            problems,
        }
    }

    fn validate(&self) -> Result<(), SettingsError> {
        match self.problems().into_iter().next() {
            Some(first) => Err(SettingsError::Invalid(first)),
            None => Ok(()),
        }
    }

    /// Every mistake in these settings, each naming its key: `load` refuses
    /// on the first, `paywatch config check` lists them all.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for name in self.networks.keys() {
            if let Err(e) = name.parse::<Network>() {
                out.push(format!("networks.{name}: {e}"));
            }
        }
        for (name, n) in &self.networks {
            if n.events_per_transaction == 0 || n.blocks_per_poll == 0 || n.confirmations == 0 {
                out.push(format!(
                    "networks.{name}: confirmations, events_per_transaction and blocks_per_poll must be at least 1"
                ));
            }
        }
        out.extend(self.source_problems());
        if self.intents.max_open_per_reference == 0 {
            out.push("intents.max_open_per_reference must be at least 1".into());
        }
        if self.intents.expiry_secs <= 0 {
            out.push("intents.expiry_secs must be above 0".into());
        }
        if self.reconcile.refund_check_secs == 0 {
            // A deadline of now would call every refund sent "not seen".
            out.push(
                "reconcile.refund_check_secs must be above 0 (how long a refund's transaction \
                 may take to be seen on chain)"
                    .into(),
            );
        }
        if let Err(e) = crate::api::TokenTable::from_settings(&self.api) {
            out.push(e.to_string());
        }
        if let Err(e) = crate::api::trusted_proxies(&self.api) {
            out.push(e);
        }
        let checks = [
            self.webhooks.validate(),
            self.leases.validate(),
            self.intent_policy().map(|_| ()),
            self.tolerances().map(|_| ()),
            self.dust_floors().map(|_| ()),
            self.fixed_rates().map(|_| ()),
        ];
        out.extend(checks.into_iter().filter_map(|r| match r.err()? {
            SettingsError::Invalid(why) => Some(why),
            other => Some(other.to_string()),
        }));
        match self.rates.source.as_str() {
            "fixed" => {}
            "http" if !self.rates.http.url.is_empty() => {}
            "http" => out.push("rates.http.url is required when rates.source = \"http\"".into()),
            "exchanges" => {}
            other => out.push(format!(
                "rates.source: '{other}' is not fixed, http or exchanges"
            )),
        }
        out.extend(self.exchange_problems());
        out
    }

    /// Mistakes in `[rates.exchanges]`, checked whichever source is in use:
    /// a typo there should not wait for the day it is switched on.
    fn exchange_problems(&self) -> Vec<String> {
        let x = &self.rates.exchanges;
        let known = crate::intents::provider_names().join(", ");
        let mut out = Vec::new();
        if x.providers.is_empty() {
            out.push(format!(
                "rates.exchanges.providers is empty: name one or more of {known}"
            ));
        }
        let mut seen = HashSet::new();
        for name in &x.providers {
            if !crate::intents::provider_names().contains(&name.as_str()) {
                out.push(format!(
                    "rates.exchanges.providers: '{name}' is not a known rate provider (known: {known})"
                ));
            } else if !seen.insert(name.as_str()) {
                out.push(format!(
                    "rates.exchanges.providers names '{name}' twice: each answer counts once"
                ));
            }
        }
        if x.quorum == 0 || x.quorum > x.providers.len() {
            out.push(format!(
                "rates.exchanges.quorum: {} must be between 1 and the {} provider(s) named",
                x.quorum,
                x.providers.len()
            ));
        }
        if x.max_spread_bps == 0 || x.max_spread_bps > 10_000 {
            out.push(format!(
                "rates.exchanges.max_spread_bps: {} must be between 1 and 10000 (basis points)",
                x.max_spread_bps
            ));
        }
        if x.max_age_secs <= 0 || x.refresh_secs <= 0 {
            out.push("rates.exchanges.max_age_secs and refresh_secs must be above 0".into());
        } else if x.refresh_secs >= x.max_age_secs {
            out.push(format!(
                "rates.exchanges.refresh_secs ({}) must be below max_age_secs ({}), or answers \
                 go stale between refreshes",
                x.refresh_secs, x.max_age_secs
            ));
        }
        for (name, url) in &x.urls {
            if !crate::intents::provider_names().contains(&name.as_str()) {
                out.push(format!(
                    "rates.exchanges.urls.{name}: not a known rate provider (known: {known})"
                ));
            }
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                out.push(format!(
                    "rates.exchanges.urls.{name}: '{}' is not an http(s) URL",
                    paywatch_core::shown_url(url)
                ));
            }
        }
        out
    }

    /// The configured exchanges, each with its base URL if overridden.
    pub fn exchange_providers(&self) -> Vec<(String, Option<String>)> {
        let x = &self.rates.exchanges;
        x.providers
            .iter()
            .map(|name| (name.clone(), x.urls.get(name).cloned()))
            .collect()
    }

    pub fn exchange_policy(&self) -> crate::intents::ExchangePolicy {
        let x = &self.rates.exchanges;
        crate::intents::ExchangePolicy {
            quorum: x.quorum,
            max_spread_bps: x.max_spread_bps,
            max_age_secs: x.max_age_secs,
            refresh_secs: x.refresh_secs,
            timeout: crate::intents::DEFAULT_PROVIDER_TIMEOUT,
        }
    }

    /// Every enabled network names its chain backend, and a simulated one
    /// (or a simulated customer) only in a development setup: a production
    /// watcher on a simulated chain would never see a real payment, and say
    /// nothing.
    pub fn check_sources(&self) -> Result<(), SettingsError> {
        match self.source_problems().into_iter().next() {
            Some(first) => Err(SettingsError::Invalid(first)),
            None => Ok(()),
        }
    }

    fn source_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, n) in self.networks.iter().filter(|(_, n)| n.enabled) {
            if n.source.trim().is_empty() {
                out.push(format!(
                    "networks.{name}.source is not set: an enabled network names the backend \
                     it is watched through (node{}), or \"devchain\" in a development setup",
                    if matches!(name.as_str(), "bitcoin" | "litecoin") {
                        " or electrum"
                    } else {
                        ""
                    }
                ));
            }
            if n.source == "devchain" && !self.devchain.enabled {
                out.push(format!(
                    "networks.{name}.source = \"devchain\" is a simulated chain that never sees \
                     a real payment: it runs only in a development setup ([devchain] enabled = \
                     true); to watch {name}, name its node"
                ));
            }
        }
        if self.devchain.autopay && !self.devchain.enabled {
            out.push(
                "devchain.autopay pays intents with simulated money: it runs only in a \
                 development setup ([devchain] enabled = true)"
                    .into(),
            );
        }
        out
    }

    pub fn network(&self, network: Network) -> Option<&NetworkSettings> {
        self.networks.get(network.as_str())
    }

    pub fn enabled_networks(&self) -> Vec<Network> {
        Network::ALL
            .into_iter()
            .filter(|n| self.network(*n).is_some_and(|s| s.enabled))
            .collect()
    }

    /// The token contract of a method on its network: config first (dev
    /// chains deploy their own), then the mainnet default.
    pub fn contract(&self, method: Method) -> Option<String> {
        match self.network(method.network()) {
            Some(n) => n.contract(method),
            None => method.default_contract().map(str::to_owned),
        }
    }

    pub fn intent_policy(&self) -> Result<IntentPolicy, SettingsError> {
        let mut topup_amounts_cents = Vec::new();
        for (i, usd) in self.intents.topup_amounts_usd.iter().enumerate() {
            let cents = Amount::parse_decimal(&format!("intents.topup_amounts_usd[{i}]"), usd, 2)
                .map_err(|e| SettingsError::Invalid(e.to_string()))?;
            topup_amounts_cents.push(
                u64::try_from(cents.0)
                    .map_err(|_| SettingsError::Invalid(format!("{usd} too large")))?,
            );
        }
        let mut quote_decimals = HashMap::new();
        for (key, places) in &self.intents.quote_decimals {
            quote_decimals.insert(
                parse_method_key(&format!("intents.quote_decimals.{key}"), key)?,
                *places,
            );
        }
        Ok(IntentPolicy {
            enabled: self.enabled_networks().into_iter().collect::<HashSet<_>>(),
            expiry_secs: self.intents.expiry_secs,
            topup_amounts_cents,
            quote_decimals,
            confirm_window_secs: self.confirm_windows()?,
            max_open_per_reference: self.intents.max_open_per_reference,
        })
    }

    /// Each network's configured confirm window, in seconds.
    pub fn confirm_windows(&self) -> Result<HashMap<Network, i64>, SettingsError> {
        let mut out = HashMap::new();
        for (name, n) in &self.networks {
            if let Some(secs) = n.confirm_within_secs {
                if secs <= 0 {
                    return Err(SettingsError::Invalid(format!(
                        "networks.{name}.confirm_within_secs: {secs} must be above 0"
                    )));
                }
                let network = name
                    .parse::<Network>()
                    .map_err(|e| SettingsError::Invalid(format!("networks.{name}: {e}")))?;
                out.insert(network, secs);
            }
        }
        Ok(out)
    }

    /// The shortfall accepted as paid, per method: a share of the amount due
    /// in basis points (at most [`MAX_BASIS_POINTS`]), capped by `max`.
    pub fn tolerances(&self) -> Result<HashMap<Method, Tolerance>, SettingsError> {
        let mut out = HashMap::new();
        for (key, value) in &self.reconcile.tolerance {
            let field = format!("reconcile.tolerance.{key}");
            let method = parse_method_key(&field, key)?;
            out.insert(method, parse_tolerance(&field, method, value)?);
        }
        Ok(out)
    }

    /// The dust floor after a settlement, per method, in base units: same-
    /// asset money under it that arrives after the intent settled never
    /// reopens it (look-alike dust and poisoning land at paid addresses).
    pub fn dust_floors(&self) -> Result<HashMap<Method, Amount>, SettingsError> {
        let mut out = HashMap::new();
        for (key, value) in &self.reconcile.dust_floor {
            let field = format!("reconcile.dust_floor.{key}");
            let method = parse_method_key(&field, key)?;
            let floor = Amount::parse_decimal(&field, value, method.decimals())
                .map_err(|e| SettingsError::Invalid(e.to_string()))?;
            if floor.0 > 0 {
                out.insert(method, floor);
            }
        }
        Ok(out)
    }

    pub fn fixed_rates(&self) -> Result<HashMap<Asset, Decimal>, SettingsError> {
        let mut out = HashMap::new();
        for (key, value) in &self.rates.fixed {
            let field = format!("rates.fixed.{key}");
            let asset: Asset = key
                .parse()
                .map_err(|e| SettingsError::Invalid(format!("{field}: {e}")))?;
            out.insert(
                asset,
                parse_rate(&field, value).map_err(SettingsError::Invalid)?,
            );
        }
        Ok(out)
    }
}

/// `{ basis_points = N, max = "coin amount" }`, refusing the absolute coin
/// amount of earlier versions with a message saying what replaced it.
fn parse_tolerance(
    field: &str,
    method: Method,
    value: &serde_json::Value,
) -> Result<Tolerance, SettingsError> {
    let invalid = |why: String| SettingsError::Invalid(format!("{field}: {why}"));
    let Some(table) = value.as_object() else {
        return Err(invalid(format!(
            "a tolerance is a share of the amount due, not a fixed coin amount ({value}): \
             write {{ basis_points = 50, max = \"0.001\" }} (0.5% of the amount due, at most \
             0.001 {})",
            method.asset()
        )));
    };
    if let Some(unknown) = table.keys().find(|k| *k != "basis_points" && *k != "max") {
        return Err(invalid(format!(
            "unknown key '{unknown}' (basis_points and max are known)"
        )));
    }
    let basis_points = match table.get("basis_points") {
        None => 0,
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n <= MAX_BASIS_POINTS)
            .ok_or_else(|| {
                invalid(format!(
                    "basis_points: {v} must be a whole number from 0 to {MAX_BASIS_POINTS} \
                     (a tolerance never reaches the whole amount due)"
                ))
            })?,
    };
    let max = match table.get("max") {
        None => None,
        Some(v) => {
            let text = v
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string());
            Some(
                Amount::parse_decimal(&format!("{field}.max"), &text, method.decimals())
                    .map_err(|e| SettingsError::Invalid(e.to_string()))?,
            )
        }
    };
    Ok(Tolerance { basis_points, max })
}

/// "ASSET:network", e.g. "USDT:tron".
fn parse_method_key(field: &str, key: &str) -> Result<Method, SettingsError> {
    let invalid = |why: String| SettingsError::Invalid(format!("{field}: {why}"));
    let (asset, network) = key
        .split_once(':')
        .ok_or_else(|| invalid("expected ASSET:network, e.g. USDT:tron".into()))?;
    let asset: Asset = asset.parse().map_err(|e| invalid(format!("{e}")))?;
    let network: Network = network.parse().map_err(|e| invalid(format!("{e}")))?;
    Method::new(asset, network).map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_load_and_name_the_embedded_sqlite_database() {
        let s = Settings::load(None).unwrap();
        assert!(s.database.url.starts_with("sqlite://"));
        assert_eq!(
            s.intent_policy().unwrap().topup_amounts_cents,
            vec![10_000, 50_000, 200_000, 1_000_000]
        );
        assert_eq!(
            s.contract(Method::new(Asset::Usdt, Network::Tron).unwrap())
                .as_deref(),
            Some("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t")
        );
    }

    /// Issue 38, found 7: a provider's key rides in the path (`/v3/KEY`) or
    /// the query (`?api-key=`) as often as in the user part; a database
    /// URL's password may be a query parameter. Debug output (startup logs,
    /// panics) shows none of them, as logs and `/v1/watchers` show URLs.
    #[test]
    fn debug_output_shows_no_key_in_a_urls_path_query_or_user_part() {
        let mut s = Settings::load(None).unwrap();
        s.database.url = "postgres://pw@db.example:5432/paywatch?password=DBSECRET".into();
        let n = s.networks.get_mut("ethereum").unwrap();
        n.rpc.url = "https://eth.example/v3/PATHKEY".into();
        n.rpc.ws_url = Some("wss://u:USERKEY@eth.example/ws?api-key=QUERYKEY".into());
        n.rpc.solidity_url = Some("https://tron.example/jsonrpc/SOLIDKEY".into());
        let shown = format!("{s:?}");
        for secret in ["DBSECRET", "PATHKEY", "USERKEY", "QUERYKEY", "SOLIDKEY"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("https://eth.example"), "{shown}");
        assert!(shown.contains("db.example:5432"), "{shown}");
    }

    #[test]
    fn the_regtest_customer_is_on_unless_turned_off() {
        let s = Settings::load(None).unwrap();
        assert!(!s.devchain.autopay);
        assert!(s.devchain.regtest_customer);
    }

    #[test]
    fn webhooks_are_off_by_default_and_a_url_needs_a_long_secret() {
        let mut s = Settings::load(None).unwrap();
        assert!(!s.webhooks.enabled());
        s.webhooks.url = "https://shop.example/paywatch".into();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("webhooks.secret"), "{e}");
        s.webhooks.secret = Secret("0123456789abcde".into());
        assert!(s.validate().is_err(), "15 bytes are too few");
        s.webhooks.secret = Secret("0123456789abcdef".into());
        s.validate().unwrap();
        s.webhooks.url = "ftp://shop.example".into();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("webhooks.url"), "{e}");
        // Plain HTTP would show every payment and the signature to the
        // network: refused, but for loopback when explicitly allowed.
        s.webhooks.url = "http://shop.example/paywatch".into();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("webhooks.url") && e.contains("https"), "{e}");
        for loopback in [
            "http://127.0.0.1:9000/hook",
            "http://localhost/hook",
            "http://[::1]/h",
        ] {
            s.webhooks.url = loopback.into();
            s.webhooks.allow_http_to_loopback = false;
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains("allow_http_to_loopback"), "{loopback}: {e}");
            s.webhooks.allow_http_to_loopback = true;
            s.validate().unwrap();
        }
        s.webhooks.url = "http://shop.example/paywatch".into();
        assert!(s.validate().is_err(), "only loopback may be plain HTTP");
        s.webhooks.allow_http_to_loopback = false;
        s.webhooks.url = "https://hook:hunter2@shop.example:8443/hooks/tok-hunter4".into();
        let shown = format!("{:?}", s.webhooks);
        assert!(shown.contains("https://shop.example:8443"), "{shown}");
        assert!(
            !shown.contains("hunter") && !shown.contains("0123456789abcdef"),
            "{shown}"
        );
    }

    #[test]
    fn debug_output_hides_the_database_password() {
        let d = DatabaseSettings {
            url: "postgres://paywatch:hunter2@db/paywatch".into(),
        };
        let shown = format!("{d:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let rpc = RpcSettings {
            url: "http://rpc:hunter2@127.0.0.1:8332".into(),
            password: Some(Secret("hunter3".into())),
            ..RpcSettings::default()
        };
        let shown = format!("{rpc:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("hunter3"),
            "{shown}"
        );
    }
}

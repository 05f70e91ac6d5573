//! Where USD prices come from: fixed rates from config, or an HTTP JSON
//! endpoint with a maximum age. A missing or stale rate is an error, never a
//! guess.

use std::collections::HashMap;
use std::fmt::Debug;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use paywatch_core::Asset;
use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::Mutex;

use crate::clock::Clock;

/// A USD price locked on an intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rate {
    pub usd_per_coin: Decimal,
    pub source: String,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    #[error("no USD rate is configured for {0}")]
    Missing(Asset),
    #[error(
        "the USD rate for {asset} is {age_secs} s old, older than the {max_age_secs} s allowed"
    )]
    Stale {
        asset: Asset,
        age_secs: i64,
        max_age_secs: i64,
    },
    #[error(
        "the USD rate for {asset} is stamped {ahead_secs} s in the future, more than the \
         {max_skew_secs} s of clock skew allowed (a feed sending milliseconds, or running \
         ahead): refused"
    )]
    FromTheFuture {
        asset: Asset,
        ahead_secs: i64,
        max_skew_secs: i64,
    },
    #[error("the rate source {url} failed: {reason}")]
    Source { url: String, reason: String },
}

#[async_trait]
pub trait RateSource: Send + Sync + Debug {
    async fn usd_rate(&self, asset: Asset) -> Result<Rate, RateError>;
}

/// Rates written in the config, for dev chains and for pinned prices.
#[derive(Debug, Clone)]
pub struct FixedRates {
    rates: HashMap<Asset, Decimal>,
    clock: Arc<dyn Clock>,
}

impl FixedRates {
    pub fn new(rates: HashMap<Asset, Decimal>, clock: Arc<dyn Clock>) -> FixedRates {
        FixedRates { rates, clock }
    }
}

#[async_trait]
impl RateSource for FixedRates {
    async fn usd_rate(&self, asset: Asset) -> Result<Rate, RateError> {
        let usd_per_coin = *self.rates.get(&asset).ok_or(RateError::Missing(asset))?;
        Ok(Rate {
            usd_per_coin,
            source: "fixed".into(),
            at_ms: self.clock.now_ms(),
        })
    }
}

/// How far ahead of paywatch's clock a rate's timestamp may be: clocks
/// disagree by seconds, not minutes.
pub const MAX_FUTURE_SKEW_SECS: i64 = 60;

/// An HTTP endpoint answering `{"timestamp": <unix s>, "rates": {"BTC": "65000.10", …}}`.
/// Rates may be JSON strings or numbers; numbers are read from their text,
/// never through a float.
///
/// Quoting only reads the cached answer. Once it is `refresh_after_secs`
/// old, one refresh runs in the background (never two at once), so a
/// hanging source slows no intent creation while the cached rate is still
/// within its maximum age; a failed refresh is tried again after a pause
/// that doubles from a second to a minute. Only with nothing cached yet
/// does a quote wait, for one fetch that every waiting quote shares. An
/// answer larger than [`MAX_RATE_BODY`] is refused unread.
#[derive(Debug)]
pub struct HttpJsonRates {
    inner: Arc<HttpInner>,
}

/// The largest rates answer read.
pub const MAX_RATE_BODY: usize = 1 << 20;
/// The longest pause between failed refreshes.
const MAX_RETRY_MS: i64 = 60_000;

#[derive(Debug)]
struct HttpInner {
    url: String,
    /// Scheme, host and port only: what intents, errors and logs show. The
    /// path or query of a price API's URL often holds its key.
    shown: String,
    max_age_secs: i64,
    refresh_after_secs: i64,
    client: reqwest::Client,
    clock: Arc<dyn Clock>,
    state: std::sync::Mutex<Cache>,
    /// Held by the one fetch a quote with nothing cached waits for.
    first: Mutex<()>,
}

#[derive(Debug, Default)]
struct Cache {
    snapshot: Option<Snapshot>,
    refreshing: bool,
    /// No fetch before this, after a failed one.
    retry_at_ms: i64,
    failures: u32,
    last_error: Option<RateError>,
}

#[derive(Debug, Clone)]
struct Snapshot {
    fetched_at_ms: i64,
    published_at_ms: i64,
    rates: HashMap<Asset, Decimal>,
}

#[derive(Deserialize)]
struct Wire<'a> {
    timestamp: i64,
    #[serde(borrow)]
    rates: HashMap<String, &'a RawValue>,
}

impl HttpJsonRates {
    pub fn new(
        url: String,
        max_age_secs: i64,
        refresh_after_secs: i64,
        clock: Arc<dyn Clock>,
    ) -> HttpJsonRates {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        HttpJsonRates {
            inner: Arc::new(HttpInner {
                shown: paywatch_core::shown_url(&url),
                url,
                max_age_secs,
                refresh_after_secs,
                client,
                clock,
                state: std::sync::Mutex::new(Cache::default()),
                first: Mutex::new(()),
            }),
        }
    }
}

impl HttpInner {
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn source_error(&self, reason: impl ToString) -> RateError {
        RateError::Source {
            url: self.shown.clone(),
            reason: reason.to_string(),
        }
    }

    async fn fetch(&self) -> Result<Snapshot, RateError> {
        let mut response = self
            .client
            .get(&self.url)
            .send()
            .await
            .map_err(|e| self.source_error(e.without_url()))?;
        if !response.status().is_success() {
            return Err(self.source_error(format!("HTTP {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.source_error(e.without_url()))?
        {
            if body.len() + chunk.len() > MAX_RATE_BODY {
                return Err(
                    self.source_error(format!("the answer is larger than {MAX_RATE_BODY} bytes"))
                );
            }
            body.extend_from_slice(&chunk);
        }
        let wire: Wire<'_> = serde_json::from_slice(&body)
            .map_err(|e| self.source_error(format!("bad JSON: {e}")))?;
        let mut rates = HashMap::new();
        for (name, raw) in wire.rates {
            let Ok(asset) = Asset::from_str(&name) else {
                continue;
            };
            let text = raw.get().trim().trim_matches('"');
            let rate = Decimal::from_str_exact(text).map_err(|_| {
                self.source_error(format!("rates.{name}: '{text}' is not a decimal number"))
            })?;
            rates.insert(asset, rate);
        }
        Ok(Snapshot {
            fetched_at_ms: self.clock.now_ms(),
            published_at_ms: wire.timestamp.saturating_mul(1000),
            rates,
        })
    }

    /// One fetch, its outcome kept: the answer, or the error and when to
    /// try again.
    async fn refresh(&self) {
        let fetched = self.fetch().await;
        let now = self.clock.now_ms();
        let mut cache = self.cache();
        cache.refreshing = false;
        match fetched {
            Ok(snapshot) => {
                cache.snapshot = Some(snapshot);
                cache.failures = 0;
                cache.retry_at_ms = 0;
                cache.last_error = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "rate refresh failed; the cached rates serve while fresh");
                let pause = (1_000i64 << cache.failures.min(6)).min(MAX_RETRY_MS);
                cache.failures += 1;
                cache.retry_at_ms = now + pause;
                cache.last_error = Some(e);
            }
        }
    }

    /// Starts a background refresh if the cached answer is due one and
    /// none is running or paused after a failure.
    fn refresh_if_due(self: &Arc<Self>, now: i64) {
        let mut cache = self.cache();
        let due = cache
            .snapshot
            .as_ref()
            .is_some_and(|s| now - s.fetched_at_ms >= self.refresh_after_secs * 1000);
        if !due || cache.refreshing || now < cache.retry_at_ms {
            return;
        }
        cache.refreshing = true;
        drop(cache);
        let inner = Arc::clone(self);
        tokio::spawn(async move { inner.refresh().await });
    }

    /// Nothing cached yet: one fetch, shared by every quote waiting.
    async fn first_fetch(&self) -> Result<(), RateError> {
        let _only = self.first.lock().await;
        {
            let cache = self.cache();
            if cache.snapshot.is_some() {
                return Ok(());
            }
            if self.clock.now_ms() < cache.retry_at_ms {
                return Err(cache
                    .last_error
                    .clone()
                    .unwrap_or_else(|| self.source_error("not answered yet")));
            }
        }
        self.refresh().await;
        let cache = self.cache();
        match (&cache.snapshot, &cache.last_error) {
            (Some(_), _) => Ok(()),
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Err(self.source_error("no answer")),
        }
    }
}

#[async_trait]
impl RateSource for HttpJsonRates {
    async fn usd_rate(&self, asset: Asset) -> Result<Rate, RateError> {
        let inner = &self.inner;
        if inner.cache().snapshot.is_none() {
            inner.first_fetch().await?;
        }
        let now = inner.clock.now_ms();
        inner.refresh_if_due(now);
        let snapshot = inner
            .cache()
            .snapshot
            .clone()
            .ok_or(RateError::Missing(asset))?;
        let usd_per_coin = *snapshot
            .rates
            .get(&asset)
            .ok_or(RateError::Missing(asset))?;
        // A timestamp ahead of us would keep a frozen rate "fresh" for ever.
        let ahead_ms = snapshot.published_at_ms.saturating_sub(now);
        if ahead_ms > MAX_FUTURE_SKEW_SECS * 1000 {
            return Err(RateError::FromTheFuture {
                asset,
                ahead_secs: ahead_ms / 1000,
                max_skew_secs: MAX_FUTURE_SKEW_SECS,
            });
        }
        let age_secs = (now - snapshot.published_at_ms) / 1000;
        if age_secs > inner.max_age_secs {
            return Err(RateError::Stale {
                asset,
                age_secs,
                max_age_secs: inner.max_age_secs,
            });
        }
        Ok(Rate {
            usd_per_coin,
            source: inner.shown.clone(),
            at_ms: snapshot.published_at_ms,
        })
    }
}

/// The rates paywatch quotes with: stablecoins at par unless told otherwise,
/// then the configured source.
#[derive(Debug, Clone)]
pub struct RateBook {
    source: Arc<dyn RateSource>,
    stablecoins_at_par: bool,
    clock: Arc<dyn Clock>,
}

impl RateBook {
    pub fn new(
        source: Arc<dyn RateSource>,
        stablecoins_at_par: bool,
        clock: Arc<dyn Clock>,
    ) -> RateBook {
        RateBook {
            source,
            stablecoins_at_par,
            clock,
        }
    }

    pub async fn usd_rate(&self, asset: Asset) -> Result<Rate, RateError> {
        if self.stablecoins_at_par && asset.is_usd_stablecoin() {
            return Ok(Rate {
                usd_per_coin: Decimal::ONE,
                source: "par".into(),
                at_ms: self.clock.now_ms(),
            });
        }
        self.source.usd_rate(asset).await
    }
}

/// Parses a configured rate exactly, naming the key it came from.
pub fn parse_rate(key: &str, value: &str) -> Result<Decimal, String> {
    Decimal::from_str_exact(value.trim())
        .ok()
        .filter(|d| *d > Decimal::ZERO)
        .ok_or_else(|| format!("{key}: '{value}' is not a positive decimal rate"))
}

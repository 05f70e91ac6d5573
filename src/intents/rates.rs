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
#[derive(Debug)]
pub struct HttpJsonRates {
    url: String,
    max_age_secs: i64,
    refresh_after_secs: i64,
    client: reqwest::Client,
    clock: Arc<dyn Clock>,
    cache: Mutex<Option<Snapshot>>,
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
            url,
            max_age_secs,
            refresh_after_secs,
            client,
            clock,
            cache: Mutex::new(None),
        }
    }

    fn source_error(&self, reason: impl ToString) -> RateError {
        RateError::Source {
            url: self.url.clone(),
            reason: reason.to_string(),
        }
    }

    async fn fetch(&self) -> Result<Snapshot, RateError> {
        let response = self
            .client
            .get(&self.url)
            .send()
            .await
            .map_err(|e| self.source_error(e))?;
        if !response.status().is_success() {
            return Err(self.source_error(format!("HTTP {}", response.status())));
        }
        let body = response.text().await.map_err(|e| self.source_error(e))?;
        let wire: Wire<'_> =
            serde_json::from_str(&body).map_err(|e| self.source_error(format!("bad JSON: {e}")))?;
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
}

#[async_trait]
impl RateSource for HttpJsonRates {
    async fn usd_rate(&self, asset: Asset) -> Result<Rate, RateError> {
        let now = self.clock.now_ms();
        let mut cache = self.cache.lock().await;
        let fresh_enough = cache
            .as_ref()
            .is_some_and(|s| now - s.fetched_at_ms < self.refresh_after_secs * 1000);
        if !fresh_enough {
            match self.fetch().await {
                Ok(s) => *cache = Some(s),
                // A failed refresh falls back to the cached snapshot, which
                // the age check below still guards.
                Err(e) if cache.is_none() => return Err(e),
                Err(e) => tracing::warn!(error = %e, "rate refresh failed; using the cached rates"),
            }
        }
        let snapshot = cache.as_ref().ok_or(RateError::Missing(asset))?;
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
        if age_secs > self.max_age_secs {
            return Err(RateError::Stale {
                asset,
                age_secs,
                max_age_secs: self.max_age_secs,
            });
        }
        Ok(Rate {
            usd_per_coin,
            source: self.url.clone(),
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

//! Where USD prices come from: fixed rates from config, a custom HTTP JSON
//! endpoint, or the median of the exchanges merchants already use. A
//! missing, stale or disputed rate is an error, never a guess.

mod cache;
mod exchanges;
mod fetch;
mod http_json;
mod median;
pub(crate) mod providers;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use paywatch_core::Asset;
use rust_decimal::Decimal;

use crate::clock::Clock;

pub use exchanges::{ExchangePolicy, ExchangeRates, DEFAULT_PROVIDER_TIMEOUT};
pub use http_json::HttpJsonRates;
pub use providers::{provider_names, MAX_USD_PER_COIN};

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
    /// Fewer exchanges than the quorum answered fresh for the asset: each
    /// one that did not is named with why.
    #[error(
        "no USD rate for {asset}: {fresh} fresh exchange answer(s) of the {quorum} needed \
         ({answered}); {problems}"
    )]
    NoQuorum {
        asset: Asset,
        fresh: usize,
        quorum: usize,
        /// `name=value` of those that answered fresh, or "none".
        answered: String,
        /// `name: why` of each that did not.
        problems: String,
    },
    /// The exchanges' answers are further apart than allowed.
    #[error(
        "no USD rate for {asset}: the exchanges disagree by {spread_bps} bps \
         (max-min over the median), more than the {max_spread_bps} bps allowed: {answers}"
    )]
    Disagree {
        asset: Asset,
        spread_bps: Decimal,
        max_spread_bps: u32,
        /// `name=value` of each fresh answer, lowest to highest.
        answers: String,
    },
}

#[async_trait]
pub trait RateSource: Send + Sync + Debug {
    async fn usd_rate(&self, asset: Asset) -> Result<Rate, RateError>;

    /// Starts fetching in the background, so the first quote finds rates
    /// already cached. Sources that fetch nothing ignore it.
    fn warm_up(&self) {}
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

    /// See [`RateSource::warm_up`]: for the daemon, not one-off commands.
    pub fn warm_up(&self) {
        self.source.warm_up();
    }
}

/// Parses a configured rate exactly, naming the key it came from.
pub fn parse_rate(key: &str, value: &str) -> Result<Decimal, String> {
    Decimal::from_str_exact(value.trim())
        .ok()
        .filter(|d| *d > Decimal::ZERO)
        .ok_or_else(|| format!("{key}: '{value}' is not a positive decimal rate"))
}

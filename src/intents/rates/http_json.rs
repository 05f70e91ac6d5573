//! A custom HTTP JSON rates endpoint, for a merchant with a price feed of
//! their own.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use paywatch_core::Asset;
use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::cache::{FetchFuture, Refreshing};
use super::{fetch, Rate, RateError, RateSource, MAX_FUTURE_SKEW_SECS};
use crate::clock::Clock;

/// The largest rates answer read.
pub const MAX_RATE_BODY: usize = 1 << 20;

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
    /// Scheme, host and port only: what intents, errors and logs show. The
    /// path or query of a price API's URL often holds its key.
    shown: String,
    max_age_secs: i64,
    clock: Arc<dyn Clock>,
    cache: Refreshing<Snapshot>,
}

#[derive(Debug)]
struct Snapshot {
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
        let shown = paywatch_core::shown_url(&url);
        let client = fetch::client(Duration::from_secs(10));
        let (fetch_url, fetch_shown) = (Arc::new(url), shown.clone());
        let cache = Refreshing::new(
            move || -> FetchFuture<Snapshot> {
                let (client, url, shown) =
                    (client.clone(), Arc::clone(&fetch_url), fetch_shown.clone());
                Box::pin(async move {
                    read(&client, &url)
                        .await
                        .map_err(|reason| RateError::Source { url: shown, reason })
                })
            },
            refresh_after_secs,
            clock.clone(),
        );
        HttpJsonRates {
            shown,
            max_age_secs,
            clock,
            cache,
        }
    }
}

async fn read(client: &reqwest::Client, url: &str) -> Result<Snapshot, String> {
    let body = fetch::get(client, url).await?;
    let wire: Wire<'_> = fetch::json(&body)?;
    let mut rates = HashMap::new();
    for (name, raw) in wire.rates {
        let Ok(asset) = Asset::from_str(&name) else {
            continue;
        };
        let rate = fetch::decimal(raw).map_err(|why| format!("rates.{name}: {why}"))?;
        rates.insert(asset, rate);
    }
    Ok(Snapshot {
        published_at_ms: wire.timestamp.saturating_mul(1000),
        rates,
    })
}

#[async_trait]
impl RateSource for HttpJsonRates {
    async fn usd_rate(&self, asset: Asset) -> Result<Rate, RateError> {
        let snapshot = self.cache.get().await?.value;
        let now = self.clock.now_ms();
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
            source: self.shown.clone(),
            at_ms: snapshot.published_at_ms,
        })
    }

    fn warm_up(&self) {
        self.cache.keep_fresh();
    }
}

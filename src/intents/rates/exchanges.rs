//! Several exchanges at once: the locked rate is the median of their fresh
//! answers, refused when too few answered fresh or when they disagree by
//! more than allowed, each refusal naming the exchanges and why.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use paywatch_core::Asset;
use rust_decimal::Decimal;

use super::cache::{FetchFuture, Fetched, Refreshing};
use super::median::{median, spread_bps};
use super::providers::{Answer, Provider};
use super::{fetch, Rate, RateError, RateSource, MAX_FUTURE_SKEW_SECS};
use crate::clock::Clock;

/// How long one request to an exchange may take: the most a quote with
/// nothing cached waits (all exchanges are asked at once).
pub const DEFAULT_PROVIDER_TIMEOUT: Duration = Duration::from_secs(5);

/// What makes the exchanges' answers a rate.
#[derive(Debug, Clone)]
pub struct ExchangePolicy {
    /// Fresh answers needed for a rate.
    pub quorum: usize,
    /// The largest (max - min) / median allowed, in basis points.
    pub max_spread_bps: u32,
    /// An answer older than this is not fresh.
    pub max_age_secs: i64,
    /// Each exchange is asked again once its answer is this old.
    pub refresh_secs: i64,
    /// How long one request may take.
    pub timeout: Duration,
}

/// The median of several exchanges' USD prices. Each exchange is fetched
/// in the background into a cache of its own (see the custom `http`
/// source for how), so a quote reads caches and a hanging exchange holds up
/// no quote once something is cached; only with fewer than the quorum
/// cached does a quote wait, once and at most [`ExchangePolicy::timeout`],
/// for the exchanges with nothing cached, all at once.
#[derive(Debug)]
pub struct ExchangeRates {
    feeds: Vec<Feed>,
    policy: ExchangePolicy,
    clock: Arc<dyn Clock>,
}

#[derive(Debug)]
struct Feed {
    name: &'static str,
    cache: Refreshing<Answer>,
}

/// One exchange's fresh price for the asset.
struct Fresh {
    name: &'static str,
    usd: Decimal,
    at_ms: i64,
}

impl ExchangeRates {
    /// `providers`: each provider's name and, optionally, a base URL other
    /// than its public API's (a proxy, a test server).
    pub fn new(
        providers: &[(String, Option<String>)],
        policy: ExchangePolicy,
        clock: Arc<dyn Clock>,
    ) -> Result<ExchangeRates, String> {
        let client = fetch::client(policy.timeout);
        let mut feeds = Vec::new();
        for (name, url) in providers {
            let provider = Provider::from_str(name)?;
            let base = Arc::new(
                url.clone()
                    .unwrap_or_else(|| provider.default_url().to_owned()),
            );
            let client = client.clone();
            let cache = Refreshing::new(
                move || -> FetchFuture<Answer> {
                    let (client, base) = (client.clone(), Arc::clone(&base));
                    Box::pin(async move {
                        provider
                            .fetch(&client, &base)
                            .await
                            .map_err(|reason| RateError::Source {
                                url: provider.name().to_owned(),
                                reason,
                            })
                    })
                },
                policy.refresh_secs,
                clock.clone(),
            );
            feeds.push(Feed {
                name: provider.name(),
                cache,
            });
        }
        if feeds.is_empty() || policy.quorum == 0 || policy.quorum > feeds.len() {
            return Err(format!(
                "a quorum of {} is not between 1 and the {} providers",
                policy.quorum,
                feeds.len()
            ));
        }
        Ok(ExchangeRates {
            feeds,
            policy,
            clock,
        })
    }

    /// Each exchange's fresh price for `asset`, and for each other one why
    /// it has none.
    fn judge(&self, asset: Asset, seen: &[Option<Fetched<Answer>>]) -> (Vec<Fresh>, Vec<String>) {
        let now = self.clock.now_ms();
        let mut fresh = Vec::new();
        let mut problems = Vec::new();
        for (feed, fetched) in self.feeds.iter().zip(seen) {
            let last_failure = || {
                feed.cache.last_error().map(|e| match e {
                    RateError::Source { reason, .. } => reason,
                    other => other.to_string(),
                })
            };
            let Some(fetched) = fetched else {
                let why = last_failure().unwrap_or_else(|| "no answer yet".to_owned());
                problems.push(format!("{}: {why}", feed.name));
                continue;
            };
            let quote = match fetched.value.quotes.get(&asset) {
                None => Err(format!("no {asset}/USD pair in its answer")),
                Some(Err(why)) => Err(why.clone()),
                Some(Ok(quote)) => Ok(*quote),
            };
            let why = match quote {
                Err(why) => why,
                Ok(quote) => {
                    let at_ms = quote.published_at_ms.unwrap_or(fetched.fetched_at_ms);
                    let ahead_ms = at_ms.saturating_sub(now);
                    let age_secs = now.saturating_sub(at_ms) / 1000;
                    if ahead_ms > MAX_FUTURE_SKEW_SECS * 1000 {
                        format!(
                            "stamped {} s in the future, more than the {MAX_FUTURE_SKEW_SECS} s \
                             of clock skew allowed: refused",
                            ahead_ms / 1000
                        )
                    } else if age_secs > self.policy.max_age_secs {
                        let mut why = format!(
                            "stale: {age_secs} s old, older than the {} s allowed",
                            self.policy.max_age_secs
                        );
                        if let Some(failure) = last_failure() {
                            let _ = write!(why, " (the last refresh failed: {failure})");
                        }
                        why
                    } else {
                        fresh.push(Fresh {
                            name: feed.name,
                            usd: quote.usd,
                            at_ms,
                        });
                        continue;
                    }
                }
            };
            problems.push(format!("{}: {why}", feed.name));
        }
        (fresh, problems)
    }

    fn rate(&self, asset: Asset, fresh: &[Fresh], problems: &[String]) -> Result<Rate, RateError> {
        let named = |answers: &[&Fresh]| {
            answers
                .iter()
                .map(|f| format!("{}={}", f.name, f.usd.normalize()))
                .collect::<Vec<_>>()
                .join(",")
        };
        let all: Vec<&Fresh> = fresh.iter().collect();
        if fresh.len() < self.policy.quorum {
            return Err(RateError::NoQuorum {
                asset,
                fresh: fresh.len(),
                quorum: self.policy.quorum,
                answered: if fresh.is_empty() {
                    "none".to_owned()
                } else {
                    named(&all)
                },
                problems: problems.join("; "),
            });
        }
        let values: Vec<Decimal> = fresh.iter().map(|f| f.usd).collect();
        let Some(middle) = median(&values) else {
            return Err(RateError::Missing(asset));
        };
        let spread = spread_bps(&values, middle);
        if spread > Decimal::from(self.policy.max_spread_bps) {
            let mut sorted = all.clone();
            sorted.sort_by_key(|f| f.usd);
            return Err(RateError::Disagree {
                asset,
                spread_bps: spread.round_dp(2).normalize(),
                max_spread_bps: self.policy.max_spread_bps,
                answers: named(&sorted).replace(',', ", "),
            });
        }
        Ok(Rate {
            usd_per_coin: middle.normalize(),
            // What support reads on the intent to explain its price.
            source: format!("median({})", named(&all)),
            // As old as the oldest answer it rests on.
            at_ms: fresh.iter().map(|f| f.at_ms).min().unwrap_or(0),
        })
    }
}

#[async_trait]
impl RateSource for ExchangeRates {
    async fn usd_rate(&self, asset: Asset) -> Result<Rate, RateError> {
        let mut seen: Vec<Option<Fetched<Answer>>> =
            self.feeds.iter().map(|f| f.cache.peek()).collect();
        let (mut fresh, mut problems) = self.judge(asset, &seen);
        if fresh.len() < self.policy.quorum && seen.iter().any(Option::is_none) {
            // Not enough cached yet: wait for the first answers, all at once
            // (each bounded by the request timeout).
            let waits: Vec<_> = self
                .feeds
                .iter()
                .zip(&seen)
                .enumerate()
                .filter(|(_, (_, s))| s.is_none())
                .map(|(i, (feed, _))| {
                    let cache = feed.cache.clone();
                    (i, tokio::spawn(async move { cache.get().await }))
                })
                .collect();
            for (i, wait) in waits {
                seen[i] = wait.await.ok().and_then(Result::ok);
            }
            (fresh, problems) = self.judge(asset, &seen);
        }
        self.rate(asset, &fresh, &problems)
    }

    fn warm_up(&self) {
        for feed in &self.feeds {
            feed.cache.keep_fresh();
        }
    }
}

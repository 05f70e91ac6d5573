//! The exchanges paywatch reads USD prices from, each by name, each with a
//! parser of its own public API's real answer (recorded answers are kept in
//! `tests/fixtures/rates/`).

mod binance;
mod bitstamp;
mod coinbase;
mod coingecko;
mod kraken;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use paywatch_core::Asset;
use rust_decimal::Decimal;
use serde_json::value::RawValue;

use super::fetch;

/// A price above this many USD per coin is refused as absurd: no asset
/// paywatch takes is within orders of magnitude of it, and a feed
/// publishing one (a unit slip, a corrupted answer) must not lock it.
pub const MAX_USD_PER_COIN: i64 = 1_000_000_000;

/// One exchange's answer: for each asset it lists, its price or why that
/// price is refused.
#[derive(Debug, Clone, Default)]
pub(crate) struct Answer {
    pub(crate) quotes: HashMap<Asset, Result<Quote, String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quote {
    pub(crate) usd: Decimal,
    /// When the exchange says the price is from; `None` when its answer
    /// carries no time, and it is then as old as our fetch.
    pub(crate) published_at_ms: Option<i64>,
}

/// The built-in providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Provider {
    Coinbase,
    Kraken,
    Bitstamp,
    Binance,
    Coingecko,
}

const ALL: [Provider; 5] = [
    Provider::Coinbase,
    Provider::Kraken,
    Provider::Bitstamp,
    Provider::Binance,
    Provider::Coingecko,
];

/// Every built-in provider's name, as configured.
pub fn provider_names() -> Vec<&'static str> {
    ALL.iter().map(|p| p.name()).collect()
}

impl FromStr for Provider {
    type Err = String;

    fn from_str(s: &str) -> Result<Provider, String> {
        ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            format!(
                "'{s}' is not a known rate provider (known: {})",
                provider_names().join(", ")
            )
        })
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Provider {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Provider::Coinbase => "coinbase",
            Provider::Kraken => "kraken",
            Provider::Bitstamp => "bitstamp",
            Provider::Binance => "binance",
            Provider::Coingecko => "coingecko",
        }
    }

    /// The public API's base URL, used unless configured otherwise.
    pub(crate) fn default_url(self) -> &'static str {
        match self {
            Provider::Coinbase => "https://api.coinbase.com",
            Provider::Kraken => "https://api.kraken.com",
            Provider::Bitstamp => "https://www.bitstamp.net",
            Provider::Binance => "https://api.binance.com",
            Provider::Coingecko => "https://api.coingecko.com",
        }
    }

    /// One refresh of every asset this provider lists, from `base`.
    pub(crate) async fn fetch(
        self,
        client: &reqwest::Client,
        base: &str,
    ) -> Result<Answer, String> {
        let base = base.trim_end_matches('/');
        match self {
            Provider::Coinbase => {
                per_pair(
                    client,
                    base,
                    &coinbase::PAIRS,
                    coinbase::path,
                    coinbase::parse,
                )
                .await
            }
            Provider::Bitstamp => {
                per_pair(
                    client,
                    base,
                    &bitstamp::PAIRS,
                    bitstamp::path,
                    bitstamp::parse,
                )
                .await
            }
            Provider::Kraken => kraken::parse(&fetch::get(client, &kraken::url(base)).await?),
            Provider::Binance => binance::parse(&fetch::get(client, &binance::url(base)).await?),
            Provider::Coingecko => {
                coingecko::parse(&fetch::get(client, &coingecko::url(base)).await?)
            }
        }
    }
}

/// Providers that answer one pair a request: every pair asked at once. All
/// failing alike is the provider failing (and retried after a pause); some
/// failing is those pairs missing.
async fn per_pair(
    client: &reqwest::Client,
    base: &str,
    pairs: &[(Asset, &'static str)],
    path: fn(&str) -> String,
    parse: fn(Asset, &[u8]) -> Result<Quote, String>,
) -> Result<Answer, String> {
    let asks: Vec<_> = pairs
        .iter()
        .map(|&(asset, pair)| {
            let (client, url) = (client.clone(), format!("{base}{}", path(pair)));
            (
                asset,
                tokio::spawn(async move {
                    let body = fetch::get(&client, &url).await?;
                    parse(asset, &body)
                }),
            )
        })
        .collect();
    let mut answer = Answer::default();
    for (asset, ask) in asks {
        let quote = ask
            .await
            .unwrap_or_else(|e| Err(format!("the request failed: {e}")));
        answer.quotes.insert(asset, quote);
    }
    let mut failures = answer.quotes.values().filter_map(|q| q.as_ref().err());
    if let Some(first) = failures.next() {
        if answer
            .quotes
            .values()
            .all(|q| q.as_ref().err() == Some(first))
        {
            return Err(first.clone());
        }
    }
    Ok(answer)
}

/// A price as published, refused with a reason when it cannot be a price:
/// not a number, zero or less, or absurdly large.
pub(crate) fn price(raw: &RawValue) -> Result<Decimal, String> {
    let usd = fetch::decimal(raw)?;
    if usd <= Decimal::ZERO {
        return Err(format!("a price of {usd} is not above zero: refused"));
    }
    if usd > Decimal::from(MAX_USD_PER_COIN) {
        return Err(format!(
            "a price of {usd} USD is absurd (above {MAX_USD_PER_COIN}): refused"
        ));
    }
    Ok(usd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn absurd_prices_are_refused_with_a_reason() {
        for (text, why) in [
            ("\"0\"", "not above zero"),
            ("\"-5\"", "not above zero"),
            ("\"NaN\"", "not a decimal number"),
            ("1e30", "not a decimal number"),
            ("\"1000000000.01\"", "absurd"),
        ] {
            let err = price(&raw(text)).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
        assert_eq!(price(&raw("\"65000.10\"")).unwrap().to_string(), "65000.10");
    }

    #[test]
    fn rates_provider_names_are_parsed_and_an_unknown_one_names_the_known() {
        assert_eq!("kraken".parse::<Provider>().unwrap(), Provider::Kraken);
        let err = "krakken".parse::<Provider>().unwrap_err();
        assert!(
            err.contains("coinbase, kraken, bitstamp, binance, coingecko"),
            "{err}"
        );
    }
}

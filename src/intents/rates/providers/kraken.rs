//! Kraken's ticker, `GET /0/public/Ticker?pair=…`, every pair in one
//! request. Kraken answers under its own pair names (XXBTZUSD for XBTUSD,
//! XETHZUSD, XLTCZUSD, USDTZUSD; SOLUSD, TRXUSD and USDCUSD as asked), and
//! reports failure in an `error` array, sometimes with HTTP 200. The price
//! is the last trade's (`c[0]`); the answer carries no time, so it is as
//! old as our fetch.

use std::collections::HashMap;

use paywatch_core::Asset;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{fetch, price, Answer, Quote};

pub(super) fn url(base: &str) -> String {
    format!("{base}/0/public/Ticker?pair=XBTUSD,ETHUSD,LTCUSD,SOLUSD,TRXUSD,USDTUSD,USDCUSD")
}

/// Kraken's names in answers, and the names asked by (which some answers
/// use), for USD pairs only: a USDT pair (XBTUSDT) is not a USD price.
fn asset_of(pair: &str) -> Option<Asset> {
    Some(match pair {
        "XXBTZUSD" | "XBTUSD" => Asset::Btc,
        "XETHZUSD" | "ETHUSD" => Asset::Eth,
        "XLTCZUSD" | "LTCUSD" => Asset::Ltc,
        "SOLUSD" => Asset::Sol,
        "TRXUSD" => Asset::Trx,
        "USDTZUSD" | "USDTUSD" => Asset::Usdt,
        "USDCUSD" => Asset::Usdc,
        _ => return None,
    })
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(default)]
    error: Vec<String>,
    #[serde(borrow, default)]
    result: HashMap<String, Ticker<'a>>,
}

#[derive(Deserialize)]
struct Ticker<'a> {
    #[serde(borrow)]
    c: Vec<&'a RawValue>,
}

pub(super) fn parse(body: &[u8]) -> Result<Answer, String> {
    let wire: Wire<'_> = fetch::json(body)?;
    if !wire.error.is_empty() {
        return Err(format!("answered errors: {}", wire.error.join(", ")));
    }
    let mut answer = Answer::default();
    for (pair, ticker) in &wire.result {
        let Some(asset) = asset_of(pair) else {
            continue;
        };
        let quote = match ticker.c.first() {
            Some(last) => price(last).map(|usd| Quote {
                usd,
                published_at_ms: None,
            }),
            None => Err(format!("{pair} has no last trade price")),
        };
        answer.quotes.insert(asset, quote);
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_kraken_recorded_ticker_reads_its_own_pair_names() {
        let answer = parse(include_bytes!(
            "../../../../tests/fixtures/rates/kraken.json"
        ))
        .unwrap();
        let btc = answer.quotes[&Asset::Btc].clone().unwrap();
        assert_eq!(btc.usd.to_string(), "30303.20000");
        assert_eq!(btc.published_at_ms, None);
        assert_eq!(answer.quotes.len(), 1);
    }

    #[test]
    fn rates_kraken_usdt_pair_is_no_usd_price() {
        let body = include_bytes!("../../../../tests/fixtures/rates/kraken_xbtusdt.json");
        assert!(parse(body).unwrap().quotes.is_empty());
    }

    #[test]
    fn rates_kraken_error_array_is_a_failure() {
        let err = parse(br#"{"error":["EGeneral:Too many requests"]}"#).unwrap_err();
        assert!(err.contains("EGeneral:Too many requests"), "{err}");
    }
}

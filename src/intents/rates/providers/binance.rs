//! Binance's latest prices, `GET /api/v3/ticker/price?symbols=[…]`,
//! answering `[{"symbol":"BTCUSDT","price":"18229.90000000"}, …]`.
//!
//! Binance quotes in USDT, not USD: its "USD" price is a USDT price, taken
//! at par. It has no USDT price of its own (USDT is the quote), so it never
//! answers for USDT. The answer carries no time, so the price is as old as
//! our fetch.

use std::str::FromStr;

use paywatch_core::Asset;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{fetch, price, Answer, Quote};

pub(super) fn url(base: &str) -> String {
    // ["BTCUSDT",…], URL-encoded.
    format!(
        "{base}/api/v3/ticker/price?symbols=%5B%22BTCUSDT%22,%22ETHUSDT%22,%22LTCUSDT%22,\
         %22SOLUSDT%22,%22TRXUSDT%22,%22USDCUSDT%22%5D"
    )
}

#[derive(Deserialize)]
struct Ticker<'a> {
    symbol: String,
    #[serde(borrow)]
    price: &'a RawValue,
}

pub(super) fn parse(body: &[u8]) -> Result<Answer, String> {
    let tickers: Vec<Ticker<'_>> = fetch::json(body)?;
    let mut answer = Answer::default();
    for ticker in &tickers {
        let Some(asset) = ticker
            .symbol
            .strip_suffix("USDT")
            .and_then(|base| Asset::from_str(base).ok())
        else {
            continue;
        };
        let quote = price(ticker.price).map(|usd| Quote {
            usd,
            published_at_ms: None,
        });
        answer.quotes.insert(asset, quote);
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_binance_recorded_prices_read_usdt_pairs_only() {
        let answer = parse(include_bytes!(
            "../../../../tests/fixtures/rates/binance.json"
        ))
        .unwrap();
        let usd = |a: Asset| answer.quotes[&a].clone().unwrap().usd.to_string();
        assert_eq!(usd(Asset::Btc), "18229.90000000");
        assert_eq!(usd(Asset::Eth), "1395.60000000");
        assert_eq!(usd(Asset::Ltc), "83.79000000");
        // ETHBTC and LTCBTC are no USD price.
        assert_eq!(answer.quotes.len(), 3);
    }
}

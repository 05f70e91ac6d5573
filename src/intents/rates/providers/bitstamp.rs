//! Bitstamp's ticker, `GET /api/v2/ticker/{pair}/`, one pair a request,
//! answering `{"timestamp": "1710328241", "last": "73285", …}`: the last
//! trade's price, dated by Bitstamp. Bitstamp lists no TRX/USD market.

use paywatch_core::Asset;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{fetch, price, Quote};

pub(super) const PAIRS: [(Asset, &str); 6] = [
    (Asset::Btc, "btcusd"),
    (Asset::Eth, "ethusd"),
    (Asset::Ltc, "ltcusd"),
    (Asset::Sol, "solusd"),
    (Asset::Usdt, "usdtusd"),
    (Asset::Usdc, "usdcusd"),
];

pub(super) fn path(pair: &str) -> String {
    format!("/api/v2/ticker/{pair}/")
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow)]
    timestamp: &'a RawValue,
    #[serde(borrow)]
    last: &'a RawValue,
}

pub(super) fn parse(_asset: Asset, body: &[u8]) -> Result<Quote, String> {
    let wire: Wire<'_> = fetch::json(body)?;
    Ok(Quote {
        usd: price(wire.last)?,
        published_at_ms: Some(fetch::unix_secs(wire.timestamp)?.saturating_mul(1000)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_bitstamp_recorded_ticker_parses_with_its_own_time() {
        let body = include_bytes!("../../../../tests/fixtures/rates/bitstamp_btcusdt.json");
        let quote = parse(Asset::Btc, body).unwrap();
        assert_eq!(quote.usd.to_string(), "73285");
        assert_eq!(quote.published_at_ms, Some(1_710_328_241_000));
    }
}

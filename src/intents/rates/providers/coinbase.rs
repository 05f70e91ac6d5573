//! Coinbase's spot price, `GET /v2/prices/{BASE}-USD/spot`, answering
//! `{"data":{"base":"BTC","currency":"USD","amount":"48691.23"}}`.
//!
//! One request a pair rather than `/v2/exchange-rates?currency=USD`: that
//! answer is coins per dollar (0.0000153…), and inverting it would lock a
//! rounded quotient, not a price Coinbase published. The answer carries no
//! time, so the price is as old as our fetch.

use paywatch_core::Asset;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{fetch, price, Quote};

pub(super) const PAIRS: [(Asset, &str); 7] = [
    (Asset::Btc, "BTC-USD"),
    (Asset::Eth, "ETH-USD"),
    (Asset::Ltc, "LTC-USD"),
    (Asset::Sol, "SOL-USD"),
    (Asset::Trx, "TRX-USD"),
    (Asset::Usdt, "USDT-USD"),
    (Asset::Usdc, "USDC-USD"),
];

pub(super) fn path(pair: &str) -> String {
    format!("/v2/prices/{pair}/spot")
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow)]
    data: Data<'a>,
}

#[derive(Deserialize)]
struct Data<'a> {
    base: String,
    currency: String,
    #[serde(borrow)]
    amount: &'a RawValue,
}

pub(super) fn parse(asset: Asset, body: &[u8]) -> Result<Quote, String> {
    let wire: Wire<'_> = fetch::json(body)?;
    let data = wire.data;
    // An answer for another pair (a redirect, a proxy's cache) is no price
    // for this one.
    if data.base != asset.as_str() || data.currency != "USD" {
        return Err(format!(
            "answered for {}-{}, not {asset}-USD",
            data.base, data.currency
        ));
    }
    Ok(Quote {
        usd: price(data.amount)?,
        published_at_ms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_coinbase_recorded_spot_answer_parses() {
        let body = include_bytes!("../../../../tests/fixtures/rates/coinbase_btc_usd_spot.json");
        let quote = parse(Asset::Btc, body).unwrap();
        assert_eq!(quote.usd.to_string(), "48691.23");
        assert_eq!(quote.published_at_ms, None);
        let err = parse(Asset::Eth, body).unwrap_err();
        assert!(err.contains("BTC-USD, not ETH-USD"), "{err}");
    }
}

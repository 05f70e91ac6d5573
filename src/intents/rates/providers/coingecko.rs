//! CoinGecko's aggregated price, `GET /api/v3/simple/price?ids=…&vs_currencies=usd&include_last_updated_at=true`,
//! answering `{"bitcoin":{"usd":67187.3358936566,"last_updated_at":1711356300}}`:
//! prices are JSON numbers, read from their text (never a float), dated by
//! CoinGecko. An aggregator rather than an exchange: it averages many
//! markets, and updates every minute or so on the public API.

use std::collections::HashMap;

use paywatch_core::Asset;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{fetch, price, Answer, Quote};

const IDS: [(&str, Asset); 7] = [
    ("bitcoin", Asset::Btc),
    ("ethereum", Asset::Eth),
    ("litecoin", Asset::Ltc),
    ("solana", Asset::Sol),
    ("tron", Asset::Trx),
    ("tether", Asset::Usdt),
    ("usd-coin", Asset::Usdc),
];

pub(super) fn url(base: &str) -> String {
    format!(
        "{base}/api/v3/simple/price?ids=bitcoin,ethereum,litecoin,solana,tron,tether,usd-coin\
         &vs_currencies=usd&include_last_updated_at=true"
    )
}

#[derive(Deserialize)]
struct Coin<'a> {
    #[serde(borrow, default)]
    usd: Option<&'a RawValue>,
    #[serde(borrow, default)]
    last_updated_at: Option<&'a RawValue>,
}

pub(super) fn parse(body: &[u8]) -> Result<Answer, String> {
    let coins: HashMap<String, Coin<'_>> = fetch::json(body)?;
    let mut answer = Answer::default();
    for (id, asset) in IDS {
        let Some(coin) = coins.get(id) else {
            continue;
        };
        answer.quotes.insert(asset, quote(id, coin));
    }
    Ok(answer)
}

fn quote(id: &str, coin: &Coin<'_>) -> Result<Quote, String> {
    let usd = price(coin.usd.ok_or_else(|| format!("{id} has no usd price"))?)?;
    let at = coin
        .last_updated_at
        .map(fetch::unix_secs)
        .transpose()?
        .map(|s| s.saturating_mul(1000));
    Ok(Quote {
        usd,
        published_at_ms: at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_coingecko_recorded_simple_price_reads_numbers_exactly() {
        let answer = parse(include_bytes!(
            "../../../../tests/fixtures/rates/coingecko.json"
        ))
        .unwrap();
        let btc = answer.quotes[&Asset::Btc].clone().unwrap();
        assert_eq!(btc.usd.to_string(), "67187.3358936566");
        assert_eq!(btc.published_at_ms, Some(1_711_356_300_000));
    }
}

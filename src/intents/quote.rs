//! USD → base units, in integers: no float ever touches money.

use paywatch_core::Amount;
use rust_decimal::Decimal;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuoteError {
    #[error("the rate must be above zero, got {0}")]
    NonPositiveRate(Decimal),
    #[error("the quote overflows; the amount or the rate is out of range")]
    Overflow,
}

/// The coin amount worth `usd_cents` at `usd_per_coin`, rounded up to
/// `quote_decimals` places so the customer never pays less than the price,
/// and returned in base units (10^`decimals` per coin).
pub fn quote(
    usd_cents: u64,
    usd_per_coin: Decimal,
    decimals: u32,
    quote_decimals: u32,
) -> Result<Amount, QuoteError> {
    if usd_per_coin <= Decimal::ZERO {
        return Err(QuoteError::NonPositiveRate(usd_per_coin));
    }
    let rate = usd_per_coin.normalize();
    let q = quote_decimals.min(decimals);
    let mantissa = u128::try_from(rate.mantissa()).map_err(|_| QuoteError::Overflow)?;
    // coin = cents / 100 / (mantissa / 10^scale); in units of 10^-q coin:
    // ceil(cents * 10^(q + scale) / (100 * mantissa)).
    let numerator = u128::from(usd_cents)
        .checked_mul(pow10(q + rate.scale())?)
        .ok_or(QuoteError::Overflow)?;
    let denominator = mantissa.checked_mul(100).ok_or(QuoteError::Overflow)?;
    let units = numerator.div_ceil(denominator);
    units
        .checked_mul(pow10(decimals - q)?)
        .map(Amount)
        .ok_or(QuoteError::Overflow)
}

fn pow10(exp: u32) -> Result<u128, QuoteError> {
    10u128.checked_pow(exp).ok_or(QuoteError::Overflow)
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn stablecoin_at_par_is_exact() {
        assert_eq!(quote(10_000, d("1"), 6, 6).unwrap(), Amount(100_000_000));
    }

    #[test]
    fn rounds_up_to_the_quote_precision() {
        // 100 USD at 65,000 USD/BTC = 0.00153846153… BTC → 0.00153847 BTC.
        assert_eq!(quote(10_000, d("65000"), 8, 8).unwrap(), Amount(153_847));
        // 500 USD at 3,000.5 USD/ETH quoted to 6 places: 0.166638893… → 0.166639 ETH in wei.
        assert_eq!(
            quote(50_000, d("3000.5"), 18, 6).unwrap(),
            Amount(166_639_000_000_000_000)
        );
        // An exact division is not rounded.
        assert_eq!(quote(10_000, d("0.25"), 6, 6).unwrap(), Amount(400_000_000));
    }

    #[test]
    fn refuses_a_zero_or_negative_rate() {
        assert!(matches!(
            quote(100, d("0"), 8, 8),
            Err(QuoteError::NonPositiveRate(_))
        ));
        assert!(matches!(
            quote(100, d("-1"), 8, 8),
            Err(QuoteError::NonPositiveRate(_))
        ));
    }
}

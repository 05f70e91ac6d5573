//! The middle of several exchanges' prices, and how far apart they are:
//! exact decimal arithmetic, no float anywhere.

use rust_decimal::Decimal;

/// The median; with an even count, the mean of the two middle values.
/// `None` for no values.
pub(crate) fn median(values: &[Decimal]) -> Option<Decimal> {
    let mut sorted = values.to_vec();
    sorted.sort();
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / Decimal::TWO),
    }
}

/// (max - min) / median, in basis points: how far apart the answers are,
/// relative to the price they settle on.
pub(crate) fn spread_bps(values: &[Decimal], median: Decimal) -> Decimal {
    let (Some(min), Some(max)) = (values.iter().min(), values.iter().max()) else {
        return Decimal::ZERO;
    };
    if median <= Decimal::ZERO {
        return Decimal::MAX;
    }
    (*max - *min) * Decimal::from(10_000) / median
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn rates_median_of_odd_and_even_counts_is_exact() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[d("3"), d("1"), d("2")]), Some(d("2")));
        assert_eq!(
            median(&[d("65000.10"), d("65001.21"), d("64999.90"), d("65000.00")]),
            Some(d("65000.05"))
        );
        assert_eq!(median(&[d("0.1"), d("0.2")]), Some(d("0.15")));
    }

    #[test]
    fn rates_spread_is_max_minus_min_over_the_median_in_bps() {
        let values = [d("100"), d("101"), d("102")];
        assert_eq!(spread_bps(&values, d("101")).round_dp(2), d("198.02"));
        assert_eq!(spread_bps(&[d("5")], d("5")), Decimal::ZERO);
    }
}

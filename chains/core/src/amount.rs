use std::fmt;
use std::str::FromStr;

/// An amount in a chain's base units (sat, wei, sun, lamport). Never a float.
///
/// u128 holds every realistic payment (3.4e20 ETH); the database columns are
/// wide enough (NUMERIC(78,0)) for a U256 should an EVM edge ever need it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(pub u128);

/// What was wrong with a decimal string, named with the field it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: '{value}' {problem}")]
pub struct AmountError {
    pub field: String,
    pub value: String,
    pub problem: AmountProblem,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AmountProblem {
    #[error("is empty")]
    Empty,
    #[error("is negative; amounts are never below zero")]
    Negative,
    #[error("is not a plain decimal number (digits with at most one '.')")]
    Malformed,
    #[error("has more than {max_decimals} decimal places")]
    TooPrecise { max_decimals: u32 },
    #[error("is too large")]
    Overflow,
}

impl Amount {
    pub const ZERO: Amount = Amount(0);

    /// Parses a decimal coin amount ("1.5") into base units, exactly.
    ///
    /// Excess precision is an error rather than a rounding: silently dropping
    /// digits of money is how ledgers drift.
    pub fn parse_decimal(field: &str, value: &str, decimals: u32) -> Result<Amount, AmountError> {
        parse_scaled(value, decimals)
            .map(Amount)
            .map_err(|problem| AmountError {
                field: field.to_owned(),
                value: value.to_owned(),
                problem,
            })
    }

    /// Parses an integer count of base units, as stored in the database.
    pub fn parse_base_units(field: &str, value: &str) -> Result<Amount, AmountError> {
        Amount::parse_decimal(field, value, 0)
    }

    /// Renders base units as a coin amount with no trailing zeros.
    pub fn to_decimal_string(self, decimals: u32) -> String {
        let s = self.0.to_string();
        if decimals == 0 {
            return s;
        }
        let d = decimals as usize;
        let padded = if s.len() <= d {
            format!("{}{}", "0".repeat(d + 1 - s.len()), s)
        } else {
            s
        };
        let (int, frac) = padded.split_at(padded.len() - d);
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            int.to_owned()
        } else {
            format!("{int}.{frac}")
        }
    }

    pub fn checked_add(self, other: Amount) -> Option<Amount> {
        self.0.checked_add(other.0).map(Amount)
    }

    pub fn saturating_sub(self, other: Amount) -> Amount {
        Amount(self.0.saturating_sub(other.0))
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

/// Parses `value` and multiplies it by 10^decimals, failing on anything it
/// cannot represent exactly.
pub(crate) fn parse_scaled(value: &str, decimals: u32) -> Result<u128, AmountProblem> {
    let v = value.trim();
    if v.is_empty() {
        return Err(AmountProblem::Empty);
    }
    if v.starts_with('-') {
        return Err(AmountProblem::Negative);
    }
    let v = v.strip_prefix('+').unwrap_or(v);
    let (int, frac) = match v.split_once('.') {
        Some((i, f)) => (i, f),
        None => (v, ""),
    };
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits_ok(int) || !digits_ok(frac) {
        return Err(AmountProblem::Malformed);
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > decimals as usize {
        return Err(AmountProblem::TooPrecise {
            max_decimals: decimals,
        });
    }
    let mut acc: u128 = 0;
    let push = |acc: u128, d: u8| -> Result<u128, AmountProblem> {
        acc.checked_mul(10)
            .and_then(|a| a.checked_add(u128::from(d - b'0')))
            .ok_or(AmountProblem::Overflow)
    };
    for d in int.bytes().chain(frac.bytes()) {
        acc = push(acc, d)?;
    }
    for _ in frac.len()..decimals as usize {
        acc = acc.checked_mul(10).ok_or(AmountProblem::Overflow)?;
    }
    Ok(acc)
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Amount {
    type Err = AmountError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Amount::parse_base_units("amount", s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimal_coin_amounts_exactly() {
        assert_eq!(
            Amount::parse_decimal("a", "1.5", 8).unwrap(),
            Amount(150_000_000)
        );
        assert_eq!(
            Amount::parse_decimal("a", "0.00000001", 8).unwrap(),
            Amount(1)
        );
        assert_eq!(
            Amount::parse_decimal("a", "2", 18).unwrap(),
            Amount(2_000_000_000_000_000_000)
        );
        assert_eq!(Amount::parse_decimal("a", ".5", 1).unwrap(), Amount(5));
        assert_eq!(
            Amount::parse_decimal("a", "1.10000", 2).unwrap(),
            Amount(110)
        );
    }

    #[test]
    fn rejects_what_it_cannot_represent_and_names_the_field() {
        let err = Amount::parse_decimal("usd_amount", "1.001", 2).unwrap_err();
        assert_eq!(err.problem, AmountProblem::TooPrecise { max_decimals: 2 });
        assert_eq!(
            err.to_string(),
            "usd_amount: '1.001' has more than 2 decimal places"
        );
        for (bad, problem) in [
            ("-1", AmountProblem::Negative),
            ("", AmountProblem::Empty),
            ("1e5", AmountProblem::Malformed),
            ("1.2.3", AmountProblem::Malformed),
            (".", AmountProblem::Malformed),
            ("0x10", AmountProblem::Malformed),
            ("1,5", AmountProblem::Malformed),
            (
                "999999999999999999999999999999999999999999",
                AmountProblem::Overflow,
            ),
        ] {
            assert_eq!(
                Amount::parse_decimal("amount", bad, 8).unwrap_err().problem,
                problem,
                "{bad}"
            );
        }
    }

    #[test]
    fn renders_base_units_as_coin() {
        assert_eq!(Amount(150_000_000).to_decimal_string(8), "1.5");
        assert_eq!(Amount(1).to_decimal_string(8), "0.00000001");
        assert_eq!(Amount(0).to_decimal_string(6), "0");
        assert_eq!(Amount(42).to_decimal_string(0), "42");
    }
}

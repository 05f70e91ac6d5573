//! The shortfall still accepted as paid: a share of the amount due (basis
//! points), optionally capped by an absolute coin amount. Relative, because
//! orders come in any USD amount and a fixed coin amount that is small for
//! one is the whole of another; capped, so a large order's share stays a
//! sane amount of coin; and never the whole amount, so nothing received is
//! never paid.

use paywatch_core::Amount;

/// At most this share of an amount due may be forgiven (10%): more is not a
/// rounding allowance but a discount, which is support's call.
pub const MAX_BASIS_POINTS: u32 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tolerance {
    /// Share of the amount due, in hundredths of a percent.
    pub basis_points: u32,
    /// At most this much, in base units, whatever the share comes to.
    pub max: Option<Amount>,
}

impl Tolerance {
    pub const NONE: Tolerance = Tolerance {
        basis_points: 0,
        max: None,
    };

    /// The least received money that pays `due`: never zero, never below
    /// `due` less the share (rounded down, so the payer is never asked for
    /// less than the share allows) or the cap.
    pub fn least_accepted(&self, due: Amount) -> u128 {
        let share = due.0 / 10_000 * u128::from(self.basis_points)
            + due.0 % 10_000 * u128::from(self.basis_points) / 10_000;
        let forgiven = match self.max {
            Some(max) => share.min(max.0),
            None => share,
        };
        due.0.saturating_sub(forgiven).max(1)
    }

    /// What may differ from `due` either way without a person looking: the
    /// share forgiven a short payer is also the excess an overpayer leaves
    /// without a review case.
    pub fn allowance(&self, due: Amount) -> u128 {
        due.0 - self.least_accepted(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn no_tolerance_asks_for_every_base_unit() {
        assert_eq!(Tolerance::NONE.least_accepted(Amount(1_000)), 1_000);
    }

    #[test]
    fn a_share_is_of_the_amount_due_and_the_cap_bounds_it() {
        let t = Tolerance {
            basis_points: 50,
            max: None,
        };
        assert_eq!(t.least_accepted(Amount(100_000_000)), 99_500_000);
        let capped = Tolerance {
            basis_points: 50,
            max: Some(Amount(100_000)),
        };
        assert_eq!(capped.least_accepted(Amount(100_000_000)), 99_900_000);
    }

    #[test]
    fn a_cap_as_large_as_the_amount_due_still_leaves_money_to_pay() {
        let t = Tolerance {
            basis_points: MAX_BASIS_POINTS,
            max: Some(Amount(u128::MAX)),
        };
        assert_eq!(t.least_accepted(Amount(1)), 1);
        assert_eq!(t.least_accepted(Amount(10)), 9);
    }

    proptest! {
        #[test]
        fn the_least_accepted_is_never_zero_nor_above_the_amount_due(
            due in 1u128..u128::MAX / 2,
            bps in 0u32..=MAX_BASIS_POINTS,
            max in proptest::option::of(any::<u128>()),
        ) {
            let t = Tolerance { basis_points: bps, max: max.map(Amount) };
            let least = t.least_accepted(Amount(due));
            prop_assert!(least >= 1);
            prop_assert!(least <= due);
            prop_assert!(due - least <= due / 10 + 1);
        }
    }
}

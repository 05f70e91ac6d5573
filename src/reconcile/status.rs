use std::fmt;
use std::str::FromStr;

/// The status contract the storefront reads (see README).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    AwaitingPayment,
    Confirming,
    Paid,
    Expired,
    NeedsReview,
    Resolved,
}

/// Why an intent is not simply paid or awaiting payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exception {
    Underpaid,
    Overpaid,
    PaidLate,
    WrongAsset,
    WrongNetwork,
    Duplicate,
    Reversed,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{value}'")]
pub struct UnknownName {
    what: &'static str,
    value: String,
}

macro_rules! named {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownName { what: $what, value: s.to_owned() })
            }
        }
    };
}

named!(Status, "status", {
    AwaitingPayment => "awaiting_payment",
    Confirming => "confirming",
    Paid => "paid",
    Expired => "expired",
    NeedsReview => "needs_review",
    Resolved => "resolved",
});

named!(Exception, "exception", {
    Underpaid => "underpaid",
    Overpaid => "overpaid",
    PaidLate => "paid_late",
    WrongAsset => "wrong_asset",
    WrongNetwork => "wrong_network",
    Duplicate => "duplicate",
    Reversed => "reversed",
});

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

impl UnknownName {
    pub(crate) fn new(what: &'static str, value: &str) -> UnknownName {
        UnknownName {
            what,
            value: value.to_owned(),
        }
    }
}

macro_rules! named {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::reconcile::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| $crate::reconcile::UnknownName::new($what, s))
            }
        }
    };
}

pub(crate) use named;

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

/// How support closed an intent, as the storefront reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Support accepted the money, or another intent's payment was
    /// reassigned to it: settled by support.
    PaidBySupport,
    Dismissed,
    RefundRequired,
    Refunded,
    /// Its payment was moved to the intent it was meant for.
    Reassigned,
}

named!(Outcome, "outcome", {
    PaidBySupport => "paid_by_support",
    Dismissed => "dismissed",
    RefundRequired => "refund_required",
    Refunded => "refunded",
    Reassigned => "reassigned",
});

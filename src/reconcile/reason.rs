//! Why an intent stands where it does, kept as figures and rendered only
//! when written, so the hot path formats nothing.

use paywatch_core::{Amount, Method};

use super::facts::{Action, SettledBy};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Support closed the case; `counterpart` is the other intent of a reassign.
    ResolvedBySupport {
        action: Action,
        counterpart: Option<i64>,
        refunded: bool,
    },
    /// Settled by another intent's payment that support reassigned here.
    PaidByReassign {
        from: Option<i64>,
    },
    Awaiting {
        due: u128,
    },
    PartlyReceived {
        received: u128,
        due: u128,
    },
    PartlyUnconfirmed {
        received: u128,
        due: u128,
    },
    SeenInTime {
        seen: u128,
        final_part: u128,
    },
    /// Enough was seen in time, but the confirm-by deadline passed before it
    /// was all final: once final it goes to a person.
    SeenInTimePastDeadline {
        seen: u128,
        final_part: u128,
    },
    /// Money seen in time became final only after the confirm-by deadline.
    FinalAfterDeadline {
        tardy: u128,
        due: u128,
    },
    Paid {
        received: u128,
    },
    Overpaid {
        excess: u128,
    },
    Underpaid {
        timely: u128,
        late: u128,
        due: u128,
    },
    PaidLate {
        late: u128,
        due: u128,
    },
    /// Expired with money that is not final yet: it is looked at once final.
    ExpiredWithPending {
        pending: u128,
    },
    ExpiredUnpaid,
    /// The row ids of the transfers of another asset.
    WrongAsset {
        transfers: Vec<i64>,
    },
    /// The row ids of the transfers that arrived on another network, at this
    /// address's twin (and of any of another asset beside them).
    WrongNetwork {
        transfers: Vec<i64>,
    },
    AfterSettlement {
        extra: u128,
        /// The part of `extra` made after the intent expired.
        late: u128,
    },
    /// Money made after the expiry, recorded before the on-time payment
    /// that settled: a late duplicate, never an excess.
    LateBesideSettlement {
        late: u128,
    },
    /// Money recorded after support closed the case.
    AfterDecision {
        extra: u128,
        foreign: Vec<i64>,
    },
    ReversedByReorg {
        final_now: u128,
        due: u128,
    },
    /// Support's settlement lost a payment it stood on.
    SupportBasisVanished,
    /// The money carrying an accepted excess beyond the price left the
    /// chain; the settlement stands, the excess's credit was taken back.
    ExcessReversedByReorg {
        excess: u128,
    },
    StillReversed {
        final_now: u128,
        due: u128,
    },
    ReferencePaidElsewhere {
        by: SettledBy,
        money_arrived: bool,
    },
    /// The refund's transaction, as the chain shows it, is not what was
    /// owed; in a sentence (see `refund_check`).
    RefundMismatch {
        why: String,
    },
}

impl Reason {
    /// A stable, customer-safe code for the reason: the storefront keys its
    /// own wording on it (`reason_code` in the views and the API). Codes are
    /// part of the contract: new ones may come, none changes meaning.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::ResolvedBySupport { .. } => "resolved_by_support",
            Reason::PaidByReassign { .. } => "paid_by_reassign",
            Reason::Awaiting { .. } => "awaiting_payment",
            Reason::PartlyReceived { .. } => "partly_received",
            Reason::PartlyUnconfirmed { .. } => "partly_unconfirmed",
            Reason::SeenInTime { .. } => "seen_in_time",
            Reason::SeenInTimePastDeadline { .. } => "confirm_deadline_passed",
            Reason::FinalAfterDeadline { .. } => "final_after_deadline",
            Reason::Paid { .. } => "paid",
            Reason::Overpaid { .. } => "overpaid",
            Reason::Underpaid { .. } => "underpaid",
            Reason::PaidLate { .. } => "paid_late",
            Reason::ExpiredWithPending { .. } => "expired_with_pending",
            Reason::ExpiredUnpaid => "expired_unpaid",
            Reason::WrongAsset { .. } => "wrong_asset",
            Reason::WrongNetwork { .. } => "wrong_network",
            Reason::AfterSettlement { .. } => "paid_after_settlement",
            Reason::LateBesideSettlement { .. } => "paid_late_beside_settlement",
            Reason::AfterDecision { .. } => "paid_after_decision",
            Reason::ReversedByReorg { .. } => "reversed_by_reorg",
            Reason::SupportBasisVanished => "support_basis_vanished",
            Reason::ExcessReversedByReorg { .. } => "excess_reversed_by_reorg",
            Reason::StillReversed { .. } => "still_reversed",
            Reason::ReferencePaidElsewhere { .. } => "reference_paid_elsewhere",
            Reason::RefundMismatch { .. } => "refund_mismatch",
        }
    }

    /// Every code [`Reason::code`] gives, for the documentation's test.
    pub const CODES: [&'static str; 25] = [
        "resolved_by_support",
        "paid_by_reassign",
        "awaiting_payment",
        "partly_received",
        "partly_unconfirmed",
        "seen_in_time",
        "confirm_deadline_passed",
        "final_after_deadline",
        "paid",
        "overpaid",
        "underpaid",
        "paid_late",
        "expired_with_pending",
        "expired_unpaid",
        "wrong_asset",
        "wrong_network",
        "paid_after_settlement",
        "paid_late_beside_settlement",
        "paid_after_decision",
        "reversed_by_reorg",
        "support_basis_vanished",
        "excess_reversed_by_reorg",
        "still_reversed",
        "reference_paid_elsewhere",
        "refund_mismatch",
    ];

    /// A sentence a support agent can act on; support's own notes stay in
    /// the audit log. `describe` names a transfer by row id, for the reasons
    /// that list them.
    pub fn render(&self, method: Method, describe: impl Fn(i64) -> Option<String>) -> String {
        let coin = |v: u128| {
            format!(
                "{} {}",
                Amount(v).to_decimal_string(method.decimals()),
                method.asset()
            )
        };
        let list = |transfers: &[i64]| -> String {
            transfers
                .iter()
                .map(|id| describe(*id).unwrap_or_else(|| format!("transfer {id}")))
                .collect::<Vec<_>>()
                .join("; ")
        };
        match self {
            Reason::ResolvedBySupport {
                action,
                counterpart,
                refunded,
            } => match (action, counterpart) {
                (Action::Accept, _) => "accepted by support".to_owned(),
                (Action::Dismiss, _) => "dismissed by support".to_owned(),
                (Action::RefundRequired | Action::RefundSent, _) if *refunded => {
                    "refunded by support".to_owned()
                }
                (Action::RefundRequired | Action::RefundSent, _) => {
                    "refund required by support".to_owned()
                }
                (Action::Reassign, Some(to)) => {
                    format!("transfer reassigned to intent {to} by support")
                }
                (Action::Reassign, None) => "transfer reassigned by support".to_owned(),
            },
            Reason::PaidByReassign { from: Some(from) } => {
                format!("paid by a transfer to intent {from}'s address, reassigned by support")
            }
            Reason::PaidByReassign { from: None } => {
                "paid by a transfer reassigned by support".to_owned()
            }
            Reason::Awaiting { due } => format!("awaiting {}", coin(*due)),
            Reason::PartlyReceived { received, due } => {
                format!("received {} of {}", coin(*received), coin(*due))
            }
            Reason::PartlyUnconfirmed { received, due } => {
                format!(
                    "received {} of {}, partly unconfirmed",
                    coin(*received),
                    coin(*due)
                )
            }
            Reason::SeenInTime { seen, final_part } => {
                format!(
                    "{} seen in time, {} of it final",
                    coin(*seen),
                    coin(*final_part)
                )
            }
            Reason::SeenInTimePastDeadline { seen, final_part } => format!(
                "{} seen in time, {} of it final; the confirm-by deadline passed, so it goes \
                 to review once final",
                coin(*seen),
                coin(*final_part)
            ),
            Reason::FinalAfterDeadline { tardy, due } => format!(
                "{} of {} was seen in time but became final only after the confirm-by deadline",
                coin(*tardy),
                coin(*due)
            ),
            Reason::Paid { received } => format!("paid {}", coin(*received)),
            Reason::Overpaid { excess } => format!("paid {} more than due", coin(*excess)),
            Reason::Underpaid { timely, late, due } => {
                let late = if *late > 0 {
                    format!(" and {} after expiry", coin(*late))
                } else {
                    String::new()
                };
                format!(
                    "expired with {} of {} received in time{late}",
                    coin(*timely),
                    coin(*due)
                )
            }
            Reason::PaidLate { late, due } => {
                format!(
                    "{} of {} arrived after the intent expired",
                    coin(*late),
                    coin(*due)
                )
            }
            Reason::ExpiredWithPending { pending } => format!(
                "expired; {} seen and not final yet, looked at again once final",
                coin(*pending)
            ),
            Reason::ExpiredUnpaid => "expired without payment".to_owned(),
            Reason::WrongAsset { transfers } => format!(
                "money other than {method} arrived at the address: {}",
                list(transfers)
            ),
            Reason::WrongNetwork { transfers } => format!(
                "money was sent on another network than {} to this address's twin there \
                 (same key, recoverable): {}",
                method.network(),
                list(transfers)
            ),
            Reason::AfterSettlement { extra, late } => {
                let lateness = match *late {
                    0 => String::new(),
                    l if l == *extra => ", all of it made after the intent expired".to_owned(),
                    l => format!(", {} of it made after the intent expired", coin(l)),
                };
                format!(
                    "another {} arrived after the intent was already paid{lateness}",
                    coin(*extra)
                )
            }
            Reason::LateBesideSettlement { late } => format!(
                "{} arrived after the intent expired, beside the on-time payment that paid it: \
                 a late duplicate to refund or dismiss, never credited at the intent's rate",
                coin(*late)
            ),
            Reason::AfterDecision { extra, foreign } => {
                let mut parts = Vec::new();
                if *extra > 0 {
                    parts.push(coin(*extra));
                }
                if !foreign.is_empty() {
                    parts.push(list(foreign));
                }
                format!(
                    "money arrived after support closed the case: {}",
                    parts.join("; ")
                )
            }
            Reason::ReversedByReorg { final_now, due } => format!(
                "a reorg removed final money after the intent was credited: final now {} of {}",
                coin(*final_now),
                coin(*due)
            ),
            Reason::SupportBasisVanished => "a reorg removed a payment support's decision \
                 stood on; the settlement is reversed"
                .to_owned(),
            Reason::ExcessReversedByReorg { excess } => format!(
                "a reorg removed the money that carried the accepted excess of {}; the \
                 order or top-up stays paid for its price, the excess's credit was taken back",
                coin(*excess)
            ),
            Reason::StillReversed { final_now, due } => format!(
                "the credited payment was reversed by a reorg; final now {} of {}",
                coin(*final_now),
                coin(*due)
            ),
            Reason::ReferencePaidElsewhere { by, money_arrived } => {
                let by = match by {
                    SettledBy::Intent(id) => format!("intent {id}"),
                    SettledBy::Balance => "the account's balance".to_owned(),
                };
                if *money_arrived {
                    format!(
                        "the reference was already paid by {by}; this payment must be refunded or reassigned"
                    )
                } else {
                    format!("the reference was already paid by {by}")
                }
            }
            Reason::RefundMismatch { why } => format!("the refund does not match: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CODES` (what the README, the OpenAPI document and the contract test
    /// read) lists exactly the codes `code` gives, one per variant.
    #[test]
    fn every_reason_s_code_is_listed_once_and_nothing_else_is() {
        let every = [
            Reason::ResolvedBySupport {
                action: Action::Accept,
                counterpart: None,
                refunded: false,
            },
            Reason::PaidByReassign { from: None },
            Reason::Awaiting { due: 1 },
            Reason::PartlyReceived {
                received: 0,
                due: 1,
            },
            Reason::PartlyUnconfirmed {
                received: 0,
                due: 1,
            },
            Reason::SeenInTime {
                seen: 1,
                final_part: 0,
            },
            Reason::SeenInTimePastDeadline {
                seen: 1,
                final_part: 0,
            },
            Reason::FinalAfterDeadline { tardy: 1, due: 1 },
            Reason::Paid { received: 1 },
            Reason::Overpaid { excess: 1 },
            Reason::Underpaid {
                timely: 0,
                late: 0,
                due: 1,
            },
            Reason::PaidLate { late: 1, due: 1 },
            Reason::ExpiredWithPending { pending: 1 },
            Reason::ExpiredUnpaid,
            Reason::WrongAsset {
                transfers: Vec::new(),
            },
            Reason::WrongNetwork {
                transfers: Vec::new(),
            },
            Reason::AfterSettlement { extra: 1, late: 1 },
            Reason::LateBesideSettlement { late: 1 },
            Reason::AfterDecision {
                extra: 1,
                foreign: Vec::new(),
            },
            Reason::ReversedByReorg {
                final_now: 0,
                due: 1,
            },
            Reason::SupportBasisVanished,
            Reason::ExcessReversedByReorg { excess: 1 },
            Reason::StillReversed {
                final_now: 0,
                due: 1,
            },
            Reason::ReferencePaidElsewhere {
                by: SettledBy::Balance,
                money_arrived: false,
            },
            Reason::RefundMismatch { why: String::new() },
        ];
        let codes: Vec<&str> = every.iter().map(Reason::code).collect();
        assert_eq!(codes, Reason::CODES);
    }
}

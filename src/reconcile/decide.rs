//! The status machine, as a pure function of an intent's facts. Reconcile
//! recomputes from scratch every time, so a reorg before finality simply
//! yields whatever the remaining transfers say.
//!
//! Read top to bottom, first match wins:
//!
//! | the intent…                                   | verdict                                              |
//! |-----------------------------------------------|------------------------------------------------------|
//! | settled, and what it stood on is gone         | `needs_review/reversed`; the credit is taken back    |
//! | settled, reversed, and its money is back      | credited again; then as below                        |
//! | settled, reversed, money still gone           | `needs_review/reversed`, or `resolved` if support closed it since |
//! | settled, new final money since (or since support last closed it) | `needs_review/duplicate` (or wrong asset/network) |
//! | settled, closed by support                    | `resolved` with support's outcome                    |
//! | settled by support                            | `resolved/paid_by_support`                           |
//! | settled                                       | `paid` (`overpaid`; wrong asset beside it: `needs_review`) |
//! | accepted by support, or a reassign's target, its reference free | settled by support: `resolved/paid_by_support` |
//! | closed by support, new final money since      | `needs_review`, never settled by itself              |
//! | closed by support                             | `resolved` with support's outcome                    |
//! | its reference paid elsewhere                  | `needs_review/duplicate` once money is final         |
//! | in time and final by the deadline, enough     | settles: `paid`                                      |
//! | other final money at the address              | `needs_review/wrong_asset` or `wrong_network`        |
//! | in time, enough, final only after the deadline| `needs_review/paid_late`                             |
//! | in time, enough, not all final                | `confirming`                                         |
//! | open                                          | `confirming` (part pending) or `awaiting_payment`    |
//! | expired, money in time not all final          | `expired`, looked at again once final                |
//! | expired, short money in time                  | `needs_review/underpaid`                             |
//! | expired, only late money, final               | `needs_review/paid_late`                             |
//! | expired                                       | `expired`                                            |
//!
//! Exceptions stand on final money only: money that may still vanish from
//! the mempool puts nothing in front of a person, who could not act on it.

use paywatch_core::Amount;

use super::facts::{Action, Closing, IntentFacts, SeenTransfer, SettlementFacts, Via};
use super::reason::Reason;
use super::time_policy;
use super::{Exception, Outcome, Status};

/// What the money path must do besides writing the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoneyMove {
    None,
    /// Settle the reference: mark the order paid or credit the top-up.
    Settle(Via),
    /// What the settlement stood on is gone: take the credit back.
    Reverse,
    /// A reversed settlement's money is back: credit it again.
    Recredit,
}

/// The status machine's answer for one intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: Status,
    pub exception: Option<Exception>,
    /// How support closed it, while it is `resolved` or settled by support.
    pub outcome: Option<Outcome>,
    pub reason: Reason,
    /// Final money of the intent's method at its address.
    pub amount_final: Amount,
    /// Not yet final money of the intent's method at its address.
    pub amount_pending: Amount,
    pub amount_excess: Amount,
    pub money: MoneyMove,
}

/// The intent's money, sorted by when it was made and whether it is final.
#[derive(Debug, Default)]
struct Tally {
    /// Made in time and final by the confirm-by deadline.
    timely_final: u128,
    /// Made in time but final only after the deadline.
    timely_tardy: u128,
    timely_pending: u128,
    late_final: u128,
    late_pending: u128,
    /// Final transfers of another asset or network, by row id.
    foreign_final: Vec<i64>,
}

impl Tally {
    fn of(f: &IntentFacts<'_>) -> Tally {
        let mut t = Tally::default();
        let network = f.method.network();
        for s in f.transfers.iter().filter(|s| s.live()) {
            let is_final = f.is_final(s);
            if s.network != network || s.asset != Some(f.method.asset()) {
                if is_final {
                    t.foreign_final.push(s.id);
                }
                continue;
            }
            let in_time = time_policy::made_in_time(
                network,
                time_policy::Sighting {
                    first_seen_ms: first_seen(s, f.transfers),
                    block_time_ms: s.block_time_ms,
                    next_block_time_ms: s.next_block_time_ms,
                },
                f.expires_at_ms,
            );
            let v = s.amount.0;
            match (in_time, is_final) {
                (true, true)
                    if time_policy::final_by_deadline(s.final_at_ms, f.now_ms, f.confirm_by_ms) =>
                {
                    t.timely_final += v
                }
                (true, true) => t.timely_tardy += v,
                (true, false) => t.timely_pending += v,
                (false, true) => t.late_final += v,
                (false, false) => t.late_pending += v,
            }
        }
        t
    }

    fn final_total(&self) -> u128 {
        self.timely_final + self.timely_tardy + self.late_final
    }

    fn pending_total(&self) -> u128 {
        self.timely_pending + self.late_pending
    }

    fn timely_seen(&self) -> u128 {
        self.timely_final + self.timely_tardy + self.timely_pending
    }
}

pub fn decide(f: &IntentFacts<'_>) -> Verdict {
    let tally = Tally::of(f);
    let (status, exception, outcome, reason, money) = verdict(f, &tally);
    let amount_final = tally.final_total();
    Verdict {
        status,
        exception,
        outcome,
        reason,
        amount_final: Amount(amount_final),
        amount_pending: Amount(tally.pending_total()),
        amount_excess: Amount(amount_final.saturating_sub(f.amount_due.0)),
        money,
    }
}

type Decision = (
    Status,
    Option<Exception>,
    Option<Outcome>,
    Reason,
    MoneyMove,
);

fn verdict(f: &IntentFacts<'_>, t: &Tally) -> Decision {
    use Exception as X;
    use Status as S;
    let due = f.amount_due.0;
    let least = f.tolerance.least_accepted(f.amount_due);

    if let Some(settlement) = &f.settlement {
        let holds = stands(f, settlement, t, least);
        let money = match (settlement.reversed_at_ms, holds) {
            (None, false) => {
                let reason = match settlement.via {
                    Via::Chain => Reason::ReversedByReorg {
                        final_now: t.timely_final + t.timely_tardy,
                        due,
                    },
                    Via::Support { .. } => Reason::SupportBasisVanished,
                };
                return (
                    S::NeedsReview,
                    Some(X::Reversed),
                    None,
                    reason,
                    MoneyMove::Reverse,
                );
            }
            (Some(reversed_at), false) => {
                return match f.closing.filter(|c| c.at_ms >= reversed_at) {
                    Some(c) => resolved(f, &c),
                    None => (
                        S::NeedsReview,
                        Some(X::Reversed),
                        None,
                        Reason::StillReversed {
                            final_now: t.timely_final + t.timely_tardy,
                            due,
                        },
                        MoneyMove::None,
                    ),
                };
            }
            (Some(_), true) => MoneyMove::Recredit,
            (None, true) => MoneyMove::None,
        };
        let since = f.closing.and_then(|c| c.through).max(settlement.through);
        let (extra, foreign) = new_final_money(f, since);
        if extra > 0 || !foreign.is_empty() {
            let (exception, reason) = if extra > 0 {
                (X::Duplicate, Reason::AfterSettlement { extra })
            } else {
                foreign_exception(f, foreign)
            };
            return (
                S::NeedsReview,
                Some(exception),
                outcome_of(f),
                reason,
                money,
            );
        }
        if let Some(c) = &f.closing {
            let (status, exception, outcome, reason, _) = resolved(f, c);
            return (status, exception, outcome, reason, money);
        }
        if let Via::Support { .. } = settlement.via {
            return (
                S::Resolved,
                None,
                Some(Outcome::PaidBySupport),
                Reason::PaidByReassign {
                    from: f.reassigned_in.map(|r| r.from),
                },
                money,
            );
        }
        return paid(f, t, money);
    }

    // Support's settlement, like the chain's, takes a reference nobody
    // settled; one settled meanwhile makes this money a duplicate below.
    let free = f.reference_settled_by.is_none();
    if let Some(r) = f.reassigned_in.filter(|_| free) {
        return (
            S::Resolved,
            None,
            Some(Outcome::PaidBySupport),
            Reason::PaidByReassign { from: Some(r.from) },
            MoneyMove::Settle(Via::Support {
                decision: Some(r.decision),
            }),
        );
    }

    // An accept whose reference another settled meanwhile settles nothing:
    // its money is a duplicate, below.
    let closing = f.closing.filter(|c| free || c.action != Action::Accept);
    if let Some(c) = &closing {
        if c.action == Action::Accept {
            return (
                S::Resolved,
                None,
                Some(Outcome::PaidBySupport),
                Reason::ResolvedBySupport {
                    action: Action::Accept,
                    counterpart: None,
                    refunded: false,
                },
                MoneyMove::Settle(Via::Support {
                    decision: Some(c.decision),
                }),
            );
        }
        let (extra, foreign) = new_final_money(f, c.through);
        if extra > 0 || !foreign.is_empty() {
            let exception = if extra > 0 {
                X::Duplicate
            } else {
                foreign_exception(f, foreign.clone()).0
            };
            return (
                S::NeedsReview,
                Some(exception),
                outcome_of(f),
                Reason::AfterDecision { extra, foreign },
                MoneyMove::None,
            );
        }
        return resolved(f, c);
    }

    let expired = f.now_ms > f.expires_at_ms;
    if let Some(by) = f.reference_settled_by {
        let money_arrived = t.final_total() > 0 || !t.foreign_final.is_empty();
        let reason = Reason::ReferencePaidElsewhere { by, money_arrived };
        return match (money_arrived, expired) {
            (true, _) => (
                S::NeedsReview,
                Some(X::Duplicate),
                None,
                reason,
                MoneyMove::None,
            ),
            (false, true) => (S::Expired, None, None, reason, MoneyMove::None),
            (false, false) => (S::AwaitingPayment, None, None, reason, MoneyMove::None),
        };
    }

    if t.timely_final >= least {
        return paid(f, t, MoneyMove::Settle(Via::Chain));
    }
    if !t.foreign_final.is_empty() {
        let (exception, reason) = foreign_exception(f, t.foreign_final.clone());
        return (
            S::NeedsReview,
            Some(exception),
            None,
            reason,
            MoneyMove::None,
        );
    }
    if t.timely_seen() >= least {
        return if t.timely_pending == 0 {
            (
                S::NeedsReview,
                Some(X::PaidLate),
                None,
                Reason::FinalAfterDeadline {
                    tardy: t.timely_tardy,
                    due,
                },
                MoneyMove::None,
            )
        } else if f.now_ms > f.confirm_by_ms {
            (
                S::Confirming,
                None,
                None,
                Reason::SeenInTimePastDeadline {
                    seen: t.timely_seen(),
                    final_part: t.timely_final + t.timely_tardy,
                },
                MoneyMove::None,
            )
        } else {
            (
                S::Confirming,
                None,
                None,
                Reason::SeenInTime {
                    seen: t.timely_seen(),
                    final_part: t.timely_final + t.timely_tardy,
                },
                MoneyMove::None,
            )
        };
    }
    if !expired {
        let received = t.timely_seen();
        return if t.timely_pending > 0 {
            (
                S::Confirming,
                None,
                None,
                Reason::PartlyUnconfirmed { received, due },
                MoneyMove::None,
            )
        } else if received > 0 {
            (
                S::AwaitingPayment,
                None,
                None,
                Reason::PartlyReceived { received, due },
                MoneyMove::None,
            )
        } else {
            (
                S::AwaitingPayment,
                None,
                None,
                Reason::Awaiting { due },
                MoneyMove::None,
            )
        };
    }
    if t.timely_pending > 0 {
        return (
            S::Expired,
            None,
            None,
            Reason::ExpiredWithPending {
                pending: t.pending_total(),
            },
            MoneyMove::None,
        );
    }
    if t.timely_final + t.timely_tardy > 0 {
        return (
            S::NeedsReview,
            Some(X::Underpaid),
            None,
            Reason::Underpaid {
                timely: t.timely_final + t.timely_tardy,
                late: t.late_final,
                due,
            },
            MoneyMove::None,
        );
    }
    if t.late_final > 0 {
        return (
            S::NeedsReview,
            Some(X::PaidLate),
            None,
            Reason::PaidLate {
                late: t.late_final,
                due,
            },
            MoneyMove::None,
        );
    }
    if t.late_pending > 0 {
        return (
            S::Expired,
            None,
            None,
            Reason::ExpiredWithPending {
                pending: t.late_pending,
            },
            MoneyMove::None,
        );
    }
    (
        S::Expired,
        None,
        None,
        Reason::ExpiredUnpaid,
        MoneyMove::None,
    )
}

/// Whether a settlement still stands on what it was made on.
fn stands(f: &IntentFacts<'_>, s: &SettlementFacts<'_>, t: &Tally, least: u128) -> bool {
    match s.via {
        // Timely money final at any time counts here: the deadline decided
        // whether it could settle, and it did; a re-mined block is final later.
        Via::Chain => t.timely_final + t.timely_tardy >= least,
        Via::Support { decision: None } => true,
        Via::Support { decision: Some(_) } => {
            let mut standing: Vec<&SeenTransfer<'_>> = Vec::new();
            for row in s.basis.iter().filter(|r| f.is_final(r)) {
                if !standing.iter().any(|o| o.same_payment(row)) {
                    standing.push(row);
                }
            }
            standing.len() >= s.basis_payments
        }
    }
}

/// Final money recorded after row `since`, not a re-sighting of a payment
/// known by then: the intent's own method's amount, and other money by row id.
fn new_final_money(f: &IntentFacts<'_>, since: Option<i64>) -> (u128, Vec<i64>) {
    let Some(since) = since else {
        return (0, Vec::new());
    };
    let (mut extra, mut foreign) = (0u128, Vec::new());
    for s in f
        .transfers
        .iter()
        .filter(|s| f.is_final(s) && recorded_after(s, since, f.transfers))
    {
        if s.network == f.method.network() && s.asset == Some(f.method.asset()) {
            extra += s.amount.0;
        } else {
            foreign.push(s.id);
        }
    }
    (extra, foreign)
}

fn paid(f: &IntentFacts<'_>, t: &Tally, money: MoneyMove) -> Decision {
    if !t.foreign_final.is_empty() {
        let (exception, reason) = foreign_exception(f, t.foreign_final.clone());
        return (Status::NeedsReview, Some(exception), None, reason, money);
    }
    let received = t.final_total();
    let excess = received.saturating_sub(f.amount_due.0);
    if excess > 0 {
        (
            Status::Paid,
            Some(Exception::Overpaid),
            None,
            Reason::Overpaid { excess },
            money,
        )
    } else {
        (Status::Paid, None, None, Reason::Paid { received }, money)
    }
}

fn resolved(f: &IntentFacts<'_>, c: &Closing) -> Decision {
    let outcome = match c.action {
        Action::Accept => Outcome::PaidBySupport,
        Action::Dismiss => Outcome::Dismissed,
        Action::Reassign => Outcome::Reassigned,
        Action::RefundRequired | Action::RefundSent if f.refunded => Outcome::Refunded,
        Action::RefundRequired | Action::RefundSent => Outcome::RefundRequired,
    };
    (
        Status::Resolved,
        None,
        Some(outcome),
        Reason::ResolvedBySupport {
            action: c.action,
            counterpart: c.counterpart,
            refunded: f.refunded,
        },
        MoneyMove::None,
    )
}

/// Support's outcome stays visible while new money reopens the case.
fn outcome_of(f: &IntentFacts<'_>) -> Option<Outcome> {
    f.closing
        .and_then(|c| resolved(f, &c).2)
        .or(match f.settlement {
            Some(SettlementFacts {
                via: Via::Support { .. },
                ..
            }) => Some(Outcome::PaidBySupport),
            _ => None,
        })
}

/// Money on the wrong network needs support to recover it with the key, so
/// it is named first when both kinds arrived.
fn foreign_exception(f: &IntentFacts<'_>, transfers: Vec<i64>) -> (Exception, Reason) {
    let network = f.method.network();
    let wrong_network = f
        .transfers
        .iter()
        .any(|s| transfers.contains(&s.id) && s.network != network);
    if wrong_network {
        (Exception::WrongNetwork, Reason::WrongNetwork { transfers })
    } else {
        (Exception::WrongAsset, Reason::WrongAsset { transfers })
    }
}

/// Whether this payment was first recorded after row `through`: a later
/// row that is not a re-sighting (after a reorg) of a payment known then.
/// Row order, unlike clocks, cannot be skewed by a miner or another machine.
fn recorded_after(t: &SeenTransfer<'_>, through: i64, all: &[SeenTransfer<'_>]) -> bool {
    t.id > through && (all.len() == 1 || !all.iter().any(|o| o.id <= through && o.same_payment(t)))
}

/// The earliest sighting of the payment, in any block (orphaned ones
/// included) or the mempool.
fn first_seen(t: &SeenTransfer<'_>, all: &[SeenTransfer<'_>]) -> i64 {
    if all.len() == 1 {
        return t.first_seen_ms;
    }
    all.iter()
        .filter(|o| o.same_payment(t))
        .map(|o| o.first_seen_ms)
        .min()
        .unwrap_or(t.first_seen_ms)
}

/// The digest for [`SeenTransfer::txid_digest`]: eight bytes at a time,
/// plenty to tell txids apart before comparing them.
pub fn txid_digest(txid: &str) -> u64 {
    let mut words = txid.as_bytes().chunks_exact(8);
    let mut h = txid.len() as u64;
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().expect("8 bytes")))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    for b in words.remainder() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h ^ (h >> 32)
}

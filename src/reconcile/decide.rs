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
//! | settled, reversed, money still gone           | `needs_review/reversed`, or `resolved` if support closed it since (new final money since: `needs_review`) |
//! | settled, new final money since (or since support last closed it) | `needs_review/duplicate` (or wrong asset/network) |
//! | settled, closed by support                    | `resolved` with support's outcome                    |
//! | settled by support                            | `resolved/paid_by_support`                           |
//! | settled, more than due beyond the tolerance (and worth a cent) | `needs_review/overpaid`, paid for its price |
//! | settled                                       | `paid` (`overpaid` within the tolerance or under a cent; wrong asset beside it: `needs_review`) |
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

/// What happens to an overpayment's excess support credited: it stands
/// on the money that carried the intent's payments beyond the price, apart
/// from the settlement, which stands on the price alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExcessMove {
    None,
    /// The money carrying it left the chain (or the settlement went): take
    /// the credit back.
    TakeBack,
    /// The money is back under a standing settlement: credit it again.
    Credit,
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
    pub excess: ExcessMove,
    /// Row ids of the intent's own money, final, made after its expiry:
    /// never what a settlement stands on, so support may refund it.
    pub late_rows: Vec<i64>,
    /// Row ids of dust under the settlement's floor: recorded and listed
    /// for an operator, no part of the intent's money.
    pub dust_rows: Vec<i64>,
    /// Row ids of the intent's own money made after its expiry, final or
    /// not: shown as late on the case.
    pub made_late: Vec<i64>,
    /// Row ids of the money a settlement by the chain stands on: made in
    /// time, final (or counted final once and still on the chain), not
    /// given away by support.
    pub standing_rows: Vec<i64>,
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
    /// Made in time and final now or counted final once (still on the
    /// chain): what a settlement by the chain stands on.
    timely_standing: u128,
    /// Row ids of `timely_standing`.
    standing_rows: Vec<i64>,
    /// Final transfers of another asset or network, by row id.
    foreign_final: Vec<i64>,
    /// Row ids of `late_final`.
    late_rows: Vec<i64>,
    /// Row ids of `late_final` and `late_pending`.
    made_late: Vec<i64>,
}

impl Tally {
    fn of(f: &IntentFacts<'_>) -> Tally {
        let mut t = Tally::default();
        let network = f.method.network();
        for s in f
            .transfers
            .iter()
            .filter(|s| s.live() && !s.is_spam() && !is_dust(f, s))
        {
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
            // Money support has owed back (a refunded duplicate) is not the
            // intent's to stand on, whichever of its payments stayed on the
            // chain (issue 36, found 6).
            let given_away = f.claimed_away.iter().any(|c| c.same_payment(s));
            if in_time && f.stands_final(s) && !given_away {
                t.timely_standing += v;
                t.standing_rows.push(s.id);
            }
            match (in_time, is_final) {
                (true, true)
                    if time_policy::final_by_deadline(s.final_at_ms, f.now_ms, f.confirm_by_ms) =>
                {
                    t.timely_final += v
                }
                (true, true) => t.timely_tardy += v,
                (true, false) => t.timely_pending += v,
                (false, true) => {
                    t.late_final += v;
                    t.late_rows.push(s.id);
                }
                (false, false) => t.late_pending += v,
            }
            if !in_time {
                t.made_late.push(s.id);
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
    let mut tally = Tally::of(f);
    let mut r = rule(f, &tally);
    // A refund the chain shows wrong is a case, whatever else stands: the
    // money and the settlement move as ruled, a person looks.
    if let Some(why) = f.refund_mismatch {
        if r.status != Status::NeedsReview {
            r.status = Status::NeedsReview;
            r.reason = Reason::RefundMismatch {
                why: why.to_owned(),
            };
            // Back in front of a person, a reversed settlement is still
            // shown as one: support's earlier decision had closed it, and
            // the storefront reads `reversed` from the exception.
            if r.exception.is_none() && f.settlement.is_some_and(|s| s.reversed_at_ms.is_some()) {
                r.exception = Some(Exception::Reversed);
            }
        }
    }
    let amount_final = tally.final_total();
    Verdict {
        status: r.status,
        exception: r.exception,
        outcome: r.outcome,
        reason: r.reason,
        amount_final: Amount(amount_final),
        amount_pending: Amount(tally.pending_total()),
        amount_excess: Amount(amount_final.saturating_sub(f.amount_due.0)),
        money: r.money,
        excess: r.excess,
        late_rows: std::mem::take(&mut tally.late_rows),
        made_late: std::mem::take(&mut tally.made_late),
        standing_rows: std::mem::take(&mut tally.standing_rows),
        dust_rows: f
            .transfers
            .iter()
            .filter(|s| s.live() && is_dust(f, s))
            .map(|s| s.id)
            .collect(),
    }
}

/// A row of the table: the status, and what goes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ruling {
    status: Status,
    exception: Option<Exception>,
    outcome: Option<Outcome>,
    reason: Reason,
    money: MoneyMove,
    excess: ExcessMove,
}

impl Ruling {
    fn new(status: Status, reason: Reason) -> Ruling {
        Ruling {
            status,
            exception: None,
            outcome: None,
            reason,
            money: MoneyMove::None,
            excess: ExcessMove::None,
        }
    }

    fn excess(mut self, excess: ExcessMove) -> Ruling {
        self.excess = excess;
        self
    }

    fn exception(mut self, exception: Exception) -> Ruling {
        self.exception = Some(exception);
        self
    }

    fn outcome(mut self, outcome: Option<Outcome>) -> Ruling {
        self.outcome = outcome;
        self
    }

    fn money(mut self, money: MoneyMove) -> Ruling {
        self.money = money;
        self
    }
}

fn rule(f: &IntentFacts<'_>, t: &Tally) -> Ruling {
    use Exception as X;
    use Status as S;
    // A settlement is judged by the terms it was made under: a tolerance
    // changed since changes only what has not settled yet.
    let terms;
    let f = match f.settlement.and_then(|s| s.tolerance) {
        Some(tolerance) => {
            terms = IntentFacts { tolerance, ..*f };
            &terms
        }
        None => f,
    };
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
                // The excess support credited goes with the money it was.
                let excess = match f.accepted_excess {
                    Some(x) if x.credited => ExcessMove::TakeBack,
                    _ => ExcessMove::None,
                };
                return Ruling::new(S::NeedsReview, reason)
                    .exception(X::Reversed)
                    .money(MoneyMove::Reverse)
                    .excess(excess);
            }
            (Some(reversed_at), false) => {
                // A decision counts as taken on the reversed intent only if
                // it is not one the reversed settlement stood on: the accept
                // of its excess, or the accept that made it. Recorded in the
                // same millisecond as the reversal, either would otherwise
                // settle the intent again on money that is gone.
                let stood_on_it = |c: &Closing| {
                    f.accepted_excess.is_some_and(|x| x.decision == c.decision)
                        || settlement.via
                            == (Via::Support {
                                decision: Some(c.decision),
                            })
                };
                return match f
                    .closing
                    .filter(|c| c.at_ms >= reversed_at && !stood_on_it(c))
                {
                    // Support accepted what arrived since, and nobody else
                    // paid the freed reference: settled again, on the
                    // payments the decision names.
                    Some(c) if c.action == Action::Accept && f.reference_settled_by.is_none() => {
                        resolved(f, &c).money(MoneyMove::Settle(Via::Support {
                            decision: Some(c.decision),
                        }))
                    }
                    Some(c) => closed(f, &c),
                    None => Ruling::new(
                        S::NeedsReview,
                        Reason::StillReversed {
                            final_now: t.timely_final + t.timely_tardy,
                            due,
                        },
                    )
                    .exception(X::Reversed),
                };
            }
            (Some(_), true) => MoneyMove::Recredit,
            (None, true) => MoneyMove::None,
        };
        // An accepted excess stands on the money beyond the price, not on
        // the settlement alone: when only the payment carrying it leaves the
        // chain, its credit is taken back and a person told; when that money
        // is back, it is credited again (issue 36, found 6).
        let mut excess_move = ExcessMove::None;
        if let (Via::Chain, Some(x)) = (settlement.via, f.accepted_excess) {
            let carried = t.timely_standing >= due.saturating_add(x.amount);
            let decided_last = f.closing.is_some_and(|c| c.decision == x.decision);
            match (money, x.credited, carried) {
                (MoneyMove::Recredit, false, true) | (MoneyMove::None, false, true) => {
                    excess_move = ExcessMove::Credit;
                }
                (MoneyMove::None, true, false) => {
                    return Ruling::new(
                        S::NeedsReview,
                        Reason::ExcessReversedByReorg { excess: x.amount },
                    )
                    .exception(X::Reversed)
                    .outcome(outcome_of(f))
                    .excess(ExcessMove::TakeBack);
                }
                (MoneyMove::None, false, false) if decided_last => {
                    return Ruling::new(
                        S::NeedsReview,
                        Reason::ExcessReversedByReorg { excess: x.amount },
                    )
                    .exception(X::Reversed)
                    .outcome(outcome_of(f));
                }
                _ => {}
            }
        }
        return standing(f, t, settlement, money).excess(excess_move);
    }

    // Support's settlement, like the chain's, takes a reference nobody
    // settled; one settled meanwhile makes this money a duplicate below.
    let free = f.reference_settled_by.is_none();
    if let Some(r) = f.reassigned_in.filter(|_| free) {
        return Ruling::new(S::Resolved, Reason::PaidByReassign { from: Some(r.from) })
            .outcome(Some(Outcome::PaidBySupport))
            .money(MoneyMove::Settle(Via::Support {
                decision: Some(r.decision),
            }));
    }

    // An accept whose reference another settled meanwhile settles nothing:
    // its money is a duplicate, below.
    let closing = f.closing.filter(|c| free || c.action != Action::Accept);
    if let Some(c) = &closing {
        if c.action == Action::Accept {
            return resolved(f, c).money(MoneyMove::Settle(Via::Support {
                decision: Some(c.decision),
            }));
        }
        return closed(f, c);
    }

    let expired = f.now_ms > f.expires_at_ms;
    if let Some(by) = f.reference_settled_by {
        let money_arrived = t.final_total() > 0 || !t.foreign_final.is_empty();
        let reason = Reason::ReferencePaidElsewhere { by, money_arrived };
        return match (money_arrived, expired) {
            (true, _) => Ruling::new(S::NeedsReview, reason).exception(X::Duplicate),
            (false, true) => Ruling::new(S::Expired, reason),
            (false, false) => Ruling::new(S::AwaitingPayment, reason),
        };
    }

    if t.timely_final >= least {
        return paid(f, t, MoneyMove::Settle(Via::Chain));
    }
    if !t.foreign_final.is_empty() {
        let (exception, reason) = foreign_exception(f, t.foreign_final.clone());
        return Ruling::new(S::NeedsReview, reason).exception(exception);
    }
    let seen = t.timely_seen();
    let final_part = t.timely_final + t.timely_tardy;
    if seen >= least {
        return if t.timely_pending == 0 {
            Ruling::new(
                S::NeedsReview,
                Reason::FinalAfterDeadline {
                    tardy: t.timely_tardy,
                    due,
                },
            )
            .exception(X::PaidLate)
        } else if f.now_ms > f.confirm_by_ms {
            Ruling::new(
                S::Confirming,
                Reason::SeenInTimePastDeadline { seen, final_part },
            )
        } else {
            Ruling::new(S::Confirming, Reason::SeenInTime { seen, final_part })
        };
    }
    if !expired {
        return if t.timely_pending > 0 {
            Ruling::new(
                S::Confirming,
                Reason::PartlyUnconfirmed {
                    received: seen,
                    due,
                },
            )
        } else if seen > 0 {
            Ruling::new(
                S::AwaitingPayment,
                Reason::PartlyReceived {
                    received: seen,
                    due,
                },
            )
        } else {
            Ruling::new(S::AwaitingPayment, Reason::Awaiting { due })
        };
    }
    if t.timely_pending > 0 {
        return Ruling::new(
            S::Expired,
            Reason::ExpiredWithPending {
                pending: t.pending_total(),
            },
        );
    }
    if final_part > 0 {
        return Ruling::new(
            S::NeedsReview,
            Reason::Underpaid {
                timely: final_part,
                late: t.late_final,
                due,
            },
        )
        .exception(X::Underpaid);
    }
    if t.late_final > 0 {
        return Ruling::new(
            S::NeedsReview,
            Reason::PaidLate {
                late: t.late_final,
                due,
            },
        )
        .exception(X::PaidLate);
    }
    if t.late_pending > 0 {
        return Ruling::new(
            S::Expired,
            Reason::ExpiredWithPending {
                pending: t.late_pending,
            },
        );
    }
    Ruling::new(S::Expired, Reason::ExpiredUnpaid)
}

/// The ruling on a settlement that stands (or comes back now): news after
/// it or after support's decision, support's resolution, or paid.
fn standing(
    f: &IntentFacts<'_>,
    t: &Tally,
    settlement: &SettlementFacts<'_>,
    money: MoneyMove,
) -> Ruling {
    use Exception as X;
    use Status as S;
    let since = f.closing.and_then(|c| c.through).max(settlement.through);
    // Support's settlements from before decisions were recorded named
    // no payments and kept no row id: what they covered is not known,
    // so only money after a later decision is news there.
    let legacy = settlement.via == (Via::Support { decision: None }) && since.is_none();
    let (extra, foreign) = if legacy {
        (0, Vec::new())
    } else {
        new_final_money(f, since)
    };
    if extra > 0 {
        let late = late_since(f, t, since);
        return Ruling::new(S::NeedsReview, Reason::AfterSettlement { extra, late })
            .exception(X::Duplicate)
            .outcome(outcome_of(f))
            .money(money);
    }
    if !foreign.is_empty() {
        let (exception, reason) = foreign_exception(f, foreign);
        return Ruling::new(S::NeedsReview, reason)
            .exception(exception)
            .outcome(outcome_of(f))
            .money(money);
    }
    if let Some(c) = &f.closing {
        return resolved(f, c).money(money);
    }
    if let Via::Support { .. } = settlement.via {
        return Ruling::new(
            S::Resolved,
            Reason::PaidByReassign {
                from: f.reassigned_in.map(|r| r.from),
            },
        )
        .outcome(Some(Outcome::PaidBySupport))
        .money(money);
    }
    paid(f, t, money)
}

/// Whether a settlement still stands on what it was made on.
fn stands(f: &IntentFacts<'_>, s: &SettlementFacts<'_>, t: &Tally, least: u128) -> bool {
    match s.via {
        // Timely money final at any time counts here: the deadline decided
        // whether it could settle, and it did; a re-mined block is final later.
        // Money counted final once stands though stricter finality came in
        // since: only a reorg takes a settlement back.
        Via::Chain => t.timely_standing >= least,
        Via::Support { decision: None } => true,
        Via::Support { decision: Some(_) } => {
            let mut standing: Vec<&SeenTransfer<'_>> = Vec::new();
            for row in s.basis.iter().filter(|r| f.stands_final(r)) {
                if !standing.iter().any(|o| o.same_payment(row)) {
                    standing.push(row);
                }
            }
            standing.len() >= s.basis_payments
        }
    }
}

/// Final money recorded after row `since`, not a re-sighting of a payment
/// known by then: the intent's own method's amount, and other money by row
/// id. `None` is a decision or settlement made when nothing had arrived:
/// every payment since is news.
fn new_final_money(f: &IntentFacts<'_>, since: Option<i64>) -> (u128, Vec<i64>) {
    let since = since.unwrap_or(i64::MIN);
    let (mut extra, mut foreign) = (0u128, Vec::new());
    for s in f.transfers.iter().filter(|s| {
        !s.is_spam() && !is_dust(f, s) && f.is_final(s) && recorded_after(s, since, f.transfers)
    }) {
        if s.network == f.method.network() && s.asset == Some(f.method.asset()) {
            extra += s.amount.0;
        } else {
            foreign.push(s.id);
        }
    }
    (extra, foreign)
}

fn paid(f: &IntentFacts<'_>, t: &Tally, money: MoneyMove) -> Ruling {
    if !t.foreign_final.is_empty() {
        let (exception, reason) = foreign_exception(f, t.foreign_final.clone());
        return Ruling::new(Status::NeedsReview, reason)
            .exception(exception)
            .money(money);
    }
    // Money sent after the expiry is never an excess of the payment that
    // settled: crediting it at the rate locked at creation would give the
    // payer an option on the price. It is a late duplicate for a person,
    // whichever order its rows were recorded in.
    if t.late_final > 0 {
        return Ruling::new(
            Status::NeedsReview,
            Reason::LateBesideSettlement { late: t.late_final },
        )
        .exception(Exception::Duplicate)
        .money(money);
    }
    let received = t.final_total();
    let excess = received.saturating_sub(f.amount_due.0);
    if excess > 0 {
        // The order is paid for its price either way; an excess beyond what
        // the tolerance forgives a short payer is the payer's money, and
        // support decides whether it is refunded or credited. Dust worth
        // less than a cent could be neither: it is only recorded.
        let status = if excess > f.tolerance.allowance(f.amount_due) && worth_a_cent(f, excess) {
            Status::NeedsReview
        } else {
            Status::Paid
        };
        Ruling::new(status, Reason::Overpaid { excess })
            .exception(Exception::Overpaid)
            .money(money)
    } else {
        Ruling::new(Status::Paid, Reason::Paid { received }).money(money)
    }
}

/// Whether `excess` is worth at least a cent at the rate the intent locked
/// (its price over its amount due).
fn worth_a_cent(f: &IntentFacts<'_>, excess: u128) -> bool {
    let cents = u128::try_from(f.usd_cents).unwrap_or(0);
    excess
        .checked_mul(cents)
        .is_none_or(|value| value >= f.amount_due.0)
}

/// A case support closed stays closed until final money arrives after the
/// decision: that is news for a person, never settled by itself, whatever
/// the case was (a reversed settlement's included).
fn closed(f: &IntentFacts<'_>, c: &Closing) -> Ruling {
    let (extra, foreign) = new_final_money(f, c.through);
    if extra == 0 && foreign.is_empty() {
        return resolved(f, c);
    }
    let exception = if extra > 0 {
        Exception::Duplicate
    } else {
        foreign_exception(f, foreign.clone()).0
    };
    Ruling::new(
        Status::NeedsReview,
        Reason::AfterDecision { extra, foreign },
    )
    .exception(exception)
    .outcome(outcome_of(f))
}

fn resolved(f: &IntentFacts<'_>, c: &Closing) -> Ruling {
    Ruling::new(
        Status::Resolved,
        Reason::ResolvedBySupport {
            action: c.action,
            counterpart: c.counterpart,
            refunded: f.refunded,
        },
    )
    .outcome(Some(outcome_of_action(f, c.action)))
}

fn outcome_of_action(f: &IntentFacts<'_>, action: Action) -> Outcome {
    match action {
        Action::Accept => Outcome::PaidBySupport,
        Action::Dismiss => Outcome::Dismissed,
        Action::Reassign => Outcome::Reassigned,
        Action::RefundRequired | Action::RefundSent if f.refunded => Outcome::Refunded,
        Action::RefundRequired | Action::RefundSent => Outcome::RefundRequired,
    }
}

/// Support's outcome stays visible while new money reopens the case.
fn outcome_of(f: &IntentFacts<'_>) -> Option<Outcome> {
    f.closing
        .map(|c| outcome_of_action(f, c.action))
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

/// Of the money [`new_final_money`] found since `since`, the part the tally
/// found made after the intent expired, so a person sees its lateness.
fn late_since(f: &IntentFacts<'_>, t: &Tally, since: Option<i64>) -> u128 {
    let since = since.unwrap_or(i64::MIN);
    f.transfers
        .iter()
        .filter(|s| t.late_rows.contains(&s.id) && recorded_after(s, since, f.transfers))
        .map(|s| s.amount.0)
        .sum()
}

/// Dust under the settlement's floor: the method's own asset, less than the
/// floor the settlement was made under, recorded after it settled (a
/// re-sighting of a payment known then is that payment, never dust).
/// Recorded and listed for an operator; it never moves the intent.
fn is_dust(f: &IntentFacts<'_>, t: &SeenTransfer<'_>) -> bool {
    let Some(settlement) = &f.settlement else {
        return false;
    };
    let (Some(floor), Some(through)) = (settlement.dust_floor, settlement.through) else {
        return false;
    };
    t.amount.0 < floor
        && t.network == f.method.network()
        && t.asset == Some(f.method.asset())
        && recorded_after(t, through, f.transfers)
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

#[cfg(test)]
mod tests {
    //! The table, row by row, on hand-made facts.
    use paywatch_core::{Asset, Method, Network};

    use super::*;
    use crate::reconcile::facts::SettledBy;
    use crate::reconcile::Tolerance;

    const EXPIRY: i64 = 1_000_000;
    const DUE: u128 = 100;

    fn row(id: i64, amount: u128, height: u64, first_seen_ms: i64) -> SeenTransfer<'static> {
        SeenTransfer {
            id,
            network: Network::Litecoin,
            asset: Some(Asset::Ltc),
            txid: ["tx-a", "tx-b", "tx-c", "tx-d"][(id as usize - 1) % 4],
            txid_digest: id as u64,
            index: 0,
            amount: Amount(amount),
            success: true,
            block_height: height,
            final_from: height,
            block_time_ms: first_seen_ms,
            next_block_time_ms: 0,
            first_seen_ms,
            final_at_ms: None,
            orphaned: false,
            unmined: false,
        }
    }

    fn facts<'a>(
        transfers: &'a [SeenTransfer<'a>],
        final_height: u64,
        now_ms: i64,
    ) -> IntentFacts<'a> {
        IntentFacts {
            id: 1,
            method: Method::new(Asset::Ltc, Network::Litecoin).unwrap(),
            amount_due: Amount(DUE),
            usd_cents: 10_000,
            expires_at_ms: EXPIRY,
            confirm_by_ms: EXPIRY + 1_000,
            status: Status::AwaitingPayment,
            settlement: None,
            closing: None,
            refunded: false,
            refund_mismatch: None,
            accepted_excess: None,
            reassigned_in: None,
            reference_settled_by: None,
            transfers,
            claimed_away: &[],
            final_height: Some(final_height),
            twin_final_height: None,
            now_ms,
            tolerance: Tolerance::NONE,
        }
    }

    fn accept(through: i64) -> Closing {
        Closing {
            decision: 7,
            action: Action::Accept,
            at_ms: EXPIRY + 500,
            through: Some(through),
            counterpart: None,
        }
    }

    /// Issue 21, found 8: an operator raised confirmations (`paywatch config
    /// apply`), so the final height fell below money already counted final.
    /// What settled on it stays settled; what had not settled waits for the
    /// new depth.
    #[test]
    fn stricter_finality_holds_back_unsettled_money_and_never_reverses_settled_money() {
        let mut t = [row(1, DUE, 10, EXPIRY - 10)];
        t[0].final_at_ms = Some(EXPIRY - 6);

        let mut settled = facts(&t, 8, EXPIRY - 5);
        settled.status = Status::Paid;
        settled.settlement = Some(chain_settlement(1));
        let v = decide(&settled);
        assert_eq!((v.status, v.money), (Status::Paid, MoneyMove::None));

        let v = decide(&facts(&t, 8, EXPIRY - 5));
        assert_eq!((v.status, v.money), (Status::Confirming, MoneyMove::None));

        // A reorg still takes it back: an orphaned row was never final.
        let mut gone = t;
        gone[0].orphaned = true;
        gone[0].final_at_ms = None;
        let mut settled = facts(&gone, 8, EXPIRY - 5);
        settled.status = Status::Paid;
        settled.settlement = Some(chain_settlement(1));
        assert_eq!(decide(&settled).money, MoneyMove::Reverse);
    }

    /// Issue 36: dust under the floor a settlement was made under, arriving
    /// after it, is recorded but never reopens the paid intent; money at the
    /// floor does; with no floor, any later money does.
    #[test]
    fn dust_under_the_settled_floor_never_reopens_a_paid_intent() {
        let t = [row(1, DUE, 10, EXPIRY - 10), row(2, 99, 12, EXPIRY + 900)];
        let mut f = facts(&t, 12, EXPIRY + 1_000);
        f.status = Status::Paid;
        f.settlement = Some(SettlementFacts {
            dust_floor: Some(100),
            ..chain_settlement(1)
        });
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception, v.money),
            (Status::Paid, None, MoneyMove::None)
        );
        assert_eq!(
            v.amount_final,
            Amount(DUE),
            "dust is no part of the payment"
        );

        let at_floor = [row(1, DUE, 10, EXPIRY - 10), row(2, 100, 12, EXPIRY + 900)];
        f.transfers = &at_floor;
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception),
            (Status::NeedsReview, Some(Exception::Duplicate))
        );

        f.transfers = &t;
        f.settlement = Some(chain_settlement(1));
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception),
            (Status::NeedsReview, Some(Exception::Duplicate))
        );
    }

    #[test]
    fn timely_money_final_by_the_deadline_settles() {
        let t = [row(1, DUE, 10, EXPIRY - 10)];
        let v = decide(&facts(&t, 10, EXPIRY - 5));
        assert_eq!(
            (v.status, v.money),
            (Status::Paid, MoneyMove::Settle(Via::Chain))
        );
    }

    fn chain_settlement(through: i64) -> SettlementFacts<'static> {
        SettlementFacts {
            via: Via::Chain,
            settled_at_ms: EXPIRY - 5,
            through: Some(through),
            reversed_at_ms: None,
            basis: &[],
            basis_payments: 0,
            tolerance: None,
            dust_floor: None,
        }
    }

    #[test]
    fn an_overpaid_order_is_paid_for_its_price_and_its_excess_goes_to_review() {
        let t = [row(1, DUE + 1, 10, EXPIRY - 10)];
        let v = decide(&facts(&t, 10, EXPIRY - 5));
        assert_eq!(
            (v.status, v.exception, v.money),
            (
                Status::NeedsReview,
                Some(Exception::Overpaid),
                MoneyMove::Settle(Via::Chain)
            )
        );
        assert_eq!(v.amount_excess, Amount(1));

        // Settled, looked at again: still a case, and nothing moves twice.
        let mut f = facts(&t, 11, EXPIRY + 5);
        f.settlement = Some(chain_settlement(1));
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception, v.money),
            (
                Status::NeedsReview,
                Some(Exception::Overpaid),
                MoneyMove::None
            )
        );

        // Support's decision on the excess closes the case; the settlement stays.
        for (action, outcome) in [
            (Action::Accept, Outcome::PaidBySupport),
            (Action::RefundRequired, Outcome::RefundRequired),
            (Action::Dismiss, Outcome::Dismissed),
        ] {
            f.closing = Some(Closing {
                action,
                ..accept(1)
            });
            let v = decide(&f);
            assert_eq!(
                (v.status, v.outcome, v.money),
                (Status::Resolved, Some(outcome), MoneyMove::None),
                "{action}"
            );
        }
    }

    #[test]
    fn an_excess_the_tolerance_forgives_a_short_payer_stays_paid_with_the_excess_recorded() {
        let t = [row(1, DUE + 5, 10, EXPIRY - 10)];
        let mut f = facts(&t, 10, EXPIRY - 5);
        f.tolerance = Tolerance {
            basis_points: 500,
            max: None,
        };
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception, v.amount_excess),
            (Status::Paid, Some(Exception::Overpaid), Amount(5))
        );
        let t = [row(1, DUE + 6, 10, EXPIRY - 10)];
        f.transfers = &t;
        assert_eq!(decide(&f).status, Status::NeedsReview);
    }

    #[test]
    fn an_excess_worth_less_than_a_cent_is_recorded_and_stays_paid() {
        // 100,000 base units for 100 USD: a cent is 10 of them.
        let t = [row(1, DUE * 1_000 + 9, 10, EXPIRY - 10)];
        let mut f = facts(&t, 10, EXPIRY - 5);
        f.amount_due = Amount(DUE * 1_000);
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception, v.amount_excess),
            (Status::Paid, Some(Exception::Overpaid), Amount(9))
        );
        let t = [row(1, DUE * 1_000 + 10, 10, EXPIRY - 10)];
        f.transfers = &t;
        assert_eq!(decide(&f).status, Status::NeedsReview);
    }

    #[test]
    fn nothing_received_never_pays_whatever_the_tolerance() {
        let mut f = facts(&[], 10, EXPIRY - 5);
        f.tolerance = Tolerance {
            basis_points: 1_000,
            max: Some(Amount(u128::MAX)),
        };
        let v = decide(&f);
        assert_eq!(
            (v.status, v.money),
            (Status::AwaitingPayment, MoneyMove::None)
        );
    }

    #[test]
    fn pending_money_raises_no_exception() {
        // Late and not final: expired, not paid_late yet.
        let t = [row(1, DUE, 11, EXPIRY + 10)];
        let v = decide(&facts(&t, 10, EXPIRY + 20));
        assert_eq!((v.status, v.exception), (Status::Expired, None));
        assert_eq!(v.amount_pending, Amount(DUE));
        // Final: now it is for a person.
        let v = decide(&facts(&t, 11, EXPIRY + 20));
        assert_eq!(
            (v.status, v.exception),
            (Status::NeedsReview, Some(Exception::PaidLate))
        );
    }

    #[test]
    fn money_final_after_the_deadline_goes_to_review() {
        let mut t = [row(1, DUE, 10, EXPIRY - 10)];
        t[0].final_at_ms = Some(EXPIRY + 2_000);
        let v = decide(&facts(&t, 10, EXPIRY + 3_000));
        assert_eq!(
            (v.status, v.exception, v.money),
            (
                Status::NeedsReview,
                Some(Exception::PaidLate),
                MoneyMove::None
            )
        );
    }

    #[test]
    fn an_accept_settles_by_support_and_the_next_look_keeps_it() {
        let t = [row(1, DUE, 10, EXPIRY + 10)];
        let mut f = facts(&t, 10, EXPIRY + 600);
        f.closing = Some(accept(1));
        let v = decide(&f);
        assert_eq!(
            v.money,
            MoneyMove::Settle(Via::Support { decision: Some(7) })
        );
        assert_eq!(
            (v.status, v.outcome),
            (Status::Resolved, Some(Outcome::PaidBySupport))
        );

        // Settled; looked at again (a declaration, more blocks): unchanged.
        f.settlement = Some(SettlementFacts {
            via: Via::Support { decision: Some(7) },
            settled_at_ms: EXPIRY + 600,
            through: Some(1),
            reversed_at_ms: None,
            basis: &t,
            basis_payments: 1,
            tolerance: None,
            dust_floor: None,
        });
        f.now_ms = EXPIRY + 9_000;
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception, v.money),
            (Status::Resolved, None, MoneyMove::None)
        );
    }

    #[test]
    fn support_settlement_reverses_only_when_its_payment_leaves_and_credits_again_when_back() {
        let mut gone = [row(1, DUE, 10, EXPIRY + 10)];
        gone[0].orphaned = true;
        let mut f = facts(&gone, 10, EXPIRY + 600);
        f.closing = Some(accept(1));
        f.settlement = Some(SettlementFacts {
            via: Via::Support { decision: Some(7) },
            settled_at_ms: EXPIRY + 600,
            through: Some(1),
            reversed_at_ms: None,
            basis: &gone,
            basis_payments: 1,
            tolerance: None,
            dust_floor: None,
        });
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception, v.money),
            (
                Status::NeedsReview,
                Some(Exception::Reversed),
                MoneyMove::Reverse
            )
        );

        // Mined again in another block, final: credited again.
        let back = [
            gone[0],
            SeenTransfer {
                id: 2,
                block_height: 11,
                final_from: 11,
                orphaned: false,
                ..gone[0]
            },
        ];
        f.transfers = &back;
        f.final_height = Some(11);
        f.settlement = Some(SettlementFacts {
            reversed_at_ms: Some(EXPIRY + 700),
            basis: &back,
            ..f.settlement.unwrap()
        });
        let v = decide(&f);
        assert_eq!((v.status, v.money), (Status::Resolved, MoneyMove::Recredit));
    }

    #[test]
    fn new_final_money_after_a_decision_reopens_the_case_keeping_the_outcome() {
        let t = [row(1, DUE, 10, EXPIRY + 10), row(2, 5, 11, EXPIRY + 900)];
        let mut f = facts(&t, 11, EXPIRY + 1_000);
        f.closing = Some(Closing {
            action: Action::Dismiss,
            ..accept(1)
        });
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception, v.outcome),
            (
                Status::NeedsReview,
                Some(Exception::Duplicate),
                Some(Outcome::Dismissed)
            )
        );
        assert_eq!(v.money, MoneyMove::None);
    }

    #[test]
    fn money_for_a_reference_paid_from_the_balance_is_a_duplicate_once_final() {
        let t = [row(1, DUE, 10, EXPIRY - 10)];
        let mut f = facts(&t, 9, EXPIRY - 5);
        f.reference_settled_by = Some(SettledBy::Balance);
        assert_eq!(decide(&f).status, Status::AwaitingPayment);
        f.final_height = Some(10);
        let v = decide(&f);
        assert_eq!(
            (v.status, v.exception, v.money),
            (
                Status::NeedsReview,
                Some(Exception::Duplicate),
                MoneyMove::None
            )
        );
    }
}

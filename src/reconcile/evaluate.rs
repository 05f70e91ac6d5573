//! The status machine, as a pure function of an intent and its transfers.
//! Reconcile recomputes from scratch every time, so a reorg before finality
//! simply yields whatever the remaining transfers say.

use paywatch_core::{Amount, Asset, Method, Network};

use super::{Exception, Status};

/// A transfer as reconcile sees it: plain data, copied next to its intent's
/// other transfers so the status machine reads memory in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenTransfer<'a> {
    /// The transfer's row id: rows are numbered in the order ingest recorded them.
    pub id: i64,
    pub network: Network,
    /// `None` for a token that is none of the payment methods.
    pub asset: Option<Asset>,
    pub txid: &'a str,
    /// A cheap digest of `txid`, so telling two payments apart rarely has
    /// to read the strings; equal digests are confirmed on the strings.
    pub txid_digest: u64,
    pub index: u32,
    pub amount: Amount,
    pub success: bool,
    pub block_height: u64,
    pub block_time_ms: i64,
    pub first_seen_ms: i64,
    pub orphaned: bool,
}

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct IntentFacts<'a> {
    pub id: i64,
    pub method: Method,
    pub amount_due: Amount,
    pub expires_at_ms: i64,
    pub status: Status,
    pub exception: Option<Exception>,
    /// Set once this intent settled its reference (order paid, top-up credited).
    pub settled_at_ms: Option<i64>,
    /// The highest transfer row id seen when the intent settled.
    pub settled_through: Option<i64>,
    pub reversed: bool,
    /// Another intent already settled the same reference.
    pub reference_settled_by: Option<i64>,
    pub transfers: &'a [SeenTransfer<'a>],
    /// The network's final height; `None` until the watcher reported one.
    pub final_height: Option<u64>,
    pub now_ms: i64,
    /// Shortfall still accepted as paid (config; zero by default).
    pub tolerance: Amount,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub status: Status,
    pub exception: Option<Exception>,
    pub reason: Reason,
    /// Final money of the intent's method at its address.
    pub amount_final: Amount,
    /// Not yet final money of the intent's method at its address.
    pub amount_pending: Amount,
    pub amount_excess: Amount,
    /// Settle now: mark the order paid or credit the top-up.
    pub settle: bool,
    /// The settled payment lost final money in a reorg: post a reversal.
    pub reverse: bool,
}

/// Why the status is what it is. Kept as figures and rendered only when
/// written, so the hot path formats nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    ResolvedBySupport,
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
    },
    ReversedByReorg {
        final_now: u128,
        due: u128,
    },
    StillReversed {
        final_now: u128,
        due: u128,
    },
    ReferencePaidElsewhere {
        by: i64,
        money_arrived: bool,
    },
}

impl Reason {
    /// A sentence a support agent can act on.
    /// `describe` names a transfer by row id, for the reasons that list them.
    pub fn render(&self, method: Method, describe: impl Fn(i64) -> Option<String>) -> String {
        let coin = |v: u128| {
            format!(
                "{} {}",
                Amount(v).to_decimal_string(method.decimals()),
                method.asset()
            )
        };
        match self {
            Reason::ResolvedBySupport => "resolved by support".to_owned(),
            Reason::Awaiting { due } => format!("awaiting {}", coin(*due)),
            Reason::PartlyReceived { received, due } => format!("received {} of {}", coin(*received), coin(*due)),
            Reason::PartlyUnconfirmed { received, due } => {
                format!("received {} of {}, partly unconfirmed", coin(*received), coin(*due))
            }
            Reason::SeenInTime { seen, final_part } => {
                format!("{} seen in time, {} of it final", coin(*seen), coin(*final_part))
            }
            Reason::Paid { received } => format!("paid {}", coin(*received)),
            Reason::Overpaid { excess } => format!("paid {} more than due", coin(*excess)),
            Reason::Underpaid { timely, late, due } => {
                let late = if *late > 0 { format!(" and {} after expiry", coin(*late)) } else { String::new() };
                format!("expired with {} of {} received in time{late}", coin(*timely), coin(*due))
            }
            Reason::PaidLate { late, due } => {
                format!("{} of {} arrived after the intent expired", coin(*late), coin(*due))
            }
            Reason::ExpiredUnpaid => "expired without payment".to_owned(),
            Reason::WrongAsset { transfers } => {
                let list: Vec<String> = transfers
                    .iter()
                    .map(|id| describe(*id).unwrap_or_else(|| format!("transfer {id}")))
                    .collect();
                format!("money other than {method} arrived at the address: {}", list.join("; "))
            }
            Reason::WrongNetwork { transfers } => {
                let list: Vec<String> = transfers
                    .iter()
                    .map(|id| describe(*id).unwrap_or_else(|| format!("transfer {id}")))
                    .collect();
                format!(
                    "money was sent on another network than {} to this address's twin there                      (same key, recoverable): {}",
                    method.network(),
                    list.join("; ")
                )
            }
            Reason::AfterSettlement { extra } => {
                format!("another {} arrived after the intent was already paid", coin(*extra))
            }
            Reason::ReversedByReorg { final_now, due } => format!(
                "a reorg removed final money after the intent was credited: final now {} of {}",
                coin(*final_now),
                coin(*due)
            ),
            Reason::StillReversed { final_now, due } => format!(
                "the credited payment was reversed by a reorg; final now {} of {}",
                coin(*final_now),
                coin(*due)
            ),
            Reason::ReferencePaidElsewhere { by, money_arrived: true } => format!(
                "the reference was already paid by intent {by}; this payment must be refunded or reassigned"
            ),
            Reason::ReferencePaidElsewhere { by, money_arrived: false } => {
                format!("the reference was already paid by intent {by}")
            }
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    timely_final: u128,
    timely_pending: u128,
    late_final: u128,
    late_pending: u128,
    after_settlement: u128,
}

impl Sums {
    fn timely(&self) -> u128 {
        self.timely_final + self.timely_pending
    }
    fn late(&self) -> u128 {
        self.late_final + self.late_pending
    }
}

pub fn evaluate(f: &IntentFacts<'_>) -> Evaluation {
    let mut sums = Sums::default();
    let mut foreign: Vec<&SeenTransfer<'_>> = Vec::new();
    for t in f.transfers.iter().filter(|t| !t.orphaned && t.success) {
        let ours = t.network == f.method.network() && t.asset == Some(f.method.asset());
        if !ours {
            foreign.push(t);
            continue;
        }
        let is_final = f.final_height.is_some_and(|h| t.block_height <= h);
        let at = received_at(t, f.transfers);
        let v = t.amount.0;
        match (at <= f.expires_at_ms, is_final) {
            (true, true) => sums.timely_final += v,
            (true, false) => sums.timely_pending += v,
            (false, true) => sums.late_final += v,
            (false, false) => sums.late_pending += v,
        }
        if f.settled_through
            .is_some_and(|through| recorded_after(t, through, f.transfers))
        {
            sums.after_settlement += v;
        }
    }

    let due = f.amount_due.0;
    let due_min = due.saturating_sub(f.tolerance.0);
    let amount_final = sums.timely_final + sums.late_final;
    let excess = amount_final.saturating_sub(due);
    let (status, exception, reason, settle, reverse) =
        decide(f, &sums, &foreign, due, due_min, excess);
    Evaluation {
        status,
        exception,
        reason,
        amount_final: Amount(amount_final),
        amount_pending: Amount(sums.timely_pending + sums.late_pending),
        amount_excess: Amount(excess),
        settle,
        reverse,
    }
}

type Decision = (Status, Option<Exception>, Reason, bool, bool);

fn decide(
    f: &IntentFacts<'_>,
    s: &Sums,
    foreign: &[&SeenTransfer<'_>],
    due: u128,
    due_min: u128,
    excess: u128,
) -> Decision {
    use Exception as X;
    use Status as S;
    // Money on the wrong network needs support to recover it with the key,
    // so it is named first when both kinds arrived.
    let foreign_exception = || -> (Exception, Reason) {
        let transfers = foreign.iter().map(|t| t.id).collect();
        if foreign.iter().any(|t| t.network != f.method.network()) {
            (X::WrongNetwork, Reason::WrongNetwork { transfers })
        } else {
            (X::WrongAsset, Reason::WrongAsset { transfers })
        }
    };
    let paid = |settle: bool| -> Decision {
        if !foreign.is_empty() {
            let (exception, reason) = foreign_exception();
            (S::NeedsReview, Some(exception), reason, settle, false)
        } else if excess > 0 {
            (
                S::Paid,
                Some(X::Overpaid),
                Reason::Overpaid { excess },
                settle,
                false,
            )
        } else {
            (
                S::Paid,
                None,
                Reason::Paid {
                    received: s.timely_final + s.late_final,
                },
                settle,
                false,
            )
        }
    };

    // A reorg that takes back money a credit stood on reopens the intent,
    // whoever closed it: a credit never stands silently on vanished money.
    // (When support can accept a short payment, compare with what it accepted.)
    if f.settled_at_ms.is_some() && !f.reversed && s.timely_final < due_min {
        return (
            S::NeedsReview,
            Some(X::Reversed),
            Reason::ReversedByReorg {
                final_now: s.timely_final,
                due,
            },
            false,
            true,
        );
    }

    // Support owns a resolved intent; the chain only updates its figures.
    if f.status == S::Resolved {
        return (
            S::Resolved,
            f.exception,
            Reason::ResolvedBySupport,
            false,
            false,
        );
    }

    if f.settled_at_ms.is_some() {
        return if f.reversed {
            (
                S::NeedsReview,
                Some(X::Reversed),
                Reason::StillReversed {
                    final_now: s.timely_final,
                    due,
                },
                false,
                false,
            )
        } else if s.after_settlement > 0 {
            (
                S::NeedsReview,
                Some(X::Duplicate),
                Reason::AfterSettlement {
                    extra: s.after_settlement,
                },
                false,
                false,
            )
        } else {
            paid(false)
        };
    }

    let money_arrived = s.timely() + s.late() > 0 || !foreign.is_empty();
    let expired = f.now_ms > f.expires_at_ms;
    if let Some(by) = f.reference_settled_by {
        let reason = Reason::ReferencePaidElsewhere { by, money_arrived };
        return match (money_arrived, expired) {
            (true, _) => (S::NeedsReview, Some(X::Duplicate), reason, false, false),
            (false, true) => (S::Expired, None, reason, false, false),
            (false, false) => (S::AwaitingPayment, None, reason, false, false),
        };
    }

    if s.timely_final >= due_min {
        paid(true)
    } else if !foreign.is_empty() {
        let (exception, reason) = foreign_exception();
        (S::NeedsReview, Some(exception), reason, false, false)
    } else if s.timely() >= due_min {
        (
            S::Confirming,
            None,
            Reason::SeenInTime {
                seen: s.timely(),
                final_part: s.timely_final,
            },
            false,
            false,
        )
    } else if !expired {
        if s.timely_pending > 0 {
            (
                S::Confirming,
                None,
                Reason::PartlyUnconfirmed {
                    received: s.timely(),
                    due,
                },
                false,
                false,
            )
        } else if s.timely_final > 0 {
            (
                S::AwaitingPayment,
                None,
                Reason::PartlyReceived {
                    received: s.timely_final,
                    due,
                },
                false,
                false,
            )
        } else {
            (
                S::AwaitingPayment,
                None,
                Reason::Awaiting { due },
                false,
                false,
            )
        }
    } else if s.timely() > 0 {
        (
            S::NeedsReview,
            Some(X::Underpaid),
            Reason::Underpaid {
                timely: s.timely(),
                late: s.late(),
                due,
            },
            false,
            false,
        )
    } else if s.late() > 0 {
        (
            S::NeedsReview,
            Some(X::PaidLate),
            Reason::PaidLate {
                late: s.late(),
                due,
            },
            false,
            false,
        )
    } else {
        (S::Expired, None, Reason::ExpiredUnpaid, false, false)
    }
}

/// Whether this payment was first recorded after the settlement: a later
/// row that is not a re-sighting (after a reorg) of a payment known then.
/// Row order, unlike clocks, cannot be skewed by a miner or another machine.
fn recorded_after(t: &SeenTransfer<'_>, through: i64, all: &[SeenTransfer<'_>]) -> bool {
    t.id > through && (all.len() == 1 || !all.iter().any(|o| o.id <= through && same_payment(o, t)))
}

/// The earlier of when the payment was first seen, in any block including
/// orphaned ones, and its block time: downtime or a reorg that re-mines a
/// payment does not make a timely payment late.
fn received_at(t: &SeenTransfer<'_>, all: &[SeenTransfer<'_>]) -> i64 {
    let first_seen = if all.len() == 1 {
        t.first_seen_ms
    } else {
        all.iter()
            .filter(|o| same_payment(o, t))
            .map(|o| o.first_seen_ms)
            .min()
            .unwrap_or(t.first_seen_ms)
    };
    first_seen.min(t.block_time_ms)
}

fn same_payment(a: &SeenTransfer<'_>, b: &SeenTransfer<'_>) -> bool {
    a.index == b.index
        && a.txid_digest == b.txid_digest
        && (std::ptr::eq(a.txid, b.txid) || a.txid == b.txid)
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

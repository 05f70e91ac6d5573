//! The one writer of status, settlements and the ledger: it reads a batch's
//! facts, asks the status machine, and writes what it says, with an outbox
//! row for every change, in the caller's transaction. Reconcile's passes,
//! support's decisions and payments from the balance all end here.

use std::collections::HashMap;

use paywatch_core::{Method, Network};

use super::decide::{decide, ExcessMove, MoneyMove, Verdict};
use super::events::{self, SettlementEvent};
use super::excess;
use super::facts::{
    AcceptedExcess, Action, Closing, IntentFacts, Reassigned, SeenTransfer, SettledBy,
    SettlementFacts, Via,
};
use super::refund_check::{self, RefundCheck};
use super::{Attributed, Matcher, PassReport, Tolerance};
use crate::store::{
    Facts, IntentRecord, LedgerPosting, NewSettlement, OutboxEvent, RefundCheckWrite, RefundRow,
    SettlementRow, Store, StoreError, Tx, VerdictWrite,
};
use crate::IntentKind;

/// The policies the status machine is given.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    pub tolerance: HashMap<Method, Tolerance>,
    /// Seconds after the expiry money seen in time may take to be final,
    /// for intents made before each kept its own deadline.
    pub confirm_windows: HashMap<Network, i64>,
    /// `reconcile.dust_floor`, in base units, per method.
    pub dust_floors: HashMap<Method, paywatch_core::Amount>,
    /// How long a refund's transaction may take to be seen paying its
    /// destination.
    pub refund_check_ms: i64,
}

impl Policy {
    fn confirm_by(&self, i: &IntentRecord) -> i64 {
        i.confirm_by_ms.unwrap_or_else(|| {
            let network = i.method.network();
            let window = self
                .confirm_windows
                .get(&network)
                .copied()
                .unwrap_or_else(|| super::time_policy::default_confirm_window_secs(network));
            i.expires_at_ms.saturating_add(window.saturating_mul(1000))
        })
    }
}

/// Decides and writes every intent of `facts`, in `tx`. Returns what it did,
/// and the outbox rows written (so the caller can add its own beside them).
pub(crate) async fn write(
    store: &Store,
    tx: &mut Tx,
    facts: &Facts,
    policy: &Policy,
    now: i64,
) -> Result<Written, StoreError> {
    let (attributed, basis, away) = read_rows(facts);
    let refunds = refund_checks(facts, now);
    let reading = Reading {
        facts,
        policy,
        attributed: &attributed,
        basis: &basis,
        away: &away,
        refunds: &refunds,
        now,
    };

    let mut verdicts: Vec<Verdict> = (0..facts.intents.len())
        .map(|p| decide(&reading.facts_of(p, None)))
        .collect();

    // A reversed settlement whose own money is back in this pass keeps its
    // reference: other money settling it in the same pass is a duplicate.
    let recredited_here: HashMap<(IntentKind, &str), i64> = verdicts
        .iter()
        .zip(&facts.intents)
        .filter(|(v, _)| v.money == MoneyMove::Recredit)
        .map(|(_, i)| ((i.kind, i.reference.as_str()), i.id))
        .collect();
    for (p, i) in facts.intents.iter().enumerate() {
        if let (MoneyMove::Settle(_), Some(holder)) = (
            verdicts[p].money,
            recredited_here.get(&(i.kind, i.reference.as_str())),
        ) {
            verdicts[p] = decide(&reading.facts_of(p, Some(Some(SettledBy::Intent(*holder)))));
        }
    }

    // Settle in bulk; an intent that finds its reference taken by another
    // is decided again as the duplicate it is. A reversed settlement frees
    // its reference for this (`Store::insert_settlements`).
    let settling: Vec<(usize, Via)> = verdicts
        .iter()
        .enumerate()
        .filter_map(|(p, v)| match v.money {
            MoneyMove::Settle(via) => Some((p, via)),
            _ => None,
        })
        .collect();
    let rows: Vec<NewSettlement<'_>> = settling
        .iter()
        .map(|(p, via)| {
            let i = &facts.intents[*p];
            let terms = reading.tolerance_of(i);
            NewSettlement {
                kind: i.kind.as_str(),
                reference: &i.reference,
                intent_id: Some(i.id),
                account: &i.account,
                usd_cents: i.usd_cents,
                via: via.as_str(),
                decision_id: match via {
                    Via::Support { decision } => *decision,
                    Via::Chain => None,
                },
                debit_key: None,
                tolerance_bp: Some(i64::from(terms.basis_points)),
                tolerance_max: terms.max.map(|m| m.0.to_string()),
                rate_usd: Some(&i.rate_usd),
                dust_floor: reading
                    .policy
                    .dust_floors
                    .get(&i.method)
                    .map(|floor| floor.0.to_string()),
            }
        })
        .collect();
    let made = store.insert_settlements(tx, &rows, now).await?;
    let mut holders: HashMap<(IntentKind, String), SettledBy> = HashMap::new();
    for (p, _) in &settling {
        let i = &facts.intents[*p];
        if made.contains_key(&Some(i.id)) {
            holders.insert((i.kind, i.reference.clone()), SettledBy::Intent(i.id));
        }
    }
    if made.len() < settling.len() {
        let lost: Vec<IntentRecord> = settling
            .iter()
            .map(|(p, _)| facts.intents[*p].clone())
            .filter(|i| !made.contains_key(&Some(i.id)))
            .collect();
        let taken = store.settlements_of(tx, &lost).await?;
        for (p, _) in &settling {
            let i = &facts.intents[*p];
            if made.contains_key(&Some(i.id)) {
                continue;
            }
            let by = taken
                .get(&(i.kind, i.reference.clone()))
                .map(|s| match s.intent_id {
                    Some(id) => SettledBy::Intent(id),
                    None => SettledBy::Balance,
                });
            verdicts[*p] = decide(&reading.facts_of(*p, Some(by)));
        }
    }

    let mut out = Written::default();
    let mut postings: Vec<(LedgerPosting<'_>, &IntentRecord)> = Vec::new();
    let (mut reversing, mut recrediting) = (Vec::new(), Vec::new());
    for (p, v) in verdicts.iter().enumerate() {
        let i = &facts.intents[p];
        let own = reading.own_settlement(p);
        match v.money {
            MoneyMove::Settle(via) if made.contains_key(&Some(i.id)) => {
                out.settled.push(i.id);
                out.events.push(events::settlement_of(
                    SettlementEvent::Settled,
                    i,
                    via.as_str(),
                ));
                if i.kind == IntentKind::Topup {
                    postings.push((credit(i, credit_key(i.id, made[&Some(i.id)])), i));
                }
            }
            MoneyMove::Reverse => {
                let credits = own.map_or(1, |s| s.credits);
                reversing.push(i.id);
                out.reversed.push(i.id);
                out.events.push(events::settlement_of(
                    SettlementEvent::Reversed,
                    i,
                    own.map_or("chain", |s| s.via.as_str()),
                ));
                if i.kind == IntentKind::Topup {
                    let key = if credits <= 1 {
                        format!("reversal:{}", i.id)
                    } else {
                        format!("reversal:{}:{credits}", i.id)
                    };
                    let mut posting = credit(i, key);
                    posting.usd_cents = -i.usd_cents;
                    posting.entry_kind = "reversal";
                    postings.push((posting, i));
                }
            }
            MoneyMove::Recredit => {
                let credits = own.map_or(1, |s| s.credits) + 1;
                recrediting.push(i.id);
                out.recredited.push(i.id);
                out.events.push(events::settlement_of(
                    SettlementEvent::Recredited,
                    i,
                    own.map_or("chain", |s| s.via.as_str()),
                ));
                if i.kind == IntentKind::Topup {
                    postings.push((credit(i, credit_key(i.id, credits)), i));
                }
            }
            _ => {}
        }
        // The excess support credited follows the money it was, apart from
        // the settlement: numbered by the credits posted so far, so each
        // entry's key is new and each is posted once.
        if v.excess != ExcessMove::None {
            let cents = own
                .and_then(|s| excess::accepted(i, s, &facts.decisions, names_payments(facts)))
                .and_then(|d| excess::cents_of(i, d.amount));
            let posted = facts.excess_ledger.get(&i.id).map_or(0, |l| l.credits);
            match (v.excess, cents) {
                (ExcessMove::TakeBack, Some(c)) => {
                    postings.push((excess::posting(i, -c, posted.max(1)), i));
                }
                (ExcessMove::Credit, Some(c)) => {
                    postings.push((excess::posting(i, c, posted + 1), i));
                }
                _ => {}
            }
        }
    }
    store.mark_settlements(tx, &reversing, true, now).await?;
    store.mark_settlements(tx, &recrediting, false, now).await?;
    let ledger: Vec<LedgerPosting<'_>> = postings.iter().map(|(p, _)| p.clone()).collect();
    store.post_ledger(tx, &ledger, now).await?;
    out.events.extend(
        postings
            .iter()
            .map(|(p, i)| events::ledger(p, Some((i.kind.as_str(), &i.reference)))),
    );

    let writes: Vec<VerdictWrite<'_>> = facts
        .intents
        .iter()
        .zip(&verdicts)
        .enumerate()
        .map(|(p, (i, v))| {
            let settled_now =
                matches!(v.money, MoneyMove::Settle(_)) && made.contains_key(&Some(i.id));
            VerdictWrite {
                intent: i,
                status: v.status,
                exception: v.exception,
                outcome: v.outcome,
                reason_code: v.reason.code(),
                reason: v.reason.render(i.method, |id| {
                    facts.transfers.iter().find(|t| t.id == id).map(|t| {
                        format!(
                            "{} base units of {} on {} in {}",
                            t.amount,
                            t.asset.code(),
                            t.network,
                            t.txid
                        )
                    })
                }),
                amount_final: v.amount_final,
                amount_pending: v.amount_pending,
                amount_excess: v.amount_excess,
                paid_at_ms: if settled_now { Some(now) } else { i.paid_at_ms },
                settled_through: if settled_now {
                    attributed.of(p).iter().map(|t| t.id).max()
                } else {
                    i.settled_through
                },
                // Settled again after a reversal (the freed reference paid
                // by this intent's other money): no longer reversed.
                reversed_at_ms: match v.money {
                    MoneyMove::Reverse => Some(now),
                    MoneyMove::Recredit => None,
                    _ if settled_now => None,
                    _ => i.reversed_at_ms,
                },
            }
        })
        .collect();
    store.write_verdicts(tx, &writes, now).await?;
    store
        .name_settlement_payments(
            tx,
            &super::settlement_names::to_write(facts, &verdicts, &made),
        )
        .await?;
    let checked: Vec<(&RefundRow, &RefundCheck)> = refunds
        .iter()
        .filter_map(|(id, c)| Some((facts.refunds.get(id)?, c)))
        .filter(|(r, c)| c.to_write(r, now))
        .collect();
    store
        .write_refund_checks(
            tx,
            &checked
                .iter()
                .map(|(r, c)| RefundCheckWrite {
                    intent_id: r.intent_id,
                    network: r.network,
                    destination: &r.destination,
                    state: c.state,
                    mismatch: c.mismatch.as_deref(),
                })
                .collect::<Vec<_>>(),
            now,
        )
        .await?;
    let refund_events: Vec<OutboxEvent> = checked
        .iter()
        .filter(|(r, c)| c.state != r.state || c.mismatch != r.mismatch)
        .filter_map(|(r, c)| {
            let i = facts.intents.iter().find(|i| i.id == r.intent_id)?;
            Some(events::refund_checked(i, r, c))
        })
        .collect();
    let dust: Vec<(i64, i64)> = facts
        .intents
        .iter()
        .zip(&verdicts)
        .flat_map(|(i, v)| v.dust_rows.iter().map(move |t| (*t, i.id)))
        .collect();
    store.mark_dust(tx, &dust).await?;
    let changed: Vec<OutboxEvent> = writes
        .iter()
        .filter(|w| w.changed())
        .map(events::status_changed)
        .collect();
    out.changed = changed.len();
    // Status first: a reader of the feed sees the intent paid, then the
    // settlement and ledger entries that go with it.
    let mut ordered = changed;
    ordered.extend(refund_events);
    ordered.append(&mut out.events);
    out.events = ordered;
    Ok(out)
}

/// The status machine's verdict on each intent of `facts`, as things stand
/// (nothing written): what support's actions check themselves against.
pub(crate) fn verdicts(facts: &Facts, policy: &Policy, now: i64) -> Vec<(i64, Verdict)> {
    let (attributed, basis, away) = read_rows(facts);
    let refunds = refund_checks(facts, now);
    let reading = Reading {
        facts,
        policy,
        attributed: &attributed,
        basis: &basis,
        away: &away,
        refunds: &refunds,
        now,
    };
    (0..facts.intents.len())
        .map(|p| (facts.intents[p].id, decide(&reading.facts_of(p, None))))
        .collect()
}

/// The batch's transfers attributed to its intents, the rows of the
/// payments each support decision named, and by intent those its decisions
/// gave away, as the status machine reads them.
fn read_rows(facts: &Facts) -> (Attributed<'_>, Rows<'_>, Rows<'_>) {
    let matcher = Matcher::new(
        facts
            .intents
            .iter()
            .map(|i| (i.method.network(), i.address.as_str())),
    );
    let attributed = Attributed::rows(&matcher, &facts.transfers, facts.intents.len());
    let basis: Rows<'_> = facts
        .basis
        .iter()
        .map(|(d, b)| (*d, b.rows.iter().map(|r| r.seen()).collect()))
        .collect();
    let away = claimed_away(facts, &basis);
    (attributed, basis, away)
}

/// By intent, what the chain says of the refund support required on it:
/// what the refund owes, read from the payments its `refund_required`
/// claimed (or the excess it carries), against the rows of its transaction.
fn refund_checks(facts: &Facts, now: i64) -> HashMap<i64, RefundCheck> {
    let mut out = HashMap::new();
    for (id, r) in &facts.refunds {
        let Some(i) = facts.intents.iter().find(|i| i.id == *id) else {
            continue;
        };
        let Some(d) = facts
            .decisions
            .iter()
            .rfind(|d| d.intent_id == *id && d.action == Action::RefundRequired)
        else {
            continue;
        };
        let claimed = facts
            .basis
            .get(&d.id)
            .map_or(&[][..], |b| b.rows.as_slice());
        let owed = refund_check::owed(claimed, d.amount, i.method);
        let rows: Vec<&crate::store::TransferRecord> = facts
            .refund_rows
            .iter()
            .filter(|t| r.txids.contains(&t.txid))
            .collect();
        let final_height = facts.final_heights.get(&r.network).copied();
        out.insert(*id, refund_check::check(r, &owed, &rows, final_height, now));
    }
    out
}

/// Whether decision `id` names payments it stands on or claims.
fn names_payments(facts: &Facts) -> impl Fn(i64) -> bool + '_ {
    |id| facts.basis.get(&id).is_some_and(|b| b.payments > 0)
}

/// Rows of payments, by decision or by intent.
type Rows<'a> = HashMap<i64, Vec<SeenTransfer<'a>>>;

/// By intent, the rows of the payments support's decisions on it gave
/// away: required for refund, or reassigned to another intent.
fn claimed_away<'a>(facts: &Facts, basis: &Rows<'a>) -> Rows<'a> {
    let mut away: HashMap<i64, Vec<SeenTransfer<'a>>> = HashMap::new();
    for d in facts
        .decisions
        .iter()
        .filter(|d| matches!(d.action, Action::RefundRequired | Action::Reassign))
    {
        if let Some(rows) = basis.get(&d.id) {
            away.entry(d.intent_id)
                .or_default()
                .extend(rows.iter().copied());
        }
    }
    away
}

/// A top-up's credit, as first posted.
/// The ledger key of an intent's `n`-th credit: `topup:<id>`, then
/// `topup:<id>:<n>` for each credit after a reversal.
fn credit_key(intent_id: i64, n: i64) -> String {
    if n <= 1 {
        format!("topup:{intent_id}")
    } else {
        format!("topup:{intent_id}:{n}")
    }
}

fn credit(i: &IntentRecord, key: String) -> LedgerPosting<'_> {
    LedgerPosting {
        account: &i.account,
        usd_cents: i.usd_cents,
        entry_kind: "topup_credit",
        entry_key: key,
        intent_id: Some(i.id),
        memo: format!("{} {}", i.kind.as_str(), i.reference),
        returns_entry: None,
    }
}

/// What one write did.
#[derive(Debug, Default)]
pub(crate) struct Written {
    pub changed: usize,
    pub settled: Vec<i64>,
    pub reversed: Vec<i64>,
    pub recredited: Vec<i64>,
    /// The outbox rows to write, in order.
    pub events: Vec<OutboxEvent>,
}

impl Written {
    pub(crate) fn report(&self, examined: usize, claimed: usize) -> PassReport {
        PassReport {
            examined,
            changed: self.changed,
            settled: self.settled.len(),
            reversed: self.reversed.len(),
            claimed,
        }
    }
}

/// The batch's facts, read per intent for the status machine.
struct Reading<'a> {
    facts: &'a Facts,
    policy: &'a Policy,
    attributed: &'a Attributed<'a>,
    basis: &'a Rows<'a>,
    away: &'a Rows<'a>,
    /// By intent, what the chain says of its refund.
    refunds: &'a HashMap<i64, RefundCheck>,
    now: i64,
}

impl<'a> Reading<'a> {
    fn own_settlement(&self, p: usize) -> Option<&'a SettlementRow> {
        let i = &self.facts.intents[p];
        self.facts
            .settlements
            .get(&(i.kind, i.reference.clone()))
            .filter(|s| s.intent_id == Some(i.id))
    }

    /// `holder` overrides who settled the reference, after a lost race.
    fn facts_of(&self, p: usize, holder: Option<Option<SettledBy>>) -> IntentFacts<'a> {
        let i = &self.facts.intents[p];
        let settlement = self.own_settlement(p).map(|s| {
            let via = match s.via.as_str() {
                "support" => Via::Support {
                    decision: s.decision_id,
                },
                _ => Via::Chain,
            };
            let basis = s
                .decision_id
                .and_then(|d| self.basis.get(&d))
                .map_or(&[][..], |b| b.as_slice());
            SettlementFacts {
                via,
                settled_at_ms: s.settled_at_ms,
                through: i.settled_through,
                reversed_at_ms: s.reversed_at_ms,
                basis,
                basis_payments: s
                    .decision_id
                    .and_then(|d| self.facts.basis.get(&d))
                    .map_or(0, |b| b.payments),
                tolerance: settled_tolerance(s),
                dust_floor: s.dust_floor.as_deref().and_then(|f| f.parse().ok()),
            }
        });
        let on_this = || self.facts.decisions.iter().filter(|d| d.intent_id == i.id);
        let closing = on_this()
            .rfind(|d| d.action != Action::RefundSent)
            .map(|d| Closing {
                decision: d.id,
                action: d.action,
                at_ms: d.at_ms,
                through: d.through,
                counterpart: d.to_intent,
            });
        let refunded = on_this().any(|d| d.action == Action::RefundSent);
        let accepted_excess = self
            .own_settlement(p)
            .and_then(|s| excess::accepted(i, s, &self.facts.decisions, names_payments(self.facts)))
            .map(|d| AcceptedExcess {
                decision: d.id,
                amount: d.amount,
                credited: self
                    .facts
                    .excess_ledger
                    .get(&i.id)
                    .is_some_and(|l| l.net_cents > 0),
            });
        let reassigned_in = self
            .facts
            .decisions
            .iter()
            .rfind(|d| d.action == Action::Reassign && d.to_intent == Some(i.id))
            .map(|d| Reassigned {
                decision: d.id,
                from: d.intent_id,
            });
        let reference_settled_by = match holder {
            Some(by) => by,
            None => self
                .facts
                .settled_by(i.kind, &i.reference)
                .filter(|by| *by != SettledBy::Intent(i.id)),
        };
        IntentFacts {
            id: i.id,
            method: i.method,
            amount_due: i.amount_due,
            usd_cents: i.usd_cents,
            expires_at_ms: i.expires_at_ms,
            confirm_by_ms: self.policy.confirm_by(i),
            status: i.status,
            settlement,
            closing,
            refunded,
            refund_mismatch: self.refunds.get(&i.id).and_then(|c| c.mismatch.as_deref()),
            accepted_excess,
            reassigned_in,
            reference_settled_by,
            transfers: self.attributed.of(p),
            claimed_away: self.away.get(&i.id).map_or(&[][..], Vec::as_slice),
            final_height: self.facts.final_heights.get(&i.method.network()).copied(),
            twin_final_height: crate::twin::twin_network(i.method.network())
                .and_then(|n| self.facts.final_heights.get(&n).copied()),
            now_ms: self.now,
            tolerance: self.tolerance_of(i),
        }
    }

    /// The tolerance in force for `i`'s method now.
    fn tolerance_of(&self, i: &IntentRecord) -> Tolerance {
        self.policy
            .tolerance
            .get(&i.method)
            .copied()
            .unwrap_or_default()
    }
}

/// The tolerance a settlement was made under, as stored. A stored value
/// that does not read is a corrupt row: judged by the setting in force, as
/// settlements made before terms were kept are, rather than by none.
fn settled_tolerance(s: &SettlementRow) -> Option<Tolerance> {
    let basis_points = u32::try_from(s.tolerance_bp?).ok()?;
    let max = match &s.tolerance_max {
        None => None,
        Some(m) => Some(paywatch_core::Amount(m.parse().ok()?)),
    };
    Some(Tolerance { basis_points, max })
}

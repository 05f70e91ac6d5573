//! Support's actions on a case. Each is recorded as a decision (who, what,
//! on which payments, how much) that the status machine reads like any
//! other input, and the writer turns it into status, settlement and ledger
//! in the same transaction, with its audit entry and outbox rows. So the
//! next reconcile reads the same decision and comes to the same verdict:
//! nothing later undoes it but the money it stood on vanishing.
//!
//! What each action needs:
//!
//! | action            | needs                                                          |
//! |-------------------|----------------------------------------------------------------|
//! | `accept`          | the intent unsettled, its reference too; final money at its address, none pending. On an overpaid case (settled, excess beyond the tolerance): credits the excess's worth at the locked rate to the account |
//! | `reassign`        | the source unsettled, its final money not yet claimed, none pending; the target and its reference unsettled |
//! | `refund_required` | a destination; final money to refund (or an overpaid case's excess), none pending; no refund yet |
//! | `refund_sent`     | a refund required and not yet sent                             |
//! | `dismiss`         | the intent not plainly paid; no money pending                  |
//!
//! A payment is claimed by at most one `accept`, `reassign` or
//! `refund_required` (a unique index): it settles or is refunded once. A
//! decision on an overpayment's excess claims nothing (the payment settled
//! the intent) and carries the excess as its amount; the case is open once,
//! and its credit's ledger key is the intent's, so it is decided once.

use paywatch_core::Network;

use super::events;
use super::facts::Action;
use super::{Exception, Outcome, Reconciler, Status};
use crate::store::{
    DecisionPayment, Facts, IntentRecord, NewAudit, NewDecision, PaymentKey, StoreError,
    TransferRecord,
};

/// One action as support asked for it.
#[derive(Debug, Clone)]
pub struct CaseAction<'a> {
    pub intent_id: i64,
    pub action: Action,
    pub role: &'a str,
    pub actor: &'a str,
    /// The configured name of the token that asked: the actor is what the
    /// caller says it is, the token is who it provably was.
    pub token_name: &'a str,
    pub note: &'a str,
    pub key: &'a str,
    pub destination: Option<&'a str>,
    pub txid: Option<&'a str>,
    pub to_intent: Option<i64>,
}

impl CaseAction<'_> {
    /// What the audit log keeps beside the action: also what a replay under
    /// the same key must repeat.
    fn detail(&self) -> Option<String> {
        match self.action {
            Action::RefundRequired => self.destination.map(|d| format!("destination {d}")),
            Action::RefundSent => self.txid.map(|t| format!("txid {t}")),
            Action::Reassign => self.to_intent.map(|t| format!("to intent {t}")),
            Action::Accept | Action::Dismiss => None,
        }
    }
}

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionOutcome {
    Done {
        audit_id: i64,
    },
    /// This key's action was done before; nothing was done again.
    Replayed {
        audit_id: i64,
    },
    /// This key was used for another action, case or content.
    KeyConflict,
    NotFound(String),
    /// Not possible in the case's state; nothing was changed.
    Refused(String),
    /// The money the action would stand on is not final yet; nothing was
    /// changed. Try again once it is.
    NotFinal(String),
}

/// Why an action cannot be done now.
enum Refusal {
    Conflict(String),
    NotFinal(String),
}

impl Reconciler {
    /// Performs `a` once per idempotency key, in one transaction with its
    /// audit entry, decision, verdict and outbox rows.
    pub async fn act(&self, a: &CaseAction<'_>) -> Result<ActionOutcome, StoreError> {
        self.retrying(|| self.act_once(a)).await
    }

    async fn act_once(&self, a: &CaseAction<'_>) -> Result<ActionOutcome, StoreError> {
        let now = self.clock.now_ms();
        let store = &self.store;
        let mut tx = store.begin_snapshot().await?;
        let detail = a.detail();
        if let Some(earlier) = store.audit_by_key(&mut tx, a.key).await? {
            // A replay is the same request in every field a person typed:
            // a corrected destination or note under the same key is another
            // request, and answering it as done would drop the correction.
            let same = earlier.intent_id == a.intent_id
                && earlier.action == a.action.as_str()
                && earlier.detail == detail
                && earlier.role == a.role
                && earlier.actor == a.actor
                && earlier.note == a.note;
            return Ok(if same {
                ActionOutcome::Replayed {
                    audit_id: earlier.audit_id,
                }
            } else {
                ActionOutcome::KeyConflict
            });
        }
        let mut ids = vec![a.intent_id];
        ids.extend(a.to_intent.filter(|t| *t != a.intent_id));
        let intents = store.lock_intents(&mut tx, &ids).await?;
        let Some(intent) = intents.iter().find(|i| i.id == a.intent_id).cloned() else {
            return Ok(ActionOutcome::NotFound(format!(
                "no intent {}",
                a.intent_id
            )));
        };
        let facts = store.load_facts(&mut tx, intents.clone()).await?;
        let plan = match self.plan(&mut tx, a, &intent, &facts, now).await? {
            Ok(plan) => plan,
            Err(Refusal::Conflict(why)) => return Ok(ActionOutcome::Refused(why)),
            Err(Refusal::NotFinal(why)) => return Ok(ActionOutcome::NotFinal(why)),
        };

        match a.action {
            Action::RefundRequired => {
                let dest = a.destination.unwrap_or_default();
                let network = refund_network(&intent);
                if !store
                    .require_refund(&mut tx, intent.id, network, dest, now)
                    .await?
                {
                    return Ok(ActionOutcome::Refused(format!(
                        "intent {} already has a refund recorded",
                        intent.id
                    )));
                }
            }
            Action::RefundSent => {
                let txid = a.txid.unwrap_or_default();
                // One transaction stands for one refund: judged alone, a
                // transaction recorded on two refunds would read both
                // refunded while paying one.
                if let Some(other) = store
                    .refund_with_txid(&mut tx, refund_network(&intent), txid, intent.id)
                    .await?
                {
                    return Ok(ActionOutcome::Refused(format!(
                        "transaction {txid} is already recorded for the refund of intent {other}: \
                         each refund needs a transaction of its own"
                    )));
                }
                let check_by = now.saturating_add(self.policy.refund_check_ms);
                if !store
                    .refund_sent(
                        &mut tx,
                        intent.id,
                        refund_network(&intent),
                        txid,
                        now,
                        check_by,
                    )
                    .await?
                {
                    return Ok(ActionOutcome::Refused(format!(
                        "intent {} has no refund awaiting a transaction (record refund_required \
                         first; a refund the chain shows refunded takes no more)",
                        intent.id
                    )));
                }
            }
            _ => {}
        }
        let audit_id = store
            .insert_audit(
                &mut tx,
                &NewAudit {
                    role: a.role,
                    actor: a.actor,
                    token_name: a.token_name,
                    action: a.action.as_str(),
                    intent_id: intent.id,
                    note: a.note,
                    detail: detail.as_deref(),
                    key: a.key,
                },
                now,
            )
            .await?;
        let claims = matches!(
            a.action,
            Action::Accept | Action::Reassign | Action::RefundRequired
        );
        let decision_id = match store
            .insert_decision(
                &mut tx,
                &NewDecision {
                    intent_id: intent.id,
                    action: a.action.as_str(),
                    to_intent: a.to_intent.filter(|_| a.action == Action::Reassign),
                    audit_id,
                    through: plan.through,
                    amount: plan.amount,
                },
                &plan.payments,
                claims,
                now,
            )
            .await
        {
            // Another decision claimed one of the payments since we looked.
            Err(e) if e.is_unique_violation() => {
                return Ok(ActionOutcome::Refused(format!(
                    "a payment at intent {}'s address was claimed by another decision meanwhile",
                    intent.id
                )))
            }
            other => other?,
        };
        store
            .insert_intent_event(
                &mut tx,
                intent.id,
                now,
                &format!("support_{}", a.action.as_str()),
                None,
                None,
                Some(a.note),
            )
            .await?;
        // The decision is now a fact like any other: read everything again
        // and let the writer decide, as the next reconcile will.
        let facts = store.load_facts(&mut tx, intents).await?;
        let news = vec![events::decision(
            decision_id,
            &intent,
            a.action.as_str(),
            a.to_intent.filter(|_| a.action == Action::Reassign),
        )];
        // An accepted excess is credited by the writer, as the status
        // machine reads the decision (its `ExcessMove::Credit`): one place
        // posts it, takes it back with its money and credits it again.
        self.write(&mut tx, &facts, now, news).await?;
        tx.commit().await?;
        Ok(ActionOutcome::Done { audit_id })
    }

    /// Checks the action against the case as it stands, and names the
    /// payments it will stand on.
    async fn plan(
        &self,
        tx: &mut crate::store::Tx,
        a: &CaseAction<'_>,
        intent: &IntentRecord,
        facts: &Facts,
        now: i64,
    ) -> Result<Result<Plan, Refusal>, StoreError> {
        let conflict = |why: String| Ok(Err(Refusal::Conflict(why)));
        let verdict = super::writer::verdicts(facts, &self.policy, now)
            .into_iter()
            .find(|(id, _)| *id == intent.id)
            .map(|(_, v)| v);
        // A refund the chain showed wrong is put right by the transaction
        // that pays it; until then nothing else may close the case, or the
        // money owed could be settled, credited or dismissed beside it.
        if let Some(super::Reason::RefundMismatch { why }) = verdict.as_ref().map(|v| &v.reason) {
            if a.action != Action::RefundSent {
                return conflict(format!(
                    "intent {}'s refund does not match what the chain shows ({why}): record the \
                     transaction that pays it with refund_sent",
                    intent.id
                ));
            }
        }
        let own_settlement = facts
            .settlements
            .get(&(intent.kind, intent.reference.clone()))
            .filter(|s| s.intent_id == Some(intent.id));
        let settled_elsewhere = facts
            .settled_by(intent.kind, &intent.reference)
            .filter(|by| *by != super::SettledBy::Intent(intent.id));
        let resolved_as = verdict
            .as_ref()
            .filter(|v| v.status == Status::Resolved)
            .and_then(|v| v.outcome);
        // An overpayment's excess was part of the payment that settled the
        // intent: a decision on it claims no payment (that one is used) and
        // stands on the excess alone. The case is open once, so this is
        // decided once.
        let excess = verdict
            .as_ref()
            .filter(|v| {
                own_settlement.is_some()
                    && v.status == Status::NeedsReview
                    && v.exception == Some(Exception::Overpaid)
            })
            .map(|v| v.amount_excess.0);

        // The money this decision is about: what arrived since support last
        // closed the case, or since the intent settled.
        let since = facts
            .decisions
            .iter()
            .rfind(|d| d.intent_id == intent.id && d.action != Action::RefundSent)
            .and_then(|d| d.through)
            .max(intent.settled_through.filter(|_| own_settlement.is_some()));
        let at_address = transfers_at(intent, facts);
        let through = at_address.iter().map(|t| t.id).max().or(since);
        // A payment is its chain identity, not its row: a re-mined copy of
        // a payment known by then (a reorg past finality) is that payment,
        // which the settlement may stand on, never new money to claim.
        let known: Vec<&TransferRecord> = at_address
            .iter()
            .copied()
            .filter(|t| since.is_some_and(|s| t.id <= s))
            .collect();
        let new: Vec<&TransferRecord> = at_address
            .iter()
            .copied()
            .filter(|t| t.success && t.orphaned_at_ms.is_none())
            .filter(|t| since.is_none_or(|s| t.id > s))
            .filter(|t| !known.iter().any(|k| k.payment_key() == t.payment_key()))
            .collect();
        let pending: Vec<&TransferRecord> = new
            .iter()
            .copied()
            .filter(|t| !is_final(t, facts))
            .collect();
        let mut payments: Vec<&TransferRecord> =
            new.iter().copied().filter(|t| is_final(t, facts)).collect();
        if a.action == Action::RefundRequired {
            // Money no settlement can stand on is owed back whenever it
            // came: another asset or network, or the intent's own coin sent
            // after the expiry, though recorded before the payment that
            // settled (issue 36, found 7).
            let late = verdict.as_ref().map_or(&[][..], |v| v.late_rows.as_slice());
            let own = |t: &TransferRecord| {
                t.network == intent.method.network()
                    && t.asset == paywatch_core::AssetId::Known(intent.method.asset())
            };
            payments.extend(at_address.iter().copied().filter(|t| {
                t.success
                    && t.orphaned_at_ms.is_none()
                    && is_final(t, facts)
                    && !new.iter().any(|n| n.id == t.id)
                    && (!own(t) || late.contains(&t.id))
            }));
        }
        let keys: Vec<PaymentKey> = payments.iter().map(|t| t.payment_key()).collect();
        let claimed = self.store.claimed_payments(tx, &keys).await?;
        payments.retain(|t| !claimed.contains(&t.payment_key()));
        payments.sort_by_key(|t| (t.network.as_str(), t.txid.clone(), t.index));
        payments.dedup_by(|a, b| a.payment_key() == b.payment_key());

        let not_final = |what: &str| {
            Ok(Err(Refusal::NotFinal(format!(
                "{} {} at intent {}'s address is not final yet; {what} once it is",
                pending.len(),
                if pending.len() == 1 {
                    "payment"
                } else {
                    "payments"
                },
                intent.id
            ))))
        };
        let closing = matches!(
            a.action,
            Action::Accept | Action::Reassign | Action::RefundRequired | Action::Dismiss
        );
        if closing
            && resolved_as.is_some()
            && !(a.action == Action::Accept && resolved_as == Some(Outcome::Dismissed))
        {
            if a.action == Action::Accept && own_settlement.is_some() {
                return conflict(format!("intent {} is already paid", intent.id));
            }
            return conflict(format!(
                "intent {} is already resolved ({})",
                intent.id,
                resolved_as.map_or("resolved", |o| o.as_str())
            ));
        }
        match a.action {
            Action::Accept if excess.is_some() => {
                if !pending.is_empty() {
                    return not_final("accept its excess");
                }
                match excess.and_then(|e| super::excess::cents_of(intent, e)) {
                    // Worth a cent or more: the writer credits it.
                    Some(cents) if cents > 0 => {}
                    Some(_) => {
                        return conflict(format!(
                            "intent {}'s excess is worth less than a cent at its rate: refund or \
                             dismiss it",
                            intent.id
                        ))
                    }
                    None => {
                        return conflict(format!(
                            "intent {}'s excess is too large to credit in USD cents: refund it",
                            intent.id
                        ))
                    }
                }
            }
            Action::Accept => {
                // A reversed settlement paid nothing: what arrived since may
                // be accepted (the status contract's reversed-then-paid
                // policy), unless other money paid the reference meanwhile.
                let reversed = own_settlement.is_some_and(|s| s.reversed_at_ms.is_some())
                    || (own_settlement.is_none() && intent.reversed_at_ms.is_some());
                if !reversed && (own_settlement.is_some() || intent.paid_at_ms.is_some()) {
                    return conflict(format!("intent {} is already paid", intent.id));
                }
                if let Some(by) = settled_elsewhere {
                    return conflict(format!(
                        "{} {} is already settled by {}",
                        intent.kind.as_str(),
                        intent.reference,
                        describe(by)
                    ));
                }
                if !pending.is_empty() {
                    return not_final("accept it");
                }
                if payments.is_empty() {
                    return conflict(format!(
                        "nothing final and unclaimed has arrived at intent {}'s address to accept; \
                         dismiss it instead",
                        intent.id
                    ));
                }
            }
            Action::Reassign => {
                let Some(to) = a.to_intent.filter(|t| *t != intent.id) else {
                    return conflict("reassign needs to_intent, another intent's id".into());
                };
                let Some(target) = facts.intents.iter().find(|i| i.id == to) else {
                    return conflict(format!("no intent {to} to reassign to"));
                };
                if own_settlement.is_some() {
                    return conflict(format!(
                        "intent {}'s own payment settled it: its money is used",
                        intent.id
                    ));
                }
                if let Some(by) = facts.settled_by(target.kind, &target.reference) {
                    return conflict(format!(
                        "{} {} (intent {to}) is already settled by {}",
                        target.kind.as_str(),
                        target.reference,
                        describe(by)
                    ));
                }
                if !pending.is_empty() {
                    return not_final("reassign it");
                }
                if payments.is_empty() {
                    return conflict(format!(
                        "no final payment at intent {}'s address is left to reassign (each \
                         settles one intent at most)",
                        intent.id
                    ));
                }
            }
            Action::RefundRequired => {
                if a.destination.is_none_or(|d| d.trim().is_empty()) {
                    return conflict("refund_required needs the destination address".into());
                }
                if !pending.is_empty() {
                    return not_final("require its refund");
                }
                if payments.is_empty() && excess.is_none() {
                    return conflict(format!(
                        "nothing final and unclaimed has arrived at intent {}'s address to refund",
                        intent.id
                    ));
                }
            }
            Action::RefundSent => {
                if a.txid.is_none_or(|t| t.trim().is_empty()) {
                    return conflict("refund_sent needs the refund's transaction id".into());
                }
                payments.clear();
            }
            Action::Dismiss => {
                if verdict.as_ref().is_some_and(|v| v.status == Status::Paid) {
                    return conflict(format!(
                        "intent {} is paid; dismissing would hide a settled payment",
                        intent.id
                    ));
                }
                if !pending.is_empty() {
                    return not_final("dismiss it");
                }
            }
        }
        let amount = excess.unwrap_or_else(|| {
            payments
                .iter()
                .filter(|t| {
                    t.network == intent.method.network()
                        && t.asset == paywatch_core::AssetId::Known(intent.method.asset())
                })
                .map(|t| t.amount.0)
                .sum()
        });
        Ok(Ok(Plan {
            through,
            amount,
            payments: payments.iter().map(|t| t.named_payment()).collect(),
        }))
    }
}

/// What an action will record.
struct Plan {
    through: Option<i64>,
    amount: u128,
    payments: Vec<DecisionPayment>,
}

/// Where a refund of `intent`'s owed money goes out: on the network the
/// money came on (USDT sent on Tron to an Ethereum intent's address goes
/// back on Tron).
pub(crate) fn refund_network(intent: &IntentRecord) -> Network {
    let own = intent.method.network();
    match intent.exception {
        Some(Exception::WrongNetwork) => crate::twin::twin_network(own).unwrap_or(own),
        _ => own,
    }
}

fn describe(by: super::SettledBy) -> String {
    match by {
        super::SettledBy::Intent(id) => format!("intent {id}"),
        super::SettledBy::Balance => "the account's balance".to_owned(),
    }
}

fn is_final(t: &TransferRecord, facts: &Facts) -> bool {
    t.block_hash != crate::store::MEMPOOL_BLOCK
        && facts
            .final_heights
            .get(&t.network)
            .is_some_and(|h| t.final_from() <= *h)
}

/// The intent's transfers: at its address, and at its twin on the other network.
fn transfers_at<'a>(intent: &IntentRecord, facts: &'a Facts) -> Vec<&'a TransferRecord> {
    let twin: Option<(Network, String)> =
        crate::twin::twin(intent.method.network(), &intent.address);
    facts
        .transfers
        .iter()
        .filter(|t| {
            (t.network == intent.method.network() && t.to == intent.address)
                || twin
                    .as_ref()
                    .is_some_and(|(n, a)| t.network == *n && &t.to == a)
        })
        .collect()
}

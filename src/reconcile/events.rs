//! The outbox rows the money path writes, one per change, in the same
//! transaction as the change: a status, a settlement, a ledger entry or a
//! support decision. They are the storefront's feed (`paywatch_events`,
//! `GET /v1/events`, webhooks), so their fields only grow. Every payload
//! also carries `cursor` and `created_at_ms`, added as it is written.
//!
//! | topic           | when                                                  |
//! |-----------------|-------------------------------------------------------|
//! | `intent.status` | an intent's status, exception, outcome or paid state changed |
//! | `settlement`    | a reference was `settled`, `reversed` or `recredited`  |
//! | `ledger`        | a ledger entry was posted (credit, reversal, debit)   |
//! | `decision`      | support recorded a decision on a case                 |
//! | `refund`        | the chain showed a refund's transaction `sent_unconfirmed`, `refunded` or a `mismatch` |

use serde_json::{json, Value};

use crate::store::{IntentRecord, LedgerPosting, OutboxEvent, VerdictWrite};

fn event(
    topic: &'static str,
    intent_id: Option<i64>,
    about: Option<(&str, &str)>,
    payload: Value,
) -> OutboxEvent {
    let Value::Object(payload) = payload else {
        unreachable!("every event payload is written as a JSON object")
    };
    OutboxEvent {
        topic,
        intent_id,
        kind: about.map(|(k, _)| k.to_owned()),
        reference: about.map(|(_, r)| r.to_owned()),
        payload,
    }
}

pub(crate) fn status_changed(w: &VerdictWrite<'_>) -> OutboxEvent {
    let i = w.intent;
    event(
        "intent.status",
        Some(i.id),
        Some((i.kind.as_str(), &i.reference)),
        json!({
            "event": "intent.status",
            "intent_id": i.id,
            "kind": i.kind.as_str(),
            "reference": i.reference,
            "account": i.account,
            "status": w.status.as_str(),
            "exception": w.exception.map(|e| e.as_str()),
            "outcome": w.outcome.map(|o| o.as_str()),
            "paid": w.paid_at_ms.is_some() && w.reversed_at_ms.is_none(),
            "reason": w.reason,
            // The intent's standing at this change, so a receiver needs no
            // second read: amounts in base units, as strings (JSON numbers
            // lose precision past 2^53).
            "reason_code": w.reason_code,
            "asset": i.method.asset().as_str(),
            "network": i.method.network().as_str(),
            "amount_due": i.amount_due.0.to_string(),
            "amount_final": w.amount_final.0.to_string(),
            "amount_pending": w.amount_pending.0.to_string(),
            "amount_excess": w.amount_excess.0.to_string(),
            "amount_outstanding": w.amount_outstanding().0.to_string(),
            "usd_cents": i.usd_cents,
            "paid_at_ms": w.paid_at_ms.filter(|_| w.reversed_at_ms.is_none()),
            "reversed_at_ms": w.reversed_at_ms,
            "expires_at_ms": i.expires_at_ms,
        }),
    )
}

/// What happened to a settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SettlementEvent {
    Settled,
    Reversed,
    Recredited,
}

impl SettlementEvent {
    fn as_str(self) -> &'static str {
        match self {
            SettlementEvent::Settled => "settled",
            SettlementEvent::Reversed => "reversed",
            SettlementEvent::Recredited => "recredited",
        }
    }
}

/// A settlement of `kind`/`reference` by an intent (or, with `intent`
/// `None`, from the balance).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SettlementNews<'a> {
    pub event: SettlementEvent,
    pub kind: &'a str,
    pub reference: &'a str,
    pub account: &'a str,
    pub intent_id: Option<i64>,
    pub via: &'a str,
    pub usd_cents: i64,
}

pub(crate) fn settlement(n: SettlementNews<'_>) -> OutboxEvent {
    event(
        "settlement",
        n.intent_id,
        Some((n.kind, n.reference)),
        json!({
            "event": format!("settlement.{}", n.event.as_str()),
            "kind": n.kind,
            "reference": n.reference,
            "account": n.account,
            "intent_id": n.intent_id,
            "via": n.via,
            "usd_cents": n.usd_cents,
        }),
    )
}

pub(crate) fn settlement_of(
    event: SettlementEvent,
    intent: &IntentRecord,
    via: &str,
) -> OutboxEvent {
    settlement(SettlementNews {
        event,
        kind: intent.kind.as_str(),
        reference: &intent.reference,
        account: &intent.account,
        intent_id: Some(intent.id),
        via,
        usd_cents: intent.usd_cents,
    })
}

/// A ledger entry, with the order or top-up it belongs to (none for a
/// debit that paid no order).
pub(crate) fn ledger(p: &LedgerPosting<'_>, about: Option<(&str, &str)>) -> OutboxEvent {
    let (kind, reference) = (about.map(|a| a.0), about.map(|a| a.1));
    event(
        "ledger",
        p.intent_id,
        about,
        json!({
            "event": "ledger.posted",
            "account": p.account,
            "entry_kind": p.entry_kind,
            "entry_key": p.entry_key,
            "usd_cents": p.usd_cents,
            "intent_id": p.intent_id,
            "kind": kind,
            "reference": reference,
        }),
    )
}

/// A decision support recorded, without its note (kept to operators).
pub(crate) fn decision(
    decision_id: i64,
    intent: &IntentRecord,
    action: &str,
    to_intent: Option<i64>,
) -> OutboxEvent {
    event(
        "decision",
        Some(intent.id),
        Some((intent.kind.as_str(), &intent.reference)),
        json!({
            "event": "decision.recorded",
            "decision_id": decision_id,
            "intent_id": intent.id,
            "kind": intent.kind.as_str(),
            "reference": intent.reference,
            "account": intent.account,
            "action": action,
            "to_intent": to_intent,
        }),
    )
}

/// What the chain now shows of a refund support sent.
pub(crate) fn refund_checked(
    intent: &IntentRecord,
    r: &crate::store::RefundRow,
    check: &super::refund_check::RefundCheck,
) -> OutboxEvent {
    event(
        "refund",
        Some(intent.id),
        Some((intent.kind.as_str(), &intent.reference)),
        json!({
            "event": "refund.checked",
            "intent_id": intent.id,
            "kind": intent.kind.as_str(),
            "reference": intent.reference,
            "account": intent.account,
            "refund_state": check.state.as_str(),
            "refund_txid": r.txid,
            "refund_txids": r.txids,
            "refund_destination": r.destination,
            "refund_network": r.network.as_str(),
            "refund_mismatch": check.mismatch,
        }),
    )
}

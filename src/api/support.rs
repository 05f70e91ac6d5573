//! Support's endpoints: find a case, see all of it, resolve it.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Caller, Role};
use super::error::ApiError;
use super::intent_view::IntentView;
use super::query::{in_range, ApiQuery};
use super::storefront::{body, header_key, label, parse_id};
use super::ApiState;
use crate::reconcile::{Action, ActionOutcome, CaseAction, CaseReading, PaymentReading};
use paywatch_core::Network;

use crate::store::{AuditEntry, CaseTransfer, IntentEvent, IntentRecord, RefundRecord};

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Search {
    pub(crate) reference: Option<String>,
    pub(crate) account: Option<String>,
    pub(crate) address: Option<String>,
    pub(crate) txid: Option<String>,
}

/// A search field if given, checked as the text it is matched against was
/// checked when stored: a NUL byte would otherwise reach the database.
fn given<'a>(name: &str, v: &'a Option<String>) -> Result<Option<&'a str>, ApiError> {
    match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        Some(text) => crate::text::label(text, 200)
            .map(Some)
            .map_err(|why| ApiError::invalid(format!("{name}: {why}"))),
        None => Ok(None),
    }
}

pub(crate) async fn find(
    State(s): State<ApiState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<Search>,
) -> Result<Json<Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Support, Role::Operator], "find_cases")?;
    let mut views: Vec<IntentView> = Vec::new();
    for i in &find_cases(&s, &q).await? {
        views.push(IntentView::load(i, &s.ctx.settings, &s.ctx.store).await?);
    }
    Ok(Json(json!({"intents": views})))
}

/// The intents a search matches, newest first; the API and the console
/// search the same way.
pub(crate) async fn find_cases(s: &ApiState, q: &Search) -> Result<Vec<IntentRecord>, ApiError> {
    let (reference, account, address, txid) = (
        given("reference", &q.reference)?,
        given("account", &q.account)?,
        given("address", &q.address)?,
        given("txid", &q.txid)?,
    );
    if reference.is_none() && account.is_none() && address.is_none() && txid.is_none() {
        return Err(ApiError::invalid(
            "give at least one of reference, account, address, txid",
        ));
    }
    let addresses: Vec<String> = address
        .map(crate::pasted::address_spellings)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let txids: Vec<String> = txid
        .map(crate::pasted::txid_spellings)
        .unwrap_or_default()
        .into_iter()
        .collect();
    Ok(s.ctx
        .store
        .find_intents(reference, account, &addresses, &txids, 200)
        .await?)
}

pub(crate) fn transfer_json(t: &CaseTransfer) -> Value {
    json!({
        "transfer_id": t.transfer_id, "payment": payment_id(t),
        "network": t.network, "asset": t.asset,
        "txid": t.txid, "index": t.index, "to_address": t.to_address,
        "from_address": t.from_address, "amount": t.amount,
        "counts_toward_intent": t.counts_toward_intent, "tx_status": t.tx_status,
        "block_height": t.block_height, "confirmations": t.confirmations,
        "is_final": t.is_final, "first_seen_at_ms": t.first_seen_at_ms,
        "orphaned_at_ms": t.orphaned_at_ms,
    })
}

/// A payment's chain identity: the same for every row recorded of it (a
/// re-mined copy, a mempool sighting), unlike the row's id.
pub(crate) fn payment_id(t: &CaseTransfer) -> String {
    format!("{}:{}:{}", t.network, t.txid, t.index)
}

/// A case's transfer with what the status machine makes of it.
fn case_transfer_json(t: &CaseTransfer, r: PaymentReading) -> Value {
    let mut v = transfer_json(t);
    v["late"] = json!(r.late);
    v["settles"] = json!(r.settles);
    v["claimed_by"] = match r.claimed_by {
        Some((decision, action)) => json!({"decision_id": decision, "action": action.as_str()}),
        None => Value::Null,
    };
    v
}

/// Transfers shown on one page of a case.
pub(crate) const CASE_TRANSFERS_PER_PAGE: i64 = 50;

/// Which page of a case's transfers to show: those after this transfer id.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TransfersPage {
    pub(crate) transfers_after: Option<i64>,
}

pub(crate) async fn case(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiQuery(page): ApiQuery<TransfersPage>,
) -> Result<Json<Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Support, Role::Operator], "case")?;
    let after = in_range("transfers_after", page.transfers_after, 0, 0, i64::MAX)?;
    Ok(Json(case_json(&s, parse_id(&id)?, after).await?))
}

/// Everything support needs about one intent, read once for the API's
/// answer and the console's page alike.
#[derive(Debug)]
pub(crate) struct CaseFile {
    pub(crate) intent: IntentRecord,
    pub(crate) history: Vec<IntentEvent>,
    /// One page of the transfers to its address, oldest first.
    pub(crate) transfers: Vec<CaseTransfer>,
    /// All transfers to its address, of which `transfers` is a page.
    pub(crate) transfers_total: i64,
    /// The `transfers_after` of the next page, if there is one.
    pub(crate) transfers_next: Option<i64>,
    pub(crate) audit: Vec<AuditEntry>,
    pub(crate) refund: Option<RefundRecord>,
    /// Each transfer as the status machine reads it.
    pub(crate) reading: CaseReading,
}

/// The case of intent `id`, with its transfers after transfer `after`.
pub(crate) async fn load_case(s: &ApiState, id: i64, after: i64) -> Result<CaseFile, ApiError> {
    let store = &s.ctx.store;
    let intent = store
        .intent(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no intent {id}")))?;
    // One more than a page tells whether another page follows.
    let mut transfers = store
        .case_transfers(id, after, CASE_TRANSFERS_PER_PAGE + 1)
        .await?;
    let more = transfers.len() > CASE_TRANSFERS_PER_PAGE as usize;
    transfers.truncate(CASE_TRANSFERS_PER_PAGE as usize);
    let transfers_next = more
        .then(|| transfers.last().map(|t| t.transfer_id))
        .flatten();
    Ok(CaseFile {
        history: store.intent_events(id).await?,
        transfers_total: store.case_transfer_count(id).await?,
        transfers,
        transfers_next,
        audit: store.audit_entries(id).await?,
        refund: store.refund(id).await?,
        reading: s.ctx.reconciler.case_reading(intent.clone()).await?,
        intent,
    })
}

/// Everything support needs about one intent, in one answer.
pub(crate) async fn case_json(s: &ApiState, id: i64, after: i64) -> Result<Value, ApiError> {
    let c = load_case(s, id, after).await?;
    let events: Vec<Value> = c
        .history
        .iter()
        .map(|e| {
            json!({"at_ms": e.at_ms, "kind": e.kind, "status": e.status,
                         "exception": e.exception, "detail": e.detail})
        })
        .collect();
    let transfers: Vec<Value> = c
        .transfers
        .iter()
        .map(|t| case_transfer_json(t, c.reading.of(t.transfer_id)))
        .collect();
    let audit: Vec<Value> = c
        .audit
        .iter()
        .map(|a| {
            json!({"id": a.id, "at_ms": a.at_ms, "role": a.role, "actor": a.actor,
                   "token_name": a.token_name, "action": a.action, "note": a.note,
                   "detail": a.detail})
        })
        .collect();
    let refund = c.refund.as_ref().map(|r| {
        json!({"destination": r.destination, "required_at_ms": r.required_at_ms,
               "txid": r.txid, "txids": r.txids, "sent_at_ms": r.sent_at_ms, "network": r.network,
               "state": r.state, "check_by_ms": r.check_by_ms,
               "checked_at_ms": r.checked_at_ms, "mismatch": r.mismatch})
    });
    let intent = &c.intent;
    Ok(json!({
        "intent": IntentView::new(intent, &s.ctx.settings).with_refund(c.refund.as_ref()),
        "declared_paid_at_ms": intent.declared_paid_at_ms,
        "rate_lock": {"usd_per_coin": intent.rate_usd, "source": intent.rate_source,
                      "at_ms": intent.rate_at_ms},
        "history": events,
        "transfers": transfers,
        "transfers_total": c.transfers_total,
        "transfers_next": c.transfers_next
            .map(|after| format!("/v1/cases/{id}?transfers_after={after}")),
        "audit": audit,
        "refund": refund,
    }))
}

/// A support action as the caller sent it, each field unchecked: the API's
/// JSON body and the console's form both become one of these.
#[derive(Debug, Default)]
pub(crate) struct ActionRequest {
    pub(crate) action: Option<String>,
    pub(crate) note: Option<String>,
    pub(crate) actor: Option<String>,
    pub(crate) destination: Option<String>,
    pub(crate) txid: Option<String>,
    pub(crate) to_intent: Option<String>,
}

/// What a support action came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acted {
    /// Done now, as this audit entry.
    Done(i64),
    /// This key's action was done before, as this audit entry; nothing was
    /// done again.
    Replayed(i64),
}

fn required<'a>(name: &str, v: &'a Option<String>) -> Result<&'a str, ApiError> {
    v.as_deref()
        .ok_or_else(|| ApiError::invalid(format!("{name}: missing field")))
}

/// A refund's destination and transaction, read with the parsers of the
/// network the money arrived on: the intent's, or its twin's when the
/// payment came on the wrong network (USDT sent on Tron to an Ethereum
/// intent's address goes back on Tron). Money sent to a mistyped or
/// wrong-network address is lost, and a refund recorded under a txid
/// nobody can find proves nothing.
async fn chain_fields(
    s: &ApiState,
    id: i64,
    r: &ActionRequest,
) -> Result<(Option<Network>, Option<String>, Option<String>), ApiError> {
    if r.destination.is_none() && r.txid.is_none() {
        return Ok((None, None, None));
    }
    let intent = s
        .ctx
        .store
        .intent(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no intent {id}")))?;
    let network = crate::reconcile::refund_network(&intent);
    let destination = r
        .destination
        .as_deref()
        .map(|d| crate::pasted::refund_destination(network, d))
        .transpose()
        .map_err(|why| ApiError::invalid(format!("destination: {why}")))?;
    let txid = r
        .txid
        .as_deref()
        .map(|t| crate::pasted::txid(network, t))
        .transpose()
        .map_err(|why| ApiError::invalid(format!("txid: {why}")))?;
    Ok((Some(network), destination, txid))
}

/// Checks and performs one support action under `key`, in one transaction
/// with its audit entry: the one path to `act_on_case`, for the API and the
/// console, so both check the same and a key is honoured the same.
pub(crate) async fn perform_action(
    s: &ApiState,
    caller: &Caller,
    id: i64,
    key: &str,
    r: &ActionRequest,
) -> Result<Acted, ApiError> {
    let action_text = required("action", &r.action)?;
    let action = action_text.parse::<Action>().ok().ok_or_else(|| {
        ApiError::invalid(format!(
            "action: '{action_text}' is not accept, refund_required, refund_sent, reassign or dismiss"
        ))
    })?;
    let note = crate::text::prose(required("note", &r.note)?, 2000).map_err(|why| {
        ApiError::invalid(format!(
            "note: every action needs a note saying why; it {why}"
        ))
    })?;
    let actor = label("actor", required("actor", &r.actor)?, 200)?;
    let to_intent = r.to_intent.as_deref().map(parse_id).transpose()?;
    let (network, destination, txid) = chain_fields(s, id, r).await?;
    let outcome = s
        .ctx
        .reconciler
        .act(&CaseAction {
            intent_id: id,
            action,
            role: caller.role.as_str(),
            actor: &actor,
            token_name: &caller.token_name,
            note,
            key,
            destination: destination.as_deref(),
            txid: txid.as_deref(),
            to_intent,
        })
        .await?;
    if let (ActionOutcome::Done { .. }, Some(network), Some(d)) =
        (&outcome, network, destination.as_deref())
    {
        // Watched from now in this process, so the refund's transaction is
        // recorded when it comes; the watcher of another instance reads it
        // from the store at its next look.
        if let Some(w) = s.ctx.watch.get(&network) {
            w.insert(d);
        }
    }
    match outcome {
        ActionOutcome::Done { audit_id } => Ok(Acted::Done(audit_id)),
        ActionOutcome::Replayed { audit_id } => Ok(Acted::Replayed(audit_id)),
        ActionOutcome::KeyConflict => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "Idempotency-Key '{key}' was used for another action, case or content: use a new key"
            ),
        )),
        ActionOutcome::NotFound(why) => Err(ApiError::not_found(why)),
        ActionOutcome::Refused(why) => Err(ApiError::new(StatusCode::CONFLICT, "conflict", why)),
        ActionOutcome::NotFinal(why) => {
            Err(ApiError::new(StatusCode::CONFLICT, "not_final", why))
        }
    }
}

pub(crate) async fn act(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let caller = s.tokens.caller(&headers, &[Role::Support], "case_action")?;
    let id = parse_id(&id)?;
    let f = body(
        raw,
        &[
            "action",
            "note",
            "actor",
            "destination",
            "txid",
            "to_intent",
        ],
    )?;
    let key = header_key(&headers)?.ok_or_else(|| {
        ApiError::invalid("Idempotency-Key: required, so a replayed action is done once")
    })?;
    let request = ActionRequest {
        action: f.text("action")?,
        note: f.text("note")?,
        actor: f.text("actor")?,
        destination: f.text("destination")?,
        txid: f.text("txid")?,
        to_intent: f.text("to_intent")?,
    };
    let (status, audit_id) = match perform_action(&s, &caller, id, key, &request).await? {
        Acted::Done(audit_id) => (StatusCode::CREATED, audit_id),
        Acted::Replayed(audit_id) => (StatusCode::OK, audit_id),
    };
    let mut case = case_json(&s, id, 0).await?;
    case["audit_id"] = json!(audit_id);
    Ok((status, Json(case)).into_response())
}

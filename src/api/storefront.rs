//! The storefront's endpoints: intents, "I have paid", balance and paying
//! from it.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use paywatch_core::Amount;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Role;
use super::error::ApiError;
use super::intent_view::{intent_uri, usd, IntentView};
use super::query::{in_range, ApiQuery};
use super::ApiState;
use crate::intents::NewIntent;
use crate::payment_uri::{qr_png, qr_svg};
use crate::reconcile::{BalancePayment, DebitOutcome, SettledBy};
use crate::store::Declared;
use crate::IntentKind;
use axum::http::header::CONTENT_TYPE;

const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A JSON object body read by hand, so a bad one gets our error shape
/// naming what was wrong, and an oversized one a 413 before it is read.
/// `fields` are the names it may hold; any other is refused by name.
pub(crate) fn body(
    raw: Result<Bytes, BytesRejection>,
    fields: &[&str],
) -> Result<Fields, ApiError> {
    let raw = raw.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than this paywatch accepts (api.max_body_bytes)",
            )
        } else {
            ApiError::invalid(format!("the request body could not be read: {e}"))
        }
    })?;
    let value: Value = serde_json::from_slice(&raw)
        .map_err(|e| ApiError::invalid(format!("request body: not JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(ApiError::invalid("request body: must be a JSON object"));
    };
    if let Some(unknown) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!(
            "request body: unknown field '{unknown}' (expected {})",
            fields.join(", ")
        )));
    }
    Ok(Fields(map))
}

/// A request body's fields, each checked by name.
pub(crate) struct Fields(serde_json::Map<String, Value>);

impl Fields {
    /// A string field; numbers are refused, so no amount ever passes
    /// through a float.
    pub(crate) fn text(&self, name: &str) -> Result<Option<String>, ApiError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ApiError::invalid(format!(
                "{name}: must be a string, not {}",
                kind_of(other)
            ))),
        }
    }

    pub(crate) fn required(&self, name: &str) -> Result<String, ApiError> {
        self.text(name)?
            .ok_or_else(|| ApiError::invalid(format!("{name}: missing field")))
    }

    /// An optional prose field (a note, a memo), checked as
    /// [`crate::text::prose`] and trimmed; a blank one is no note.
    pub(crate) fn prose(&self, name: &str, max_bytes: usize) -> Result<Option<String>, ApiError> {
        match self.text(name)? {
            Some(v) if !v.trim().is_empty() => {
                checked(name, crate::text::prose(&v, max_bytes)).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// A one-line name, checked as [`crate::text::label`] and trimmed.
    pub(crate) fn label(&self, name: &str, max_bytes: usize) -> Result<Option<String>, ApiError> {
        self.text(name)?
            .map(|v| label(name, &v, max_bytes))
            .transpose()
    }
}

/// `value` as a one-line name (an account from a path, an actor), trimmed.
pub(crate) fn label(name: &str, value: &str, max_bytes: usize) -> Result<String, ApiError> {
    checked(name, crate::text::label(value, max_bytes))
}

fn checked(name: &str, v: Result<&str, crate::text::TextProblem>) -> Result<String, ApiError> {
    v.map(str::to_owned)
        .map_err(|why| ApiError::invalid(format!("{name}: {why}")))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The `Idempotency-Key` header, if sent, checked once here for every
/// endpoint that takes one.
pub(crate) fn header_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .filter(|k| crate::intents::valid_idempotency_key(k))
        .map(Some)
        .ok_or_else(|| {
            ApiError::invalid("Idempotency-Key: must be 1 to 200 visible ASCII characters")
        })
}

pub(crate) async fn create_intent(
    State(s): State<ApiState>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Storefront], "create_intent")?;
    const FIELDS: [&str; 6] = [
        "kind",
        "reference",
        "account",
        "asset",
        "network",
        "usd_amount",
    ];
    let f = body(raw, &FIELDS)?;
    let key = header_key(&headers)?;
    let new = NewIntent {
        kind: f.required("kind")?,
        reference: f.required("reference")?,
        account: f.required("account")?,
        asset: f.required("asset")?,
        network: f.required("network")?,
        usd_amount: f.required("usd_amount")?,
    };
    let (intent, made_now) = s.ctx.intents.create_once(&new, key).await?;
    // A replayed key answers 200 with the intent made the first time.
    let status = if made_now {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let view = IntentView::load(&intent, &s.ctx.settings, &s.ctx.store).await?;
    Ok((status, Json(view)).into_response())
}

pub(crate) async fn get_intent(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<IntentView>, ApiError> {
    s.tokens.authorize(
        &headers,
        &[Role::Storefront, Role::Support, Role::Operator],
        "get_intent",
    )?;
    let id = parse_id(&id)?;
    let intent = s
        .ctx
        .store
        .intent(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no intent {id}")))?;
    Ok(Json(
        IntentView::load(&intent, &s.ctx.settings, &s.ctx.store).await?,
    ))
}

/// The intent's payment URI as a QR code, `qr.svg` or `qr.png`.
pub(crate) async fn qr(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path((id, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    s.tokens.authorize(
        &headers,
        &[Role::Storefront, Role::Support, Role::Operator],
        "qr",
    )?;
    let id = parse_id(&id)?;
    let intent = s
        .ctx
        .store
        .intent(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no intent {id}")))?;
    let uri = intent_uri(&intent, &s.ctx.settings)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    qr_file(
        &uri,
        &file,
        |why| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", why),
        "an intent: qr.svg or qr.png",
    )
}

/// `file` (`qr.svg` or `qr.png`) of a payment URI; `failed` says what a
/// code that cannot be drawn answers, `what` names the other files.
pub(crate) fn qr_file(
    uri: &str,
    file: &str,
    failed: impl Fn(String) -> ApiError,
    what: &str,
) -> Result<Response, ApiError> {
    let failed = |e: crate::payment_uri::UriError| failed(e.to_string());
    match file {
        "qr.svg" => Ok((
            [(CONTENT_TYPE, "image/svg+xml")],
            qr_svg(uri).map_err(failed)?,
        )
            .into_response()),
        "qr.png" => {
            Ok(([(CONTENT_TYPE, "image/png")], qr_png(uri).map_err(failed)?).into_response())
        }
        other => Err(ApiError::not_found(format!("no '{other}' for {what}"))),
    }
}

pub(crate) fn parse_id(id: &str) -> Result<i64, ApiError> {
    id.parse::<i64>()
        .ok()
        .filter(|i| *i > 0)
        .ok_or_else(|| ApiError::invalid(format!("intent id: '{id}' is not a positive integer")))
}

#[derive(Debug, Deserialize)]
pub(crate) struct ByReference {
    kind: Option<String>,
    reference: Option<String>,
}

pub(crate) async fn list_intents(
    State(s): State<ApiState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<ByReference>,
) -> Result<Json<serde_json::Value>, ApiError> {
    s.tokens.authorize(
        &headers,
        &[Role::Storefront, Role::Support, Role::Operator],
        "list_intents",
    )?;
    let reference = q
        .reference
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| ApiError::invalid("reference: required, e.g. ?kind=order&reference=A-1"))?;
    // Checked as creation checks it: a NUL byte would reach the database.
    let reference = label("reference", &reference, 200)?;
    let kind_text = q.kind.unwrap_or_else(|| "order".into());
    let kind: IntentKind = kind_text
        .parse()
        .map_err(|_| ApiError::invalid(format!("kind: '{kind_text}' is not order or topup")))?;
    let intents = s
        .ctx
        .store
        .intents_for_reference(kind, reference.trim())
        .await?;
    let mut views: Vec<IntentView> = Vec::with_capacity(intents.len());
    for i in &intents {
        views.push(IntentView::load(i, &s.ctx.settings, &s.ctx.store).await?);
    }
    let settlement = s
        .ctx
        .store
        .settlement(kind, reference.trim())
        .await?
        .map(|st| {
            json!({"via": st.via, "intent_id": st.intent_id, "account": st.account,
                   "usd_cents": st.usd_cents, "settled_at_ms": st.settled_at_ms,
                   "reversed_at_ms": st.reversed_at_ms})
        });
    Ok(Json(json!({"intents": views, "settlement": settlement})))
}

pub(crate) async fn declare_paid(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Storefront], "declare_paid")?;
    let id = parse_id(&id)?;
    let note = match &raw {
        Ok(b) if b.is_empty() => None,
        _ => body(raw, &["note"])?.prose("note", 1000)?,
    };
    let now = s.ctx.clock.now_ms();
    match s.ctx.store.declare_paid(id, note.as_deref(), now).await? {
        Declared::NoSuchIntent => Err(ApiError::not_found(format!("no intent {id}"))),
        Declared::Recorded => {
            s.recheck.notify_one();
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({
                    "intent_id": id,
                    "recorded": true,
                    "declared_at_ms": now,
                    "message": "recorded; the chain decides whether it is paid, and it is being checked now",
                })),
            )
                .into_response())
        }
        // Answered as a success: a customer who clicks twice did nothing
        // wrong, but nothing is written and nothing is woken.
        Declared::AlreadyRecorded { first_at_ms } => Ok((
            StatusCode::OK,
            Json(json!({
                "intent_id": id,
                "recorded": false,
                "declared_at_ms": first_at_ms,
                "message": "already recorded; the chain decides whether it is paid",
            })),
        )
            .into_response()),
    }
}

pub(crate) async fn balance(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(account): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Storefront, Role::Support], "balance")?;
    let account = label("account", &account, 200)?;
    let b = s.ctx.store.account_balance(&account).await?;
    Ok(Json(json!({
        "account": account,
        "available_usd_cents": b.available_usd_cents,
        "available_usd": usd(b.available_usd_cents),
        "pending_usd_cents": b.pending_usd_cents,
        "pending_usd": usd(b.pending_usd_cents),
        "entries": b.entries,
        "last_entry_at_ms": b.last_entry_at_ms,
    })))
}

#[derive(Debug, Deserialize)]
pub(crate) struct LedgerPage {
    after: Option<i64>,
    limit: Option<i64>,
}

/// The account's ledger entries, oldest first, a page at a time.
pub(crate) async fn ledger(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(account): Path<String>,
    ApiQuery(q): ApiQuery<LedgerPage>,
) -> Result<Json<serde_json::Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Storefront, Role::Support], "ledger")?;
    let account = label("account", &account, 200)?;
    let after = in_range("after", q.after, 0, 0, i64::MAX)?;
    let limit = in_range("limit", q.limit, 100, 1, 1000)?;
    let entries = s.ctx.store.ledger_entries(&account, after, limit).await?;
    let next = entries.last().map_or(after, |e| e.entry_id);
    Ok(Json(json!({
        "account": account,
        "entries": entries.iter().map(|e| json!({
            "entry_id": e.entry_id,
            "usd_cents": e.usd_cents,
            "usd": usd(e.usd_cents),
            "entry_kind": e.entry_kind,
            "entry_key": e.entry_key,
            "intent_id": e.intent_id,
            "kind": e.kind,
            "reference": e.reference,
            "created_at_ms": e.created_at_ms,
        })).collect::<Vec<_>>(),
        "next_after": next,
        "more": i64::try_from(entries.len()).unwrap_or(i64::MAX) == limit,
    })))
}

/// `usd_amount` of a balance movement, in cents: above 0, at most 10^8 USD.
pub(crate) fn usd_cents_of(usd_amount: &str) -> Result<i64, ApiError> {
    let cents = Amount::parse_decimal("usd_amount", usd_amount, 2).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "amount_invalid",
            e.to_string(),
        )
    })?;
    i64::try_from(cents.0)
        .ok()
        .filter(|c| *c > 0 && *c <= 10_000_000_000)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "amount_invalid",
                format!("usd_amount: '{usd_amount}' must be above 0 and at most 100000000"),
            )
        })
}

pub(crate) async fn debit(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(account): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    s.tokens.authorize(&headers, &[Role::Storefront], "debit")?;
    let f = body(raw, &["usd_amount", "memo", "order"])?;
    let usd_amount = f.required("usd_amount")?;
    let memo = f.prose("memo", 1000)?;
    // An account and an order are checked as intent creation checks them,
    // so a debit names the account a top-up credited.
    let order = f.label("order", 200)?;
    let key = header_key(&headers)?.ok_or_else(|| {
        ApiError::invalid("Idempotency-Key: required, so a retried debit is never taken twice")
    })?;
    let account = label("account", &account, 200)?;
    let cents = usd_cents_of(&usd_amount)?;
    let outcome = s
        .ctx
        .reconciler
        .debit(&BalancePayment {
            account: &account,
            cents,
            key,
            memo: memo.as_deref(),
            order: order.as_deref(),
        })
        .await?;
    let answer = |status: StatusCode, balance: i64, posted: bool| {
        (
            status,
            Json(json!({
                "account": account,
                "debited_usd": usd(cents),
                "posted": posted,
                "available_usd_cents": balance,
                "available_usd": usd(balance),
                "order": order.as_ref().map(|o| json!({"reference": o, "paid_via": "balance"})),
            })),
        )
            .into_response()
    };
    match outcome {
        DebitOutcome::Posted { balance_cents } => {
            Ok(answer(StatusCode::CREATED, balance_cents, true))
        }
        DebitOutcome::AlreadyPosted { balance_cents } => {
            Ok(answer(StatusCode::OK, balance_cents, true))
        }
        DebitOutcome::Insufficient { balance_cents } => Err(ApiError::new(
            StatusCode::CONFLICT,
            "insufficient_balance",
            format!(
                "available {} USD does not cover {} USD; nothing was debited",
                usd(balance_cents),
                usd(cents)
            ),
        )),
        DebitOutcome::KeyConflict => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("Idempotency-Key '{key}' was used for another debit: use a new key"),
        )),
        DebitOutcome::OrderAlreadyPaid(by) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "order {} is already paid by {}; nothing was debited",
                order.as_deref().unwrap_or_default(),
                match by {
                    SettledBy::Intent(id) => format!("intent {id}"),
                    SettledBy::Balance => "the balance".to_owned(),
                }
            ),
        )),
        DebitOutcome::OrderOfAnotherAccount(owner) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "order {} belongs to account {owner}; nothing was debited",
                order.as_deref().unwrap_or_default()
            ),
        )),
    }
}

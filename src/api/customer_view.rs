//! What a customer's browser may read with an intent's view token: that
//! intent's status and payment instructions, and nothing else. No
//! reference, account, rate or support's reasons: the token travels in a
//! page's URL, so it is treated as seen by anyone the customer shows the
//! page to.

use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::Json;
use paywatch_core::Network;
use serde::Serialize;
use serde_json::{Map, Value};

use super::error::ApiError;
use super::intent_view::{intent_uri, usd};
use super::ApiState;
use crate::payment_uri::{qr_png, qr_svg};
use crate::reconcile::Status;
use crate::store::IntentRecord;

/// An intent as its payer sees it.
#[derive(Debug, Serialize)]
pub struct CustomerView {
    pub kind: &'static str,
    pub asset: &'static str,
    pub network: &'static str,
    pub address: String,
    pub decimals: u32,
    pub amount_due: String,
    pub amount_due_coin: String,
    pub usd_amount: String,
    pub status: &'static str,
    /// Stable, and safe to show a customer.
    pub reason_code: Option<String>,
    pub paid: bool,
    pub amount_final: String,
    pub amount_pending: String,
    pub amount_outstanding: String,
    pub received_in_full: bool,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub paid_at_ms: Option<i64>,
    pub reversed_at_ms: Option<i64>,
    /// paywatch's clock when this was read: a page counts the time left
    /// from it, not from a customer's clock that may be wrong.
    pub server_time_ms: i64,
    pub uri: String,
    pub uri_carries_amount: bool,
    pub qr_svg: String,
    /// The live status stream (`text/event-stream`).
    pub events: String,
}

impl CustomerView {
    pub(crate) fn new(i: &IntentRecord, token: &str, s: &ApiState) -> CustomerView {
        let decimals = i.method.decimals();
        CustomerView {
            kind: i.kind.as_str(),
            asset: i.method.asset().as_str(),
            network: i.method.network().as_str(),
            address: i.address.clone(),
            decimals,
            amount_due: i.amount_due.0.to_string(),
            amount_due_coin: i.amount_due.to_decimal_string(decimals),
            usd_amount: usd(i.usd_cents),
            status: i.status.as_str(),
            reason_code: i.reason_code.clone().or_else(|| {
                (i.status == Status::AwaitingPayment).then(|| "awaiting_payment".to_owned())
            }),
            paid: i.paid_at_ms.is_some() && i.reversed_at_ms.is_none(),
            amount_final: i.amount_final.0.to_string(),
            amount_pending: i.amount_pending.0.to_string(),
            amount_outstanding: i.amount_due.saturating_sub(i.amount_final).0.to_string(),
            received_in_full: i.amount_final >= i.amount_due,
            created_at_ms: i.created_at_ms,
            expires_at_ms: i.expires_at_ms,
            paid_at_ms: i.paid_at_ms.filter(|_| i.reversed_at_ms.is_none()),
            reversed_at_ms: i.reversed_at_ms,
            server_time_ms: s.ctx.clock.now_ms(),
            uri: intent_uri(i, &s.ctx.settings).unwrap_or_else(|_| i.address.clone()),
            uri_carries_amount: i.method.network() != Network::Tron,
            qr_svg: format!("/v1/view/{token}/qr.svg"),
            events: format!("/v1/view/{token}/events"),
        }
    }
}

/// The fields of an `intent.status` event a customer may see, and the
/// server's clock beside them.
pub(crate) fn customer_status(payload: &Map<String, Value>, server_time_ms: i64) -> Value {
    const SAFE: [&str; 12] = [
        "status",
        "reason_code",
        "paid",
        "asset",
        "network",
        "amount_due",
        "amount_final",
        "amount_pending",
        "amount_outstanding",
        "paid_at_ms",
        "reversed_at_ms",
        "expires_at_ms",
    ];
    let mut out: Map<String, Value> = SAFE
        .iter()
        .filter_map(|k| payload.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    out.insert("server_time_ms".into(), server_time_ms.into());
    Value::Object(out)
}

/// The intent a view token opens; any other token is simply not found.
pub(crate) async fn by_token(s: &ApiState, token: &str) -> Result<IntentRecord, ApiError> {
    // Tokens are 64 hex digits; anything else is not looked up.
    let well_formed = token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit());
    let found = if well_formed {
        s.ctx.store.intent_by_view_token(token).await?
    } else {
        None
    };
    found.ok_or_else(|| ApiError::not_found("no payment for this link"))
}

/// The view a token opens.
pub(crate) async fn view_of(s: &ApiState, token: &str) -> Result<CustomerView, ApiError> {
    let intent = by_token(s, token).await?;
    Ok(CustomerView::new(&intent, token, s))
}

/// `GET /v1/view/{token}`.
pub(crate) async fn get(
    State(s): State<ApiState>,
    Path(token): Path<String>,
) -> Result<Json<CustomerView>, ApiError> {
    Ok(Json(view_of(&s, &token).await?))
}

/// `GET /v1/view/{token}/{file}`: the payment URI as `qr.svg` or `qr.png`.
pub(crate) async fn qr(
    State(s): State<ApiState>,
    Path((token, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let intent = by_token(&s, &token).await?;
    let uri = intent_uri(&intent, &s.ctx.settings).unwrap_or_else(|_| intent.address.clone());
    let failed = |e: String| ApiError::invalid(format!("no QR code for this payment: {e}"));
    match file.as_str() {
        "qr.svg" => Ok((
            [(CONTENT_TYPE, "image/svg+xml")],
            qr_svg(&uri).map_err(|e| failed(e.to_string()))?,
        )
            .into_response()),
        "qr.png" => Ok((
            [(CONTENT_TYPE, "image/png")],
            qr_png(&uri).map_err(|e| failed(e.to_string()))?,
        )
            .into_response()),
        other => Err(ApiError::not_found(format!(
            "no '{other}' for a payment: qr.svg, qr.png or events"
        ))),
    }
}

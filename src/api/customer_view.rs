//! What a customer's browser may read with an intent's view token: that
//! intent's status and payment instructions, and nothing else. No
//! reference, account, rate or support's reasons: the token travels in a
//! page's URL, so it is treated as seen by anyone the customer shows the
//! page to.

use axum::extract::{Path, State};
use axum::http::header::CACHE_CONTROL;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{Map, Value};

use super::error::ApiError;
use super::intent_view::{intent_uri, IntentView};
use super::storefront::qr_file;
use super::ApiState;
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
    /// The payer's share of what the API shows the storefront, so the two
    /// never compute an amount or a status differently.
    pub(crate) fn new(i: &IntentRecord, token: &str, s: &ApiState) -> CustomerView {
        let v = IntentView::new(i, &s.ctx.settings);
        CustomerView {
            kind: v.kind,
            asset: v.asset,
            network: v.network,
            address: v.address,
            decimals: v.decimals,
            amount_due: v.amount_due,
            amount_due_coin: v.amount_due_coin,
            usd_amount: v.usd_amount,
            status: v.status,
            reason_code: v.reason_code,
            // A reversed intent never reads as paid.
            paid: v.paid_at_ms.is_some(),
            amount_final: v.amount_final,
            amount_pending: v.amount_pending,
            amount_outstanding: v.amount_outstanding,
            received_in_full: v.received_in_full,
            created_at_ms: v.created_at_ms,
            expires_at_ms: v.expires_at_ms,
            paid_at_ms: v.paid_at_ms,
            reversed_at_ms: v.reversed_at_ms,
            server_time_ms: s.ctx.clock.now_ms(),
            uri: v.payment.uri,
            uri_carries_amount: v.payment.uri_carries_amount,
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
) -> Result<Response, ApiError> {
    // A payment's state changes: no cache may answer for it.
    Ok((
        [(CACHE_CONTROL, "no-store")],
        Json(view_of(&s, &token).await?),
    )
        .into_response())
}

/// `GET /v1/view/{token}/{file}`: the payment URI as `qr.svg` or `qr.png`.
pub(crate) async fn qr(
    State(s): State<ApiState>,
    Path((token, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let intent = by_token(&s, &token).await?;
    let uri = intent_uri(&intent, &s.ctx.settings).unwrap_or_else(|_| intent.address.clone());
    qr_file(
        &uri,
        &file,
        |why| ApiError::invalid(format!("no QR code for this payment: {why}")),
        "a payment: qr.svg, qr.png or events",
    )
}

//! Operators' view of webhook delivery: what is failing, and sending a row
//! again (a receiver that lost data, or a row older than webhooks).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Role;
use super::error::ApiError;
use super::query::{in_range, ApiQuery};
use super::ApiState;
use crate::store::{DeliveryState, WebhookDelivery};

/// Both endpoints, merged into the API's router.
pub(crate) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/webhooks/deliveries", get(list))
        .route(
            "/v1/webhooks/deliveries/{outbox_id}/redeliver",
            post(redeliver),
        )
}

#[derive(Debug, Deserialize)]
pub(crate) struct Listing {
    state: Option<String>,
    limit: Option<i64>,
}

pub(crate) async fn list(
    State(s): State<ApiState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<Listing>,
) -> Result<Json<Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Operator], "webhook_deliveries")?;
    let state = q
        .state
        .as_deref()
        .and_then(DeliveryState::parse)
        .ok_or_else(|| ApiError::invalid("state: required, one of failing, pending, delivered"))?;
    let limit = in_range("limit", q.limit, 100, 1, 1000)?;
    let rows = s.ctx.store.webhook_deliveries(state, limit).await?;
    Ok(Json(json!({
        "webhooks_enabled": s.ctx.settings.webhooks.enabled(),
        "deliveries": rows.iter().map(delivery_json).collect::<Vec<_>>(),
    })))
}

/// Due now, even if delivered: the row is sent again under the same
/// `Paywatch-Delivery` id.
pub(crate) async fn redeliver(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Operator], "redeliver_webhook")?;
    let id =
        id.parse::<i64>().ok().filter(|i| *i > 0).ok_or_else(|| {
            ApiError::invalid(format!("outbox id: '{id}' is not a positive integer"))
        })?;
    let delivery = s
        .ctx
        .store
        .redeliver_webhook(id, s.ctx.clock.now_ms())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no outbox row {id}")))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "webhooks_enabled": s.ctx.settings.webhooks.enabled(),
            "delivery": delivery_json(&delivery),
        })),
    )
        .into_response())
}

fn delivery_json(d: &WebhookDelivery) -> Value {
    // The payload as the JSON it is; as text if it ever is not.
    let payload: Value =
        serde_json::from_str(&d.payload).unwrap_or_else(|_| Value::String(d.payload.clone()));
    json!({
        "outbox_id": d.outbox_id, "intent_id": d.intent_id, "topic": d.topic,
        "state": d.state().as_str(), "attempts": d.attempts, "failures": d.failures,
        "created_at_ms": d.created_at_ms, "next_attempt_at_ms": d.next_attempt_at_ms,
        "last_attempt_at_ms": d.last_attempt_at_ms, "last_status": d.last_status,
        "last_error": d.last_error, "delivered_at_ms": d.delivered_at_ms,
        "payload": payload,
    })
}

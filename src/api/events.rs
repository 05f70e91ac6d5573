//! `GET /v1/events`: the storefront's event feed, in commit order, from a
//! cursor. The same events as the `paywatch_events` view and the webhooks.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Role;
use super::error::ApiError;
use super::query::{in_range, ApiQuery};
use super::ApiState;
use crate::store::FeedEvent;

#[derive(Debug, Deserialize)]
pub(crate) struct Page {
    after: Option<i64>,
    limit: Option<i64>,
}

pub(crate) async fn list(
    State(s): State<ApiState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<Page>,
) -> Result<Json<Value>, ApiError> {
    s.tokens.authorize(
        &headers,
        &[Role::Storefront, Role::Support, Role::Operator],
        "events",
    )?;
    let after = in_range("after", q.after, 0, 0, i64::MAX)?;
    let limit = in_range("limit", q.limit, 100, 1, 1000)?;
    let events = s.ctx.store.events_after(after, limit).await?;
    // Read after the events: a prune that committed before them shows here,
    // so a page it cut into is never served as if whole.
    let horizon = s.ctx.store.feed_pruned_through().await?;
    if after < horizon {
        return Err(ApiError {
            resume_after: Some(horizon),
            ..ApiError::new(
                StatusCode::GONE,
                "feed_pruned",
                format!(
                    "events up to cursor {horizon} were pruned (events.retention_days = {}): \
                 re-read the status of the orders and top-ups you follow, then resume with \
                 after={horizon}",
                    s.ctx.settings.events.retention_days
                ),
            )
        });
    }

    // Where to ask next: the last event's cursor, or the same one when none
    // came (never a number no event has reached).
    let next = events.last().map_or(after, |e| e.cursor);
    Ok(Json(json!({
        "events": events.iter().map(event_json).collect::<Vec<_>>(),
        "next_after": next,
        "more": i64::try_from(events.len()).unwrap_or(i64::MAX) == limit,
    })))
}

/// An event as the feed and the storefront's live stream serve it.
pub(crate) fn event_json(e: &FeedEvent) -> Value {
    // Written by paywatch as a JSON object; kept as text if ever it is not.
    let data: Value =
        serde_json::from_str(&e.payload).unwrap_or_else(|_| Value::String(e.payload.clone()));
    json!({
        "cursor": e.cursor,
        "topic": e.topic,
        "kind": e.kind,
        "reference": e.reference,
        "intent_id": e.intent_id,
        "created_at_ms": e.created_at_ms,
        "data": data,
    })
}

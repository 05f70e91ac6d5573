//! Operators' endpoints: the review queue and watcher health.

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Role;
use super::error::ApiError;
use super::intent_view::IntentView;
use super::support::transfer_json;
use super::ApiState;

#[derive(Debug, Deserialize)]
pub(crate) struct Page {
    limit: Option<i64>,
}

/// Every intent in `needs_review`, oldest first, with its reason, its age,
/// every transfer to its address and, for each transfer that does not
/// count toward it, the open intents it could belong to.
pub(crate) async fn review_queue(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Query(p): Query<Page>,
) -> Result<Json<Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Operator, Role::Support], "review_queue")?;
    let limit = p.limit.unwrap_or(100).clamp(1, 1000);
    let now = s.ctx.clock.now_ms();
    let store = &s.ctx.store;
    let mut items = Vec::new();
    for intent in store.review_queue(limit).await? {
        let mut transfers = Vec::new();
        for t in store.case_transfers(intent.id).await? {
            let mut v = transfer_json(&t);
            let candidates: Vec<i64> = store
                .candidate_intents(t.transfer_id, 10)
                .await?
                .iter()
                .map(|c| c.id)
                .filter(|c| *c != intent.id)
                .collect();
            v["candidate_intents"] = json!(candidates);
            transfers.push(v);
        }
        items.push(json!({
            "intent": IntentView::new(&intent, &s.ctx.settings),
            "reason": intent.reason,
            "exception": intent.exception.map(|e| e.as_str()),
            "age_ms": now - intent.created_at_ms,
            "transfers": transfers,
        }));
    }
    Ok(Json(json!({"items": items})))
}

/// Each enabled network's watcher: state, tip, cursor, final height, lag
/// and last error.
pub(crate) async fn watchers(
    State(s): State<ApiState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Operator, Role::Support], "watchers")?;
    let mut out = Vec::new();
    for network in s.ctx.settings.enabled_networks() {
        let st = s.ctx.store.chain_status(network).await?;
        out.push(match st {
            Some(c) => json!({
                "network": network.as_str(),
                "state": c.watcher_state,
                "tip_height": c.tip_height,
                "cursor_height": c.cursor_height,
                "final_height": c.final_height,
                "lag_blocks": c.tip_height.zip(c.cursor_height).map(|(t, c)| t.saturating_sub(c)),
                "last_error": c.last_error,
                "updated_at_ms": c.updated_at_ms,
            }),
            None => json!({"network": network.as_str(), "state": "starting"}),
        });
    }
    Ok(Json(json!({"watchers": out})))
}

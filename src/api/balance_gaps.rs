//! The balance backstop's findings for people: money at an issued address
//! that no recorded transfer explains. A person checks the chain, does what
//! the money calls for (credits the customer by hand, refunds, finds it was
//! the merchant's own), and marks the gap handled with a note saying so;
//! it then leaves the review queue. Marking never moves money or changes an
//! intent.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use paywatch_core::Network;
use serde_json::{json, Value};

use super::auth::Role;
use super::error::ApiError;
use super::storefront::{body, label};
use super::ApiState;
use crate::store::BalanceGap;

/// A balance gap as the API shows it: amounts in base units and the height
/// as strings.
pub(crate) fn gap_json(g: &BalanceGap) -> Value {
    let asset = match g.network {
        Network::Tron => "TRX",
        _ => "ETH",
    };
    json!({
        "id": g.id,
        "network": g.network.as_str(),
        "address": g.address,
        "intent_id": g.intent_id,
        "asset": asset,
        "height": g.height.to_string(),
        "node_balance": g.node_balance.to_string(),
        "counted": g.counted.to_string(),
        "unexplained": g.unexplained.to_string(),
        "found_at_ms": g.found_at_ms,
        "handled_at_ms": g.handled_at_ms,
        "handled_by": g.handled_by,
        "handled_note": g.handled_note,
    })
}

/// Marks a gap handled: who did it and what they did. Once only: a second
/// mark answers 409 naming the first, so two people never both act on the
/// same money believing it was theirs to handle.
pub(crate) async fn mark_handled(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    s.tokens.authorize(
        &headers,
        &[Role::Operator, Role::Support],
        "mark_balance_gap_handled",
    )?;
    let fields = body(raw, &["actor", "note"])?;
    let gap = mark(
        &s,
        &id,
        fields.label("actor", 200)?.as_deref(),
        fields.prose("note", 2000)?.as_deref(),
    )
    .await?;
    Ok(Json(gap_json(&gap)))
}

/// Marks gap `id` handled by `actor` with `note`, for the API and the
/// console alike: the same checks, the same once-only write, the same log
/// line. The gap as it now stands.
pub(crate) async fn mark(
    s: &ApiState,
    id: &str,
    actor: Option<&str>,
    note: Option<&str>,
) -> Result<BalanceGap, ApiError> {
    let id = id.parse::<i64>().ok().filter(|i| *i > 0).ok_or_else(|| {
        ApiError::invalid(format!("balance gap id: '{id}' is not a positive integer"))
    })?;
    let actor = actor
        .map(|a| label("actor", a, 200))
        .transpose()?
        .filter(|a| !a.is_empty())
        .ok_or_else(|| ApiError::invalid("actor: missing field (who handled the gap)"))?;
    let note = note
        .filter(|n| !n.trim().is_empty())
        .map(|n| {
            crate::text::prose(n, 2000)
                .map(str::to_owned)
                .map_err(|why| ApiError::invalid(format!("note: {why}")))
        })
        .transpose()?
        .ok_or_else(|| {
            ApiError::invalid("note: missing field (what was done about the money: a manual credit, a refund, the merchant's own)")
        })?;
    let store = &s.ctx.store;
    let Some(gap) = store.balance_gap(id).await? else {
        return Err(ApiError::not_found(format!("balance gap {id}")));
    };
    if let (Some(at), Some(by)) = (gap.handled_at_ms, &gap.handled_by) {
        return Err(already_handled(id, by, at));
    }
    let now = s.ctx.clock.now_ms();
    if !store
        .mark_balance_gap_handled(id, &actor, &note, now)
        .await?
    {
        // Another request marked it between the read and the write.
        let by = store
            .balance_gap(id)
            .await?
            .and_then(|g| g.handled_by.zip(g.handled_at_ms));
        let (by, at) = by.unwrap_or_default();
        return Err(already_handled(id, &by, at));
    }
    let gap = store
        .balance_gap(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("balance gap {id}")))?;
    tracing::info!(
        gap = id,
        network = %gap.network,
        address = %gap.address,
        unexplained = %gap.unexplained,
        actor = %actor,
        "balance gap marked handled"
    );
    Ok(gap)
}

fn already_handled(id: i64, by: &str, at_ms: i64) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "already_handled",
        format!("balance gap {id} was marked handled by {by} at {at_ms} (ms since the epoch)"),
    )
}

//! Operators' endpoints: the review queue, watcher health and rescans.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use paywatch_core::Network;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Role;
use super::error::ApiError;
use super::intent_view::IntentView;
use super::query::{in_range, ApiQuery};
use super::storefront::body;
use super::support::transfer_json;
use super::ApiState;
use crate::store::{
    CaseTransfer, ChainGap, ChainStatus, IntentRecord, RescanOutcome, RescanRefusal, RescanRequest,
};

#[derive(Debug, Deserialize)]
pub(crate) struct Page {
    limit: Option<i64>,
}

/// One case waiting for a person, as the queue shows it.
#[derive(Debug)]
pub(crate) struct QueueItem {
    pub(crate) intent: IntentRecord,
    pub(crate) age_ms: i64,
    /// The first transfers to its address (its case pages the rest), each
    /// with the other open intents it could belong to.
    pub(crate) transfers: Vec<(CaseTransfer, Vec<i64>)>,
    /// All transfers to its address.
    pub(crate) transfers_total: i64,
}

/// Transfers a queue item shows; the case shows the rest, page by page.
const QUEUE_TRANSFERS: i64 = 5;

/// Every intent in `needs_review`, oldest first, with its age, its first
/// transfers and how many there are, and, for each transfer that does not count
/// toward it, the open intents it could belong to: read once for the API
/// and the console.
pub(crate) async fn queue_items(s: &ApiState, limit: i64) -> Result<Vec<QueueItem>, ApiError> {
    let now = s.ctx.clock.now_ms();
    let store = &s.ctx.store;
    let mut items = Vec::new();
    for intent in store.review_queue(limit).await? {
        let mut transfers = Vec::new();
        for t in store.case_transfers(intent.id, 0, QUEUE_TRANSFERS).await? {
            let candidates: Vec<i64> = store
                .candidate_intents(t.transfer_id, 10)
                .await?
                .iter()
                .map(|c| c.id)
                .filter(|c| *c != intent.id)
                .collect();
            transfers.push((t, candidates));
        }
        items.push(QueueItem {
            age_ms: now - intent.created_at_ms,
            transfers_total: store.case_transfer_count(intent.id).await?,
            intent,
            transfers,
        });
    }
    Ok(items)
}

/// Every intent in `needs_review`, oldest first, with its reason, its age,
/// its first transfers and how many there are, and, for each transfer that does not
/// count toward it, the open intents it could belong to.
pub(crate) async fn review_queue(
    State(s): State<ApiState>,
    headers: HeaderMap,
    ApiQuery(p): ApiQuery<Page>,
) -> Result<Json<Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Operator, Role::Support], "review_queue")?;
    let limit = in_range("limit", p.limit, 100, 1, 1000)?;
    let items: Vec<Value> = queue_items(&s, limit)
        .await?
        .iter()
        .map(|item| {
            let transfers: Vec<Value> = item
                .transfers
                .iter()
                .map(|(t, candidates)| {
                    let mut v = transfer_json(t);
                    v["candidate_intents"] = json!(candidates);
                    v
                })
                .collect();
            json!({
                "intent": IntentView::new(&item.intent, &s.ctx.settings),
                "reason": item.intent.reason,
                "exception": item.intent.exception.map(|e| e.as_str()),
                "age_ms": item.age_ms,
                "transfers": transfers,
                "transfers_total": item.transfers_total,
            })
        })
        .collect();
    let lost: Vec<Value> = s
        .ctx
        .store
        .lost_window_transfers(limit)
        .await?
        .iter()
        .map(|t| {
            json!({
                "transfer_id": t.transfer_id,
                "network": t.network,
                "asset": t.asset,
                "txid": t.txid,
                "to_address": t.to_address,
                "amount": t.amount,
                "block_height": t.block_height.to_string(),
                "address_marked_at_ms": t.marked_at_ms,
            })
        })
        .collect();
    let spam: Vec<Value> = s
        .ctx
        .store
        .spam_transfers(limit)
        .await?
        .iter()
        .map(|t| {
            json!({
                "transfer_id": t.transfer.id,
                "network": t.transfer.network.as_str(),
                "asset": t.transfer.asset.code(),
                "txid": t.transfer.txid,
                "index": t.transfer.index,
                "to_address": t.transfer.to,
                "from_address": t.transfer.from,
                "amount": t.transfer.amount.to_string(),
                "block_height": t.transfer.block_height.to_string(),
                "intent_id": t.intent_id,
                "reason": t.reason(),
            })
        })
        .collect();
    let gaps: Vec<Value> = s
        .ctx
        .store
        .open_balance_gaps(limit)
        .await?
        .iter()
        .map(super::balance_gaps::gap_json)
        .collect();
    Ok(Json(json!({
        "items": items,
        "lost_window_transfers": lost,
        "spam_transfers": spam,
        "balance_gaps": gaps,
    })))
}

/// One enabled network's watcher, as its last progress recorded it.
#[derive(Debug)]
pub(crate) struct WatcherHealth {
    pub(crate) network: Network,
    /// `None` until the watcher first records progress.
    pub(crate) status: Option<ChainStatus>,
    /// Heights an operator accepted it skips, never read: payments in them
    /// were never seen.
    pub(crate) gaps: Vec<ChainGap>,
}

impl WatcherHealth {
    /// Blocks between the node's tip and what paywatch has read.
    pub(crate) fn lag_blocks(&self) -> Option<u64> {
        let c = self.status.as_ref()?;
        c.tip_height
            .zip(c.cursor_height)
            .map(|(t, c)| t.saturating_sub(c))
    }
}

pub(crate) async fn watcher_health(s: &ApiState) -> Result<Vec<WatcherHealth>, ApiError> {
    let mut out = Vec::new();
    for network in s.ctx.settings.enabled_networks() {
        let status = s.ctx.store.chain_status(network).await?;
        let gaps = s.ctx.store.chain_gaps(network).await?;
        out.push(WatcherHealth {
            network,
            status,
            gaps,
        });
    }
    Ok(out)
}

/// Each enabled network's watcher: state, tip, cursor, final height, lag
/// and last error.
pub(crate) async fn watchers(
    State(s): State<ApiState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Operator, Role::Support], "watchers")?;
    let out: Vec<Value> = watcher_health(&s)
        .await?
        .iter()
        .map(|w| match &w.status {
            Some(c) => json!({
                "network": w.network.as_str(),
                "state": c.watcher_state,
                "tip_height": c.tip_height,
                "cursor_height": c.cursor_height,
                "final_height": c.final_height,
                "lag_blocks": w.lag_blocks(),
                "last_error": c.last_error,
                "updated_at_ms": c.updated_at_ms,
                "gaps": w.gaps.iter().map(gap_json).collect::<Vec<_>>(),
            }),
            None => json!({"network": w.network.as_str(), "state": "starting", "gaps": []}),
        })
        .collect();
    Ok(Json(json!({"watchers": out})))
}

/// A network this paywatch follows, from the path.
fn enabled_network(s: &ApiState, name: &str) -> Result<Network, ApiError> {
    let network: Network = name
        .parse()
        .map_err(|e| ApiError::not_found(format!("network: {e}")))?;
    if !s.ctx.settings.enabled_networks().contains(&network) {
        return Err(ApiError::not_found(format!(
            "network '{network}' is not enabled in this paywatch"
        )));
    }
    Ok(network)
}

fn gap_json(g: &ChainGap) -> Value {
    json!({
        "from_height": g.from_height.to_string(),
        "to_height": g.to_height.to_string(),
        "accepted_at_ms": g.accepted_at_ms,
        "accepted_by": g.accepted_by,
        "reason": g.reason,
    })
}

fn rescan_json(r: &RescanRequest) -> Value {
    // Heights as strings, as the request takes them: no client reads one
    // through a float.
    let text = |h: Option<u64>| h.map(|h| h.to_string());
    json!({
        "id": r.id,
        "network": r.network.as_str(),
        "state": r.state(),
        "from_height": r.from_height.to_string(),
        "to_height": text(r.to_height),
        "next_height": text(r.next_height),
        "requested_at_ms": r.requested_at_ms,
        "requested_by": r.requested_by,
        "started_at_ms": r.started_at_ms,
        "finished_at_ms": r.finished_at_ms,
        "blocks_read": r.blocks_read,
        "transfers_seen": r.transfers_seen,
        "transfers_added": r.transfers_added,
        "error": r.error,
    })
}

/// Queues a rescan of the network from a height: its watcher reads the
/// blocks from there to its cursor again and records what it had missed.
/// While one is pending, asking again answers it with 200.
pub(crate) async fn request_rescan(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(network): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let role = s
        .tokens
        .authorize(&headers, &[Role::Operator], "request_rescan")?;
    let network = enabled_network(&s, &network)?;
    let text = body(raw, &["from_height"])?.required("from_height")?;
    let from_height = text
        .parse::<u64>()
        .ok()
        .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "from_height: '{text}' is not a block height (a non-negative integer, as a string)"
            ))
        })?;
    let outcome = s
        .ctx
        .store
        .request_rescan(network, from_height, role.as_str(), s.ctx.clock.now_ms())
        .await?;
    match outcome {
        RescanOutcome::Queued(r) => {
            Ok((StatusCode::ACCEPTED, Json(rescan_json(&r))).into_response())
        }
        RescanOutcome::Pending(r) => Ok((StatusCode::OK, Json(rescan_json(&r))).into_response()),
        RescanOutcome::Refused(
            why @ (RescanRefusal::OutOfRange { .. } | RescanRefusal::Pruned { .. }),
        ) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "height_out_of_range",
            why.to_string(),
        )),
        RescanOutcome::Refused(why) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            why.to_string(),
        )),
    }
}

/// The network's rescan requests, newest first.
pub(crate) async fn rescans(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(network): Path<String>,
    ApiQuery(p): ApiQuery<Page>,
) -> Result<Json<Value>, ApiError> {
    s.tokens.authorize(&headers, &[Role::Operator], "rescans")?;
    let network = enabled_network(&s, &network)?;
    let limit = in_range("limit", p.limit, 20, 1, 200)?;
    let items: Vec<Value> = s
        .ctx
        .store
        .rescans(network, limit)
        .await?
        .iter()
        .map(rescan_json)
        .collect();
    Ok(Json(json!({"rescans": items})))
}

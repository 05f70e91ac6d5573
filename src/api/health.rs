//! Liveness and readiness, for load balancers and orchestrators: no token.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::ApiState;

/// The process answers.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The database answers too; without it nothing can be served.
pub(crate) async fn readyz(State(s): State<ApiState>) -> (StatusCode, Json<Value>) {
    match s
        .ctx
        .store
        .count_raw("SELECT COUNT(*) FROM chain_state")
        .await
    {
        Ok(_) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "why": "the database does not answer"})),
        ),
    }
}

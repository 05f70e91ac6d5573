//! Liveness and readiness, for load balancers and orchestrators: no token.
//!
//! Anyone may call them, so they must cost nothing: `/readyz` answers from
//! the last look at the database, taken at most about once a second by one
//! caller at a time (others answer from the look before), and a look that
//! finds no answer within a second counts as unavailable. A flood of
//! health checks thus never queues for the database's connections (one,
//! on SQLite) that requests need.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::ApiState;

/// How long one look at the database answers for.
const LOOK_FRESH: Duration = Duration::from_secs(1);
/// A look that takes longer finds the database unavailable.
const LOOK_TIMEOUT: Duration = Duration::from_secs(1);

/// The process answers.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The last look at the database, and the right to take the next.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    last: Mutex<Option<(Instant, bool)>>,
    looking: tokio::sync::Mutex<()>,
}

impl Readiness {
    fn last(&self) -> Option<(Instant, bool)> {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn ready(&self, s: &ApiState) -> bool {
        if let Some((_, ok)) = self.last().filter(|(at, _)| at.elapsed() < LOOK_FRESH) {
            return ok;
        }
        let _looking = match self.looking.try_lock() {
            Ok(guard) => guard,
            // Another caller is looking: the look before answers, or, with
            // none yet, the one under way.
            Err(_) => match self.last() {
                Some((_, ok)) => return ok,
                None => self.looking.lock().await,
            },
        };
        if let Some((_, ok)) = self.last().filter(|(at, _)| at.elapsed() < LOOK_FRESH) {
            return ok;
        }
        let look = s.ctx.store.count_raw("SELECT COUNT(*) FROM chain_state");
        let ok = matches!(tokio::time::timeout(LOOK_TIMEOUT, look).await, Ok(Ok(_)));
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), ok));
        ok
    }
}

/// The database answers too; without it nothing can be served.
pub(crate) async fn readyz(State(s): State<ApiState>) -> (StatusCode, Json<Value>) {
    if s.readiness.ready(&s).await {
        (StatusCode::OK, Json(json!({"status": "ready"})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "why": "the database does not answer"})),
        )
    }
}

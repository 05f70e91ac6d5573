//! Errors as JSON with a stable code and a message a person can act on.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tracing::error;

use super::auth::Role;
use crate::intents::IntentError;
use crate::store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `feed_pruned` only: where a reader resumes the feed.
    pub resume_after: Option<i64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            resume_after: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send 'Authorization: Bearer <token>' with a token configured for this paywatch",
        )
    }

    pub fn forbidden(role: Role) -> Self {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("the {} role may not call this endpoint", role.as_str()),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(match self.resume_after {
                Some(cursor) => json!({"error": {"code": self.code, "message": self.message,
                                                  "resume_after": cursor}}),
                None => json!({"error": {"code": self.code, "message": self.message}}),
            }),
        )
            .into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        // The database's own words stay in the log: they can name tables
        // and values a caller has no business seeing.
        error!(error = %e, "database error serving a request");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the database could not be reached or refused the write; nothing was changed, retry",
        )
    }
}

impl From<IntentError> for ApiError {
    fn from(e: IntentError) -> Self {
        let status = match e.code() {
            "method_unknown" | "amount_invalid" | "invalid_request" => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            "rate_unavailable" | "no_address_available" | "network_halted" => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            "conflict" | "too_many_open_intents" => StatusCode::CONFLICT,
            _ => {
                if let IntentError::Store(s) = e {
                    return s.into();
                }
                error!(error = %e, "internal error creating an intent");
                return ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "paywatch could not create the intent; nothing was issued, retry later",
                );
            }
        };
        ApiError::new(status, e.code(), e.to_string())
    }
}

//! Query strings read so that a bad one gets the API's JSON error naming
//! what was wrong (axum's own rejection answers in plain text), and a
//! number outside its documented range is refused rather than quietly
//! clamped to another request than the one sent.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// [`Query`] with the API's error.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(q)| ApiQuery(q))
            .map_err(|e| ApiError::invalid(format!("query string: {}", e.body_text())))
    }
}

/// `value` (or `default` when absent) if within `min..=max`; otherwise an
/// error naming `name` and the range.
pub(crate) fn in_range(
    name: &str,
    value: Option<i64>,
    default: i64,
    min: i64,
    max: i64,
) -> Result<i64, ApiError> {
    let v = value.unwrap_or(default);
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(ApiError::invalid(format!(
            "{name}: {v} is outside {min} to {max}"
        )))
    }
}

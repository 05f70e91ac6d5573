//! Marking a balance gap handled from the review queue: the same checks and
//! once-only write as `POST /v1/balance-gaps/{id}/handled`. Operators and
//! support both may: a gap is money to look up on the chain, not a support
//! decision on an intent, and marking it moves nothing.

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::csrf;
use super::html;
use super::session::{self, see_other, VIEWERS};
use crate::api::{mark_balance_gap_handled, ApiError, ApiState};

/// The form under each gap in the queue.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct HandledForm {
    actor: Option<String>,
    note: Option<String>,
}

pub(crate) async fn mark_handled(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Form<HandledForm>, FormRejection>,
) -> Result<Response, Response> {
    csrf::same_origin(&headers, "console_balance_gap_handled")?;
    let role = session::require(&s, &headers, VIEWERS, "console_balance_gap_handled")
        .await?
        .role;
    let page_error = |e: ApiError| html::error_page(&e, Some(role));
    let Form(form) = body.map_err(|e| {
        page_error(ApiError::invalid(format!(
            "the form could not be read ({e}); reload the review queue and try again"
        )))
    })?;
    // A refusal (a gap someone else marked first, a missing note) is its
    // own page naming why; nothing was written.
    let gap = mark_balance_gap_handled(&s, &id, form.actor.as_deref(), form.note.as_deref())
        .await
        .map_err(page_error)?;
    Ok(see_other(
        &format!("/console/queue?handled={}", gap.id),
        None,
    ))
}

//! A request turned away before it is served, and the answer it gets.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::html;
use super::session::{clear_both, see_other, VIEWERS};
use crate::api::{ApiError, Role};

/// Small on purpose: it is the error side of every page's first checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No valid session: to the login page, clearing a cookie whose token
    /// is no longer configured.
    SignIn { stale: bool },
    /// Signed in, but the role may not do this.
    Role(Role),
    /// A POST another site's page sent.
    CrossSite,
    /// The session could not be read (the database is down).
    Unavailable,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::SignIn { stale } => {
                let mut r = see_other("/console/login", None);
                if stale {
                    clear_both(&mut r);
                }
                r
            }
            Refusal::Unavailable => html::error_page(
                &ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the console cannot read its sessions now (is the database down?); try again",
                ),
                None,
            ),
            // Signed in, so say what is refused rather than send it to a
            // login it already passed; a storefront token gets no navigation.
            Refusal::Role(role) => html::error_page(
                &ApiError::forbidden(role),
                VIEWERS.contains(&role).then_some(role),
            ),
            Refusal::CrossSite => html::error_page(
                &ApiError::new(
                    StatusCode::FORBIDDEN,
                    "cross_site",
                    "this form was sent from another site; nothing was done. Open the \
                     console yourself and submit it there",
                ),
                None,
            ),
        }
    }
}

// Lets a handler that answers `Result<Response, Response>` use `?` on one.
impl From<Refusal> for Response {
    fn from(r: Refusal) -> Response {
        r.into_response()
    }
}

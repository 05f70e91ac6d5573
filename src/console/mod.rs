//! The operator console: a few server-rendered pages for people with an
//! operator or support token and a browser — an overview to start from, the
//! review queue, a case with support's actions, watcher health and search.
//!
//! No front-end build and no script: every page is HTML written here, every
//! form posts back here. Each page reads through the same functions as its
//! /v1 endpoint and each action goes through the same checks and store call
//! as `POST /v1/cases/{id}/actions`, so the console can neither show
//! something the API would not nor do something the API would refuse. The
//! routes live outside /v1 and outside the OpenAPI contract: they are pages
//! for people, not an interface for programs.

mod actions;
mod case;
mod chart;
mod csrf;
mod find;
mod gaps;
pub(crate) mod html;
mod login;
mod overview;
mod parts;
mod queue;
mod refusal;
mod session;
mod time;
mod watchers;

// UTC text as operators read it, for the accounting export too.
pub(crate) use session::carries_session;
pub(crate) use time::utc;

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::middleware::map_response;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::api::ApiState;

/// The console's routes, for [`crate::api::router`] to merge.
pub(crate) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/console", get(overview::page))
        .route("/console/overview", get(overview::page))
        .route("/console/queue", get(queue::page))
        .route(
            "/console/balance-gaps/{id}/handled",
            post(gaps::mark_handled),
        )
        .route("/console/login", get(login::page).post(login::submit))
        .route("/console/logout", post(login::logout))
        .route("/console/cases/{id}", get(case::page))
        .route("/console/cases/{id}/actions", post(actions::act))
        .route("/console/watchers", get(watchers::page))
        .route("/console/find", get(find::page))
        .layer(map_response(harden))
}

/// Headers every console answer carries. Pages run no script and load
/// nothing, so the policy allows nothing but their inline style and forms
/// posting back here; no other site may frame them (clickjacking an
/// "Accept" button); nothing is cached, since pages show payment data; and
/// no URL leaks to another site in a Referer.
async fn harden(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

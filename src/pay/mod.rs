//! The hosted payment page at `/pay/{view token}`: method, network,
//! address, amount, QR code, the time left and the status as it changes,
//! with the warnings a payer needs. Server-rendered, one small script, no
//! build step. It reads through the same view as `GET /v1/view/{token}`,
//! so the page shows nothing that endpoint would not.

mod page;
mod words;

use axum::extract::{Path, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::middleware::map_response;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::api::{customer_view_of, ApiState};

const SCRIPT: &str = include_str!("pay.js");

/// The page's routes, for [`crate::api::router`] to merge.
pub(crate) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/pay/{token}", get(pay_page))
        .route("/assets/pay.js", get(script))
        .layer(map_response(harden))
}

async fn pay_page(State(s): State<ApiState>, Path(token): Path<String>) -> Response {
    match customer_view_of(&s, &token).await {
        Ok(view) => Html(page::render(&view)).into_response(),
        Err(e) => (e.status, Html(page::refused(&e))).into_response(),
    }
}

async fn script() -> Response {
    ([(CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
}

/// The page loads its script, QR code and status stream from here and
/// nothing from anywhere else; no site may frame it (a payer tricked into
/// paying a look-alike); the view token in its URL is never sent on as a
/// Referer, and nothing is cached.
async fn harden(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self'; \
             style-src 'unsafe-inline'; form-action 'none'; frame-ancestors 'none'; \
             base-uri 'none'",
        ),
    );
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

//! How long the API takes to answer, per route and status class, for the
//! metrics listener. The route is axum's template (`/v1/intents/{id}`), so
//! the series stay few whatever callers ask for; a path no route matches
//! counts as `unmatched`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics::Histogram;

/// (route, status class) → latency. Process-wide, like the server itself:
/// one API per process.
type ByRoute = BTreeMap<(String, &'static str), Arc<Histogram>>;

static LATENCY: Mutex<ByRoute> = Mutex::new(BTreeMap::new());

/// Times every request that reaches a route or the fallback, throttled and
/// refused ones included.
pub(crate) async fn observe(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let class = match response.status().as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    let histogram = LATENCY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry((route, class))
        .or_default()
        .clone();
    histogram.observe(started.elapsed());
    response
}

/// Every (route, status class) answered so far, with its latency.
pub(crate) fn by_route() -> Vec<(String, &'static str, Arc<Histogram>)> {
    LATENCY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|((route, class), h)| (route.clone(), *class, h.clone()))
        .collect()
}

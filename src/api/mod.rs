//! The HTTP API under /v1: the storefront's intents and balance, with a
//! bearer token per role. The OpenAPI document is committed at
//! `openapi/v1.json` and served at /v1/openapi.json.

mod auth;
mod balance_gaps;
mod bounded_listener;
mod client_addr;
pub(crate) mod connections;
mod credits;
mod customer_view;
mod error;
mod events;
mod export;
mod health;
mod idle_connections;
mod intent_view;
mod keyed_cap;
pub(crate) mod latency;
mod live;
mod operator;
mod per_client;
mod query;
pub(crate) mod refusals;
mod storefront;
mod stream_budget;
mod support;
mod throttle;
mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::header::CONTENT_TYPE;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tracing::info;

pub use auth::{Caller, Role, TokenConfigError, TokenTable};
pub(crate) use balance_gaps::mark as mark_balance_gap_handled;
pub(crate) use customer_view::view_of as customer_view_of;
pub use customer_view::CustomerView;
pub use error::ApiError;
pub(crate) use intent_view::usd;
pub use intent_view::IntentView;
pub use throttle::AUTH_FAILURES_PER_MINUTE;

// What the operator console (crate::console) shares with the API, so a page
// and an endpoint read, check and act through the same code.
pub(crate) use operator::{queue_items, watcher_health, QueueItem};
pub(crate) use storefront::parse_id;
pub(crate) use support::{
    find_cases, load_case, perform_action, Acted, ActionRequest, CaseFile, Search,
};

use crate::app::Context;

/// The OpenAPI 3.1 document of /v1, as committed.
pub const OPENAPI: &str = include_str!("../../openapi/v1.json");

#[derive(Debug, Clone)]
pub struct ApiState {
    /// Behind an `Arc`: axum clones the state for every connection and
    /// every request, and a `Context` by value is a deep copy of the
    /// settings' maps, about 300 KB held per open connection.
    pub(crate) ctx: Arc<Context>,
    pub(crate) tokens: Arc<TokenTable>,
    /// Wakes the reconciler, so a declared payment is looked at now.
    pub(crate) recheck: Arc<Notify>,
    /// `/readyz`'s last look at the database.
    pub(crate) readiness: Arc<health::Readiness>,
    /// Failed token attempts per client address.
    pub(crate) failures: Arc<throttle::FailureThrottle>,
    /// The feed as it grows, for live status streams.
    pub(crate) live: Arc<live::FeedTail>,
    /// `api.trusted_proxies`: whose word on the client is believed.
    pub(crate) trusted: Arc<client_addr::TrustedProxies>,
    /// Live status streams open at once, at most `api.max_event_streams`,
    /// shared between payers and the storefront.
    pub(crate) streams: Arc<stream_budget::StreamBudget>,
}

impl ApiState {
    pub fn new(ctx: Context) -> Result<ApiState, TokenConfigError> {
        let tokens = Arc::new(TokenTable::from_settings(&ctx.settings.api)?);
        let failures = Arc::new(throttle::FailureThrottle::new(
            ctx.settings.api.auth_failures_per_minute,
        ));
        let streams = Arc::new(stream_budget::StreamBudget::new(
            ctx.settings.api.max_event_streams,
            ctx.settings.api.max_streams_per_page,
            ctx.settings.api.max_streams_per_client,
        ));
        let trusted =
            Arc::new(trusted_proxies(&ctx.settings.api).map_err(TokenConfigError::TrustedProxies)?);
        Ok(ApiState {
            trusted,
            streams,
            ctx: Arc::new(ctx),
            tokens,
            recheck: Arc::new(Notify::new()),
            readiness: Arc::default(),
            failures,
            live: Arc::default(),
        })
    }

    /// Declarations wake this reconciler rather than waiting for its pass.
    pub fn with_recheck(mut self, recheck: Arc<Notify>) -> ApiState {
        self.recheck = recheck;
        self
    }
}

/// Every route, each checking its caller's role.
pub fn router(state: ApiState) -> Router {
    let limit = state.ctx.settings.api.max_body_bytes;
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/v1/openapi.json", get(openapi))
        .route(
            "/v1/intents",
            post(storefront::create_intent).get(storefront::list_intents),
        )
        .route("/v1/intents/{id}", get(storefront::get_intent))
        .route(
            "/v1/intents/{id}/declared-paid",
            post(storefront::declare_paid),
        )
        .route("/v1/intents/{id}/events", get(live::intent_events))
        .route("/v1/intents/{id}/{file}", get(storefront::qr))
        .route("/v1/view/{token}", get(customer_view::get))
        .route("/v1/view/{token}/events", get(live::view_events))
        .route("/v1/view/{token}/{file}", get(customer_view::qr))
        .route("/v1/events", get(events::list))
        .route("/v1/cases", get(support::find))
        .route("/v1/cases/{id}", get(support::case))
        .route("/v1/cases/{id}/actions", post(support::act))
        .route("/v1/review-queue", get(operator::review_queue))
        .route(
            "/v1/balance-gaps/{id}/handled",
            post(balance_gaps::mark_handled),
        )
        .route("/v1/exports/settlements", get(export::settlements))
        .route("/v1/watchers", get(operator::watchers))
        .route(
            "/v1/networks/{network}/rescan",
            post(operator::request_rescan),
        )
        .route("/v1/networks/{network}/rescans", get(operator::rescans))
        .route("/v1/accounts/{account}/balance", get(storefront::balance))
        .route("/v1/accounts/{account}/ledger", get(storefront::ledger))
        .route("/v1/accounts/{account}/debits", post(storefront::debit))
        .route("/v1/accounts/{account}/credits", post(credits::credit_back))
        .merge(webhooks::routes())
        .merge(crate::console::routes())
        .merge(crate::pay::routes())
        .fallback(|| async { ApiError::not_found("no such endpoint; see /v1/openapi.json") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            throttle::throttle,
        ))
        // Outermost: a throttled answer is timed too.
        .layer(axum::middleware::from_fn(latency::observe))
        .with_state(state)
}

async fn openapi() -> ([(axum::http::HeaderName, &'static str); 1], &'static str) {
    ([(CONTENT_TYPE, "application/json")], OPENAPI)
}

/// Connections the kernel may hold for the API before it accepts them.
const ACCEPT_QUEUE: u32 = 4096;

/// Binds `api.listen`; `None` when no API is configured.
pub async fn bind(ctx: &Context) -> std::io::Result<Option<TcpListener>> {
    let listen = ctx.settings.api.listen.trim();
    if listen.is_empty() {
        return Ok(None);
    }
    // A deep accept queue: a burst of connections beyond
    // `api.max_connections` waits there instead of overflowing a short
    // default one into SYN retries (seconds each) and resets. The kernel
    // caps it at net.core.somaxconn.
    let mut last = None;
    for addr in tokio::net::lookup_host(listen).await? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(ACCEPT_QUEUE)) {
            Ok(listener) => return Ok(Some(listener)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("api.listen '{listen}' names no address"),
        )
    }))
}

/// `api.trusted_proxies`, read; an entry that is no address or CIDR is an
/// error naming it.
pub(crate) fn trusted_proxies(
    api: &crate::settings::ApiSettings,
) -> Result<client_addr::TrustedProxies, String> {
    client_addr::TrustedProxies::parse(&api.trusted_proxies, &api.trusted_proxy_header)
}

/// Serves until `shutdown` completes; requests in flight finish first.
pub async fn serve(
    listener: TcpListener,
    state: ApiState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    let api = &state.ctx.settings.api;
    let max_connections = api.max_connections;
    let limits = connections::Limits {
        max_connections,
        header_read_timeout: Duration::from_secs(api.header_read_timeout_secs.max(1)),
        request_timeout: Duration::from_secs(api.request_timeout_secs.max(1)),
        max_per_client: api.max_connections_per_client,
        uncapped: (*state.trusted).clone(),
    };
    info!(?addr, max_connections, ?limits, "HTTP API listening");
    connections::serve(listener, router(state), limits, shutdown).await
}

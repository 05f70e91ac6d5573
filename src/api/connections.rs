//! Serving HTTP connections so that slow or idle clients cannot take the
//! listener: axum's own `serve` runs hyper without a timer, which switches
//! off its header-read timeout, so a client that opens a connection and
//! sends nothing (or a byte a second) holds a connection slot for as long
//! as it likes, and 1,024 of them stop every request, health checks
//! included. Here:
//!
//! - hyper's header-read timeout, with a timer: a request's head must
//!   arrive within `header_read_timeout` of the connection opening or of
//!   the last answer, which also closes a keep-alive connection left idle;
//! - each request, body included, is answered within `request_timeout`
//!   (503 `request_timeout` past it);
//! - admission ([`BoundedListener`]): at most `max_connections`, at most
//!   `max_per_client` from one client, and the connection idle the longest
//!   closed to make room when every slot is taken;
//! - each request marks its connection busy until its response's last
//!   byte, so a live status stream is never taken for idle.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::{Frame, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use super::bounded_listener::{Admitted, BoundedListener};
use super::client_addr::TrustedProxies;
use super::error::ApiError;
use super::idle_connections::Busy;
use super::refusals::{refused, Refusal};

/// How long requests in flight may take to finish once shutdown begins.
const DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) header_read_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_per_client: usize,
    /// Peers not capped per client: trusted proxies, which carry every
    /// client's connections and cap their own clients.
    pub(crate) uncapped: TrustedProxies,
}

/// A request's mark on its connection, from the moment hyper hands it
/// over (before any middleware runs) to its response's last byte.
#[derive(Clone)]
struct BusyMark(Arc<Mutex<Option<Busy>>>);

/// Serves `app` on `listener` until `shutdown` completes; requests in
/// flight then get [`DRAIN`] to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut listener = BoundedListener::new(
        listener,
        limits.max_connections,
        limits.max_per_client,
        limits.uncapped.clone(),
    );
    let timeout = limits.request_timeout;
    let app = app
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| answer_within(timeout, req, next),
        ))
        .layer(axum::middleware::from_fn(busy_until_answered));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let admitted = tokio::select! {
            admitted = listener.accept() => admitted,
            () = &mut shutdown => break,
        };
        let Admitted { io, addr, places } = admitted;
        let activity = Arc::clone(&places.tracked.activity);
        let marks = Arc::clone(&activity);
        // Each request knows its client's address, as axum's own
        // `ConnectInfo` would give it: the failure throttle counts by it.
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(addr));
                req.extensions_mut()
                    .insert(BusyMark(Arc::new(Mutex::new(Some(marks.begin())))));
                req
            },
        ));
        let conn = builder.serve_connection(TokioIo::new(io), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            tokio::pin!(conn);
            loop {
                tokio::select! {
                    ended = &mut conn => {
                        // Timeouts and resets end connections all the time: not news.
                        if let Err(e) = ended {
                            debug!(client = %addr, error = %e, "connection ended");
                        }
                        break;
                    }
                    () = activity.close_asked() => {
                        // Between polls of the connection: no request can
                        // begin between this look and the close.
                        if activity.may_close() {
                            debug!(client = %addr, "idle connection closed to make room for another");
                            refused(Refusal::IdleClosed);
                            break;
                        }
                    }
                }
            }
            drop(places);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        warn!(
            drain_secs = DRAIN.as_secs(),
            "requests still in flight at shutdown were cut off"
        );
    }
    Ok(())
}
/// Hands the request's mark on its connection to the response body, which
/// drops it with its last byte (or when the client goes away).
async fn busy_until_answered(req: Request, next: Next) -> Response {
    let busy = req
        .extensions()
        .get::<BusyMark>()
        .and_then(|m| m.0.lock().unwrap_or_else(|e| e.into_inner()).take());
    let response = next.run(req).await;
    match busy {
        Some(busy) => response.map(|inner| Body::new(BusyBody { inner, _busy: busy })),
        None => response,
    }
}

/// A response body that keeps its connection busy until it is done.
struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl HttpBody for BusyBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

async fn answer_within(limit: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "request_timeout",
            format!(
                "the request was not answered within {} s; it may or may not have taken effect: \
                 ask again (with the same Idempotency-Key for a create or a debit)",
                limit.as_secs()
            ),
        )
        .into_response(),
    }
}

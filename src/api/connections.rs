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
//! - at most `max_per_client` connections from one client (an IPv6 host
//!   by its /64, as the failure throttle counts it): the
//!   next one is closed at once, so one client cannot fill the listener's
//!   slots ([`BoundedListener`]) that every other client needs.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::Listener;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tracing::{debug, warn};

use super::bounded_listener::BoundedListener;
use super::client_addr::{client_key, TrustedProxies};
use super::error::ApiError;

/// How long requests in flight may take to finish once shutdown begins.
const DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_per_client: usize,
    /// Peers not capped per client: trusted proxies, which carry every
    /// client's connections and cap their own clients.
    pub(crate) uncapped: TrustedProxies,
}

/// Serves `app` on `listener` until `shutdown` completes; requests in
/// flight then get [`DRAIN`] to finish.
pub(crate) async fn serve(
    mut listener: BoundedListener,
    app: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let timeout = limits.request_timeout;
    let app = app.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| answer_within(timeout, req, next),
    ));
    let per_client = PerClient::new(limits.max_per_client);
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (io, addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let held = if limits.uncapped.contains(addr.ip()) {
            None
        } else {
            let Some(held) = per_client.enter(addr) else {
                debug!(client = %addr.ip(), "too many connections from one client; closed");
                drop(io);
                continue;
            };
            Some(held)
        };
        // Each request knows its client's address, as axum's own
        // `ConnectInfo` would give it: the failure throttle counts by it.
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(addr));
                req
            },
        ));
        let conn = builder.serve_connection(TokioIo::new(io), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // Timeouts and resets end connections all the time: not news.
            if let Err(e) = conn.await {
                debug!(client = %addr, error = %e, "connection ended");
            }
            drop(held);
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

/// Open connections per client address.
#[derive(Clone)]
struct PerClient {
    max: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection counted against its client; uncounted when dropped.
struct Held {
    ip: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerClient {
    fn new(max: usize) -> PerClient {
        PerClient {
            max: max.max(1),
            open: Arc::default(),
        }
    }

    fn enter(&self, addr: SocketAddr) -> Option<Held> {
        let ip = client_key(addr.ip());
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Held {
            ip,
            open: Arc::clone(&self.open),
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_gets_at_most_its_share_and_gets_it_back() {
        let pc = PerClient::new(2);
        let a: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1000".parse().unwrap();
        let first = pc.enter(a).unwrap();
        let _second = pc.enter(a).unwrap();
        assert!(pc.enter(a).is_none(), "a third from the same address");
        assert!(pc.enter(b).is_some(), "another client is not held back");
        drop(first);
        assert!(pc.enter(a).is_some(), "a slot freed is free again");
    }

    /// Issue 38, found 3: the throttle counts an IPv6 client by its /64,
    /// which one host usually holds whole; the connection cap must too, or
    /// one host takes every connection from addresses of its /64.
    #[test]
    fn an_ipv6_host_is_one_client_across_its_64() {
        let pc = PerClient::new(2);
        let a: SocketAddr = "[2001:db8:1:2::1]:1000".parse().unwrap();
        let b: SocketAddr = "[2001:db8:1:2:ffff::9]:1000".parse().unwrap();
        let elsewhere: SocketAddr = "[2001:db8:1:3::1]:1000".parse().unwrap();
        let _first = pc.enter(a).unwrap();
        let _second = pc.enter(b).unwrap();
        assert!(
            pc.enter("[2001:db8:1:2::77]:1".parse().unwrap()).is_none(),
            "a third address of the same /64"
        );
        assert!(
            pc.enter(elsewhere).is_some(),
            "another /64 is another client"
        );
    }
}

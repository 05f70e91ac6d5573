//! Failed token attempts, counted per client address: past
//! `api.auth_failures_per_minute` (default [`AUTH_FAILURES_PER_MINUTE`]) in
//! a minute, every request from that
//! address that would need a token is refused for a minute, the right
//! token too, so a guess that happens to be right is not told so. Health
//! checks stay open.
//!
//! IPv6 clients are counted by their /64, which one host usually holds
//! whole. Behind a reverse proxy listed in `api.trusted_proxies` the
//! client it names is counted (client_addr.rs); behind one not listed,
//! every client is the proxy's address and a guesser there locks them all
//! out for a minute. Only a credential presented and refused counts: the
//! payer's public routes and health checks never do, so a guesser never
//! locks payers out.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::{info_span, warn, Instrument};

use super::client_addr::{client_ip, client_key};
use super::error::ApiError;
use super::refusals::{refused, Refusal};
use super::ApiState;

/// Failed attempts one client address may make in a minute, unless
/// configured; the request after the last of them is refused.
pub const AUTH_FAILURES_PER_MINUTE: u32 = 20;

const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most; past it, those whose minute is over are
/// forgotten first, so a flood of addresses cannot grow memory without bound.
const MAX_CLIENTS: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Failures {
    since: Instant,
    count: u32,
    blocked_until: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct FailureThrottle {
    limit: u32,
    /// Addresses remembered at most.
    capacity: usize,
    clients: Mutex<Clients>,
}

#[derive(Debug, Default)]
struct Clients {
    by_address: HashMap<IpAddr, Failures>,
    /// When the table was last swept of addresses whose minute is over:
    /// at most once a second, so a flood of addresses costs each failure
    /// constant work, not a scan of the whole table.
    swept_at: Option<Instant>,
}

impl FailureThrottle {
    pub(crate) fn new(limit: u32) -> FailureThrottle {
        FailureThrottle::with_capacity(limit, MAX_CLIENTS)
    }

    fn with_capacity(limit: u32, capacity: usize) -> FailureThrottle {
        FailureThrottle {
            limit: limit.max(1),
            capacity: capacity.max(1),
            clients: Mutex::default(),
        }
    }

    /// How long `ip` must still wait, if it is blocked.
    fn blocked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients
            .by_address
            .get(&client_key(ip))
            .and_then(|f| f.blocked_until)
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    fn failed(&self, ip: IpAddr, now: Instant) {
        let key = client_key(ip);
        let mut guard = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let clients = &mut *guard;
        if clients.by_address.len() >= self.capacity && !clients.by_address.contains_key(&key) {
            let due = clients
                .swept_at
                .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1));
            if due {
                clients.swept_at = Some(now);
                clients.by_address.retain(|_, f| {
                    now.duration_since(f.since) < WINDOW || f.blocked_until.is_some_and(|u| u > now)
                });
            }
            // Still full: one remembered address makes room, so the newest
            // guesser is always counted and the table never grows.
            if clients.by_address.len() >= self.capacity {
                if let Some(old) = clients.by_address.keys().next().copied() {
                    clients.by_address.remove(&old);
                }
            }
        }
        let f = clients.by_address.entry(key).or_insert(Failures {
            since: now,
            count: 0,
            blocked_until: None,
        });
        if now.duration_since(f.since) >= WINDOW {
            *f = Failures {
                since: now,
                count: 0,
                blocked_until: f.blocked_until.filter(|u| *u > now),
            };
        }
        f.count += 1;
        if f.count >= self.limit && f.blocked_until.is_none_or(|u| u <= now) {
            f.blocked_until = Some(now + WINDOW);
            warn!(client = %key, failures = f.count, "too many failed token attempts; refusing this client for a minute");
        }
    }
}

/// Whether a request presents a credential: a bearer token, the console's
/// session cookie, or a console sign-in. Only those are counted and
/// refused. Health checks never are, whatever a probe sends, and the
/// payer's public routes (view, live stream, page) take no credential, so
/// a guesser blocked for a minute never blocks a checkout behind the same
/// address.
fn presents_credential(req: &Request) -> bool {
    let path = req.uri().path();
    if matches!(path, "/healthz" | "/readyz")
        || path.starts_with("/v1/view/")
        || path.starts_with("/pay/")
    {
        return false;
    }
    let h = req.headers();
    h.contains_key(axum::http::header::AUTHORIZATION)
        || crate::console::carries_session(h)
        || path == "/console/login"
}

/// The client a request came from, as every per-client limit counts it:
/// behind a trusted proxy, the client the proxy names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Client(pub(crate) IpAddr);

/// The middleware: refuses a blocked client, and counts each 401.
pub(crate) async fn throttle(State(s): State<ApiState>, req: Request, next: Next) -> Response {
    let Some(peer) = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
    else {
        return next.run(req).await;
    };
    // Behind a proxy of ours, the client it names: one guesser through
    // nginx is throttled alone, not every client of the proxy.
    let ip = client_ip(peer, req.headers(), &s.trusted);
    let mut req = req;
    if !s.trusted.contains(peer) {
        // What a proxy of ours would say is anyone's to write otherwise:
        // gone before any handler (the console's origin check) reads it.
        req.headers_mut().remove("x-forwarded-host");
    }
    // Every log line of the request names the client, behind a proxy too;
    // later limits (live streams per client) read it from here.
    let span = info_span!("request", client = %ip);
    req.extensions_mut().insert(Client(ip));
    if !presents_credential(&req) {
        return next.run(req).instrument(span).await;
    }
    let now = Instant::now();
    if let Some(wait) = s.failures.blocked(ip, now) {
        refused(Refusal::TooManyFailures);
        let secs = wait.as_secs().max(1);
        let mut r = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failures",
            format!("too many failed token attempts from this address; try again in {secs} s"),
        )
        .into_response();
        r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
        return r;
    }
    let response = next.run(req).instrument(span).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        s.failures.failed(ip, now);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_blocked_past_the_limit_and_freed_after_a_minute() {
        let t = FailureThrottle::new(AUTH_FAILURES_PER_MINUTE);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let start = Instant::now();
        for _ in 1..AUTH_FAILURES_PER_MINUTE {
            t.failed(ip, start);
        }
        assert_eq!(t.blocked(ip, start), None);
        t.failed(ip, start);
        assert!(
            t.blocked(ip, start).is_some(),
            "the next request is refused"
        );
        assert!(t.blocked("10.0.0.2".parse().unwrap(), start).is_none());
        assert_eq!(t.blocked(ip, start + WINDOW + Duration::from_secs(1)), None);
    }

    /// Issue 38, found 4: a flood of addresses within one minute never
    /// grows the table past its bound, and the bound holds without a scan
    /// of the whole table on each failure.
    #[test]
    fn the_failure_table_stays_within_its_bound_under_a_flood_of_addresses() {
        let t = FailureThrottle::with_capacity(AUTH_FAILURES_PER_MINUTE, 4);
        let now = Instant::now();
        for i in 0..50u8 {
            t.failed(IpAddr::from([10, 0, 1, i]), now);
        }
        let held = t.clients.lock().unwrap().by_address.len();
        assert!(held <= 4, "{held} addresses held past a bound of 4");
        // The newest failing client is still counted, so a guesser cannot
        // hide behind a flood.
        let guesser: IpAddr = "10.9.9.9".parse().unwrap();
        for _ in 0..AUTH_FAILURES_PER_MINUTE {
            t.failed(guesser, now);
        }
        assert!(t.blocked(guesser, now).is_some());
    }

    /// Issue 38, found 1: only a credential presented counts. The payer's
    /// public routes (view, stream, page) never do, whatever cookie the
    /// browser carries, nor health checks, whatever header a probe sends.
    #[test]
    fn only_a_presented_credential_counts_and_public_routes_and_health_never_do() {
        let req = |method: &str, path: &str, headers: &[(&str, &str)]| {
            let mut b = Request::builder().method(method).uri(path);
            for (k, v) in headers {
                b = b.header(*k, *v);
            }
            b.body(axum::body::Body::empty()).unwrap()
        };
        let bearer = [("authorization", "Bearer pw_x")];
        let any_cookie = [("cookie", "_ga=1; theme=dark")];
        let session = [("cookie", "paywatch_session=ab")];
        assert!(presents_credential(&req("GET", "/v1/intents/1", &bearer)));
        assert!(presents_credential(&req("GET", "/console/queue", &session)));
        assert!(presents_credential(&req("POST", "/console/login", &[])));
        for (path, headers) in [
            ("/v1/view/abc", &any_cookie[..]),
            ("/v1/view/abc/events", &any_cookie[..]),
            ("/pay/abc", &any_cookie[..]),
            ("/v1/intents/1", &[][..]),
            ("/healthz", &bearer[..]),
            ("/readyz", &bearer[..]),
        ] {
            assert!(
                !presents_credential(&req("GET", path, headers)),
                "{path} {headers:?}"
            );
        }
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(other));
    }
}

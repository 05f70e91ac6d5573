//! Failed token attempts, counted per client address: past
//! `api.auth_failures_per_minute` (default [`AUTH_FAILURES_PER_MINUTE`]) in
//! a minute, every request from that
//! address that would need a token is refused for a minute, the right
//! token too, so a guess that happens to be right is not told so. Health
//! checks stay open.
//!
//! IPv6 clients are counted by their /64, which one host usually holds
//! whole. Behind a reverse proxy every client is the proxy's address, so a
//! guesser there locks every client out for a minute: let the proxy limit
//! its clients, or keep the storefront on an address of its own.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::warn;

use super::error::ApiError;
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
    clients: Mutex<HashMap<IpAddr, Failures>>,
}

/// The address failures are counted under: IPv4 as is, IPv6 by its /64.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                IpAddr::from(s)
            }
        },
    }
}

impl FailureThrottle {
    pub(crate) fn new(limit: u32) -> FailureThrottle {
        FailureThrottle {
            limit: limit.max(1),
            clients: Mutex::default(),
        }
    }

    /// How long `ip` must still wait, if it is blocked.
    fn blocked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients
            .get(&client_key(ip))
            .and_then(|f| f.blocked_until)
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    fn failed(&self, ip: IpAddr, now: Instant) {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if clients.len() >= MAX_CLIENTS {
            clients.retain(|_, f| {
                now.duration_since(f.since) < WINDOW || f.blocked_until.is_some_and(|u| u > now)
            });
        }
        let f = clients.entry(client_key(ip)).or_insert(Failures {
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
            warn!(client = %client_key(ip), failures = f.count, "too many failed token attempts; refusing this client for a minute");
        }
    }
}

/// Whether a request names a credential: a bearer token, a console
/// session, or a console sign-in. Only those are counted and refused.
fn presents_credential(req: &Request) -> bool {
    let h = req.headers();
    h.contains_key(axum::http::header::AUTHORIZATION)
        || h.contains_key(axum::http::header::COOKIE)
        || (req.uri().path().starts_with("/v1/") && req.uri().path() != "/v1/openapi.json")
        || req.uri().path() == "/console/login"
}

/// The middleware: refuses a blocked client, and counts each 401.
pub(crate) async fn throttle(State(s): State<ApiState>, req: Request, next: Next) -> Response {
    let Some(ip) = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
    else {
        return next.run(req).await;
    };
    if !presents_credential(&req) {
        return next.run(req).await;
    }
    let now = Instant::now();
    if let Some(wait) = s.failures.blocked(ip, now) {
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
    let response = next.run(req).await;
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

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(other));
    }
}

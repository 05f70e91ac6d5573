//! The console's session. Signing in with an operator or support token
//! starts a session kept in the database; the browser holds only its
//! random 256-bit id, and the database only that id's SHA-256. Each request
//! finds the session, checks it has not ended or expired (8 hours, a
//! shift), and checks that the token it was started with is still
//! configured for the same role, so removing a token from the
//! configuration ends its sessions at once, on every instance. Logout ends
//! the session on the server: a copy of the cookie is worth nothing after.
//!
//! The cookie is `HttpOnly` (no script reads it) and `SameSite=Strict` (no
//! other site's page sends it). Served over plain HTTP it is scoped to
//! `/console`; with `api.behind_tls` it is `__Host-paywatch_session`:
//! `Secure`, for this host only, path `/` (the prefix requires it; the /v1
//! API ignores cookies and takes bearer tokens only).

use axum::http::header::{COOKIE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::{error, warn};

use super::refusal::Refusal;
use crate::api::{ApiError, ApiState, Caller, Role, TokenTable};

const PLAIN_NAME: &str = "paywatch_session";
const TLS_NAME: &str = "__Host-paywatch_session";

/// A shift: a forgotten browser does not stay signed in for days.
const MAX_AGE_SECS: u32 = 8 * 3600;

/// Who may look at the console's pages; only support may act.
pub(crate) const VIEWERS: &[Role] = &[Role::Operator, Role::Support];

/// The session id in the request's console cookie, under the one name this
/// configuration sets. Behind TLS that is the `__Host-` cookie only: a
/// sibling subdomain can plant a plain-named cookie for the whole domain
/// ("cookie tossing"), never a `__Host-` one, so a planted cookie can
/// neither sign a support agent out nor into another session.
fn cookie_session(headers: &HeaderMap, behind_tls: bool) -> Option<String> {
    let wanted = if behind_tls { TLS_NAME } else { PLAIN_NAME };
    cookies(headers)
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value.to_owned())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Every `name=value` pair of the request's cookies.
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// Whether the request carries a console session cookie under either
/// name, well formed or not: a credential presented, for the throttle.
pub(crate) fn carries_session(headers: &HeaderMap) -> bool {
    cookies(headers).any(|(name, _)| name == PLAIN_NAME || name == TLS_NAME)
}

fn id_hash(session: &str) -> String {
    hex::encode(TokenTable::digest(session))
}

fn cookie(s: &ApiState, value: &str, max_age: u32) -> HeaderValue {
    let text = if s.ctx.settings.api.behind_tls {
        format!("{TLS_NAME}={value}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={max_age}")
    } else {
        format!("{PLAIN_NAME}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age}")
    };
    // Hex and fixed text only: always a valid header value.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Starts a session for `token` (already authorized as `caller`); the
/// `Set-Cookie` value that carries it.
pub(crate) async fn sign_in(
    s: &ApiState,
    token: &str,
    caller: &Caller,
) -> Result<HeaderValue, ApiError> {
    let mut id = [0u8; 32];
    getrandom::getrandom(&mut id).map_err(|e| {
        error!(error = %e, "no randomness for a console session");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "a session could not be started; try again",
        )
    })?;
    let session = hex::encode(id);
    let now = s.ctx.clock.now_ms();
    s.ctx
        .store
        .start_console_session(
            &id_hash(&session),
            caller.role.as_str(),
            &hex::encode(TokenTable::digest(token)),
            now,
            now + i64::from(MAX_AGE_SECS) * 1000,
        )
        .await?;
    Ok(cookie(s, &session, MAX_AGE_SECS))
}

/// Ends the request's session, if any; the `Set-Cookie` value that clears it.
pub(crate) async fn sign_out(s: &ApiState, headers: &HeaderMap) -> HeaderValue {
    if let Some(session) = cookie_session(headers, s.ctx.settings.api.behind_tls) {
        if let Err(e) = s
            .ctx
            .store
            .end_console_session(&id_hash(&session), s.ctx.clock.now_ms())
            .await
        {
            // The browser forgets it either way; the session still expires.
            warn!(error = %e, "a console session could not be ended in the database");
        }
    }
    cleared(s)
}

/// The `Set-Cookie` value that clears the cookie.
pub(crate) fn cleared(s: &ApiState) -> HeaderValue {
    cookie(s, "", 0)
}

/// Clears the cookie under both names, for answers given before the
/// settings are at hand (a browser ignores the `Secure` one over HTTP).
pub(crate) fn clear_both(r: &mut Response) {
    for v in [
        "paywatch_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        "__Host-paywatch_session=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0",
    ] {
        r.headers_mut()
            .append(SET_COOKIE, HeaderValue::from_static(v));
    }
}

/// 303 to `location`, setting `cookie` if given.
pub(crate) fn see_other(location: &str, cookie: Option<HeaderValue>) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(LOCATION, v);
    }
    if let Some(c) = cookie {
        r.headers_mut().insert(SET_COOKIE, c);
    }
    r
}

/// The signed-in caller if its role is one of `allowed`; otherwise why
/// not: no session, or one ended, expired or whose token is no longer
/// configured (to the login page), or a role not allowed here.
pub(crate) async fn require(
    s: &ApiState,
    headers: &HeaderMap,
    allowed: &[Role],
    route: &str,
) -> Result<Caller, Refusal> {
    let session = cookie_session(headers, s.ctx.settings.api.behind_tls)
        .ok_or(Refusal::SignIn { stale: false })?;
    let stale = Refusal::SignIn { stale: true };
    let found = s
        .ctx
        .store
        .console_session(&id_hash(&session), s.ctx.clock.now_ms())
        .await
        .map_err(|e| {
            warn!(route, error = %e, "console session could not be read");
            Refusal::Unavailable
        })?
        .ok_or(stale)?;
    let hash: [u8; 32] = hex::decode(&found.token_hash)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(stale)?;
    let caller = s
        .tokens
        .configured(&hash)
        .filter(|c| c.role.as_str() == found.role)
        .ok_or(stale)?;
    if !allowed.contains(&caller.role) {
        warn!(
            route,
            role = caller.role.as_str(),
            "refused: role not allowed here"
        );
        return Err(Refusal::Role(caller.role));
    }
    Ok(caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(text: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_str(text).unwrap());
        h
    }

    #[test]
    fn only_a_well_formed_session_id_is_read_from_the_configured_cookie() {
        let id = "ab".repeat(32);
        for (name, behind_tls) in [(PLAIN_NAME, false), (TLS_NAME, true)] {
            let h = with_cookie(&format!("other=1; {name}={id}; x=y"));
            assert_eq!(cookie_session(&h, behind_tls).as_deref(), Some(id.as_str()));
        }
        let h = with_cookie("paywatch_session=zz");
        assert_eq!(cookie_session(&h, false), None);
        assert_eq!(cookie_session(&HeaderMap::new(), false), None);
    }

    /// Issue 38, found 5: a sibling subdomain can plant a plain-named
    /// cookie for the parent domain, never a `__Host-` one. Behind TLS only
    /// the `__Host-` cookie is read, wherever a planted one stands.
    #[test]
    fn behind_tls_a_cookie_tossed_from_a_sibling_subdomain_is_never_read() {
        let (planted, real) = ("cd".repeat(32), "ab".repeat(32));
        let both = with_cookie(&format!("{PLAIN_NAME}={planted}; {TLS_NAME}={real}"));
        assert_eq!(cookie_session(&both, true).as_deref(), Some(real.as_str()));
        let only_planted = with_cookie(&format!("{PLAIN_NAME}={planted}"));
        assert_eq!(cookie_session(&only_planted, true), None);
        // Served over plain HTTP no browser keeps a `__Host-` cookie.
        assert_eq!(
            cookie_session(&with_cookie(&format!("{TLS_NAME}={real}")), false),
            None
        );
    }
}

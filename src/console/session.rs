//! The console's session: the token pasted at login, kept in a cookie and
//! checked again on every request through the API's own [`TokenTable`], in
//! constant time. Nothing is stored server-side, so a token removed from the
//! configuration ends its sessions at the next restart, and there is no
//! session table to leak.
//!
//! The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no
//! other site's page sends it) and scoped to `/console` (the /v1 API never
//! sees it: the API takes bearer tokens only). The token is hex-encoded so
//! any token, whatever its characters, is a valid cookie value. It is not
//! marked `Secure`, because paywatch serves plain HTTP on loopback or behind
//! a TLS proxy; browsers keep it to the origin it came from either way.
//!
//! [`TokenTable`]: crate::api::TokenTable

use axum::http::header::{COOKIE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::warn;

use super::refusal::Refusal;
use crate::api::{ApiState, Role};

const NAME: &str = "paywatch_console";

/// A shift: a forgotten browser does not stay signed in for days.
const MAX_AGE_SECS: u32 = 8 * 3600;

/// Who may look at the console's pages; only support may act.
pub(crate) const VIEWERS: &[Role] = &[Role::Operator, Role::Support];

/// The token in the request's console cookie.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == NAME)
        .and_then(|(_, value)| hex::decode(value).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|t| !t.is_empty())
}

/// The `Set-Cookie` value that signs a browser in with `token`.
pub(crate) fn sign_in(token: &str) -> HeaderValue {
    let value = format!(
        "{NAME}={}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={MAX_AGE_SECS}",
        hex::encode(token)
    );
    // Hex and fixed text only: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The `Set-Cookie` value that signs a browser out.
pub(crate) fn sign_out() -> HeaderValue {
    HeaderValue::from_static(
        "paywatch_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
    )
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

/// The signed-in role if it is one of `allowed`; otherwise why not: no
/// token or one no longer configured (to the login page), or a role not
/// allowed here.
pub(crate) fn require(
    s: &ApiState,
    headers: &HeaderMap,
    allowed: &[Role],
    route: &str,
) -> Result<Role, Refusal> {
    let token = cookie_token(headers).ok_or(Refusal::SignIn { stale: false })?;
    let role = s
        .tokens
        .authorize_token(&token, &Role::ALL, route)
        .map_err(|_| Refusal::SignIn { stale: true })?;
    if !allowed.contains(&role) {
        warn!(
            route,
            role = role.as_str(),
            "refused: role not allowed here"
        );
        return Err(Refusal::Role(role));
    }
    Ok(role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_carries_any_token_and_only_its_own() {
        let token = "tok;en =\"with\" odd chars é";
        let set = sign_in(token);
        let set = set.to_str().unwrap();
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
        assert!(set.contains("Path=/console"));
        let pair = set.split(';').next().unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("other=1; {pair}; x=y")).unwrap(),
        );
        assert_eq!(cookie_token(&h).as_deref(), Some(token));
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_static("paywatch_console=zz"));
        assert_eq!(cookie_token(&h), None);
        assert_eq!(cookie_token(&HeaderMap::new()), None);
    }
}

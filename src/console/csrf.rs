//! Cross-site request forgery: a POST another site's page made the browser
//! send is refused before anything is read or written.
//!
//! The session cookie is `SameSite=Strict`, so such a POST arrives without a
//! session anyway; this check is the second lock, and the only one for the
//! login form (no session yet: a forged login would sign the victim in as
//! the attacker). Browsers say where a request came from in
//! `Sec-Fetch-Site`; older ones only in `Origin`, compared with the host the
//! request was sent to. A client that sends neither is not a browser, so no
//! other site can be driving it.

use axum::http::header::{HOST, ORIGIN};
use axum::http::HeaderMap;
use tracing::warn;

use super::refusal::Refusal;

/// `Ok` for a POST from the console's own pages.
pub(crate) fn same_origin(headers: &HeaderMap, route: &str) -> Result<(), Refusal> {
    if cross_site(headers) {
        warn!(route, "refused: a form posted from another site");
        return Err(Refusal::CrossSite);
    }
    Ok(())
}

fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = text(headers, "sec-fetch-site") {
        // Trusted over `Origin`: a proxy that rewrites `Host` does not
        // change what the browser saw. `none` is the person's own action
        // (a typed address or bookmark).
        return !matches!(site, "same-origin" | "none");
    }
    let Some(origin) = text(headers, ORIGIN.as_str()) else {
        return false;
    };
    // The host the browser addressed, as a proxy passes it on, else its own.
    let host = text(headers, "x-forwarded-host").or_else(|| text(headers, HOST.as_str()));
    let origin_host = origin.split_once("://").map(|(_, h)| h);
    match (origin_host, host) {
        (Some(o), Some(h)) => !o.eq_ignore_ascii_case(h),
        // "null" (a sandboxed or file page) or no host to compare with.
        _ => true,
    }
}

/// A header's text; one that is not text matches nothing it is compared with.
fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_the_consoles_own_pages_may_post() {
        let host = ("host", "127.0.0.1:8080");
        for ok in [
            headers(&[host]),
            headers(&[host, ("sec-fetch-site", "same-origin")]),
            headers(&[host, ("origin", "http://127.0.0.1:8080")]),
            headers(&[
                ("host", "upstream:8080"),
                ("x-forwarded-host", "console.example"),
                ("origin", "https://console.example"),
            ]),
            // A proxy rewrote Host; the browser's own word decides.
            headers(&[
                ("host", "upstream:8080"),
                ("sec-fetch-site", "same-origin"),
                ("origin", "https://console.example"),
            ]),
        ] {
            assert!(!cross_site(&ok), "{ok:?}");
        }
        for bad in [
            headers(&[host, ("sec-fetch-site", "cross-site")]),
            headers(&[host, ("sec-fetch-site", "same-site")]),
            headers(&[
                host,
                ("sec-fetch-site", "cross-site"),
                ("origin", "http://127.0.0.1:8080"),
            ]),
            headers(&[host, ("origin", "http://evil.example")]),
            headers(&[host, ("origin", "http://127.0.0.1:8080.evil.example")]),
            headers(&[host, ("origin", "null")]),
            headers(&[("origin", "http://127.0.0.1:8080")]),
        ] {
            assert!(cross_site(&bad), "{bad:?}");
        }
    }
}

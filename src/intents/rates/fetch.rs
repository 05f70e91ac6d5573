//! One bounded GET of a rates answer, and reading its numbers exactly: the
//! parts every HTTP rate feed shares.

use std::time::Duration;

use rust_decimal::Decimal;
use serde_json::value::RawValue;

use super::http_json::MAX_RATE_BODY;

/// A client whose every request gives up after `timeout`: the bound on how
/// long a quote with nothing cached can wait.
pub(crate) fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!("paywatch/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// The body of a successful answer at `url`, at most [`MAX_RATE_BODY`]
/// bytes; otherwise why not, in words for an operator (never the URL,
/// whose path or query may hold a key).
pub(crate) async fn get(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    let status = response.status();
    if !status.is_success() {
        let html = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("html"));
        return Err(format!(
            "HTTP {status}{}",
            match (status.as_u16(), html) {
                (429, _) => " (rate limited)",
                (_, true) => " (an HTML error page)",
                _ => "",
            }
        ));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| e.without_url().to_string())?
    {
        if body.len() + chunk.len() > MAX_RATE_BODY {
            return Err(format!("the answer is larger than {MAX_RATE_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Parses a JSON answer; an HTML page (a proxy's or a CDN's error page
/// served with 200) is named as such rather than as a JSON syntax error.
pub(crate) fn json<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| {
        if body.trim_ascii_start().starts_with(b"<") {
            "an HTML page, not JSON".to_owned()
        } else {
            format!("bad JSON: {e}")
        }
    })
}

/// A JSON string or number as an exact decimal, read from its text: never
/// through a float.
pub(crate) fn decimal(raw: &RawValue) -> Result<Decimal, String> {
    decimal_text(raw.get().trim().trim_matches('"'))
}

pub(crate) fn decimal_text(text: &str) -> Result<Decimal, String> {
    Decimal::from_str_exact(text).map_err(|_| format!("'{text}' is not a decimal number"))
}

/// Unix seconds given as a JSON number or a string of digits.
pub(crate) fn unix_secs(raw: &RawValue) -> Result<i64, String> {
    let text = raw.get().trim().trim_matches('"');
    text.parse::<i64>()
        .map_err(|_| format!("timestamp '{text}' is not whole Unix seconds"))
}

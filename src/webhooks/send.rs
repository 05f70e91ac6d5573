//! One POST of one outbox row.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, USER_AGENT};
use reqwest::redirect::Policy;

use super::signature::signature;
use super::WebhookError;
use crate::settings::WebhookSettings;

/// How much of a refusing receiver's answer is kept in `last_error`.
const ERROR_BODY_BYTES: usize = 200;

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    Delivered {
        status: u16,
    },
    /// `status` is `None` when no answer came (timeout, refused connection).
    Failed {
        status: Option<u16>,
        error: String,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Sender {
    http: reqwest::Client,
    url: String,
    secret: Vec<u8>,
}

impl Sender {
    pub(crate) fn new(cfg: &WebhookSettings) -> Result<Sender, WebhookError> {
        let timeout = Duration::from_secs(cfg.timeout_secs);
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // A redirect is not a delivery: followed, a POST would turn into
            // a GET that drops the body, and a 2xx to it would count.
            .redirect(Policy::none())
            .build()
            .map_err(|e| WebhookError::Client(e.without_url()))?;
        Ok(Sender {
            http,
            url: cfg.url.trim().to_owned(),
            secret: cfg.secret.0.as_bytes().to_vec(),
        })
    }

    /// POSTs outbox row `outbox_id`'s `payload` as its delivery, signed at
    /// `timestamp_secs`.
    pub(crate) async fn send(&self, outbox_id: i64, payload: &str, timestamp_secs: i64) -> Attempt {
        let body = with_event_id(outbox_id, payload);
        let body = body.as_str();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("paywatch/", env!("CARGO_PKG_VERSION"))),
        );
        headers.insert("paywatch-delivery", HeaderValue::from(outbox_id));
        headers.insert("paywatch-timestamp", HeaderValue::from(timestamp_secs));
        let signed = signature(&self.secret, timestamp_secs, outbox_id, body);
        headers.insert(
            "paywatch-signature",
            HeaderValue::from_str(&signed).expect("hex is a valid header value"),
        );
        let answer = self
            .http
            .post(&self.url)
            .headers(headers)
            .body(body.to_owned())
            .send()
            .await;
        let mut response = match answer {
            Ok(r) => r,
            // Without the URL: it may carry credentials or a token.
            Err(e) => {
                return Attempt::Failed {
                    status: None,
                    error: describe(&e.without_url()),
                }
            }
        };
        let status = response.status();
        if status.is_success() {
            return Attempt::Delivered {
                status: status.as_u16(),
            };
        }
        let mut start = Vec::new();
        while start.len() < ERROR_BODY_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => start.extend_from_slice(&chunk),
                _ => break,
            }
        }
        start.truncate(ERROR_BODY_BYTES);
        let said = String::from_utf8_lossy(&start);
        let said = said.trim();
        Attempt::Failed {
            status: Some(status.as_u16()),
            error: if said.is_empty() {
                format!("HTTP {status}")
            } else {
                format!("HTTP {status}: {said}")
            },
        }
    }
}

/// reqwest's message with its causes: "error sending request" alone does
/// not say whether the connection was refused or the request timed out.
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        format!("timed out: {e}")
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        source = cause.source();
    }
    text
}

/// The payload with its outbox id as `event_id`: a receiver that keeps
/// bodies de-duplicates on what the signature covers, not only on a header.
fn with_event_id(outbox_id: i64, payload: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(payload) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.insert("event_id".into(), outbox_id.into());
            serde_json::Value::Object(map).to_string()
        }
        // Every payload paywatch writes is an object; anything else goes
        // out as it was stored rather than not at all.
        _ => payload.to_owned(),
    }
}

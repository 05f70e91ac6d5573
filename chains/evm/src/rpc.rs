//! JSON-RPC over alloy's client: single calls and batches, each bounded by
//! a timeout, with node refusals sorted into what to do about them.

use std::borrow::Cow;
use std::time::Duration;

use alloy_json_rpc::{RpcRecv, RpcSend};
use alloy_rpc_client::{BatchRequest, RpcClient, Waiter};
use alloy_transport::{TransportError, TransportErrorKind};

/// Why a call failed, sorted by what the caller can do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The node refused the size of the request or its answer: ask for less.
    #[error("the node refused the request size: {0}")]
    TooLarge(String),
    /// The node answered with a JSON-RPC error.
    #[error("node error {code}: {message}")]
    Node { code: i64, message: String },
    /// Unreachable, rate-limited, or the connection broke.
    #[error("transport: {0}")]
    Transport(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The node, or the HTTP client, gave up waiting for the answer (geth's
    /// `-32002 request timed out`, a read timeout): ask for less.
    #[error("timed out: {0}")]
    TimedOut(String),
    /// The provider throttles (HTTP 429, Infura's -32005 rate limits,
    /// Alchemy's compute units): wait and ask again, the same size.
    #[error("rate limited: {0}")]
    RateLimited(String),
    /// The answer is not what the method returns.
    #[error("unreadable answer: {0}")]
    Decode(String),
}

/// A node's JSON-RPC endpoint. Its URL may hold an API key, so only the
/// host is ever shown.
#[derive(Clone)]
pub struct Rpc {
    client: RpcClient,
    host: String,
    timeout: Duration,
}

impl std::fmt::Debug for Rpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rpc").field("host", &self.host).finish()
    }
}

impl Rpc {
    /// `requests_per_second` zero: no pacing of our own.
    pub fn http(url: &str, timeout: Duration, requests_per_second: u32) -> Result<Rpc, String> {
        let parsed: reqwest_alloy::Url = url
            .parse()
            .map_err(|e| format!("'{}' is not a URL: {e}", shown_host(url)))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "'{}' must be an http:// or https:// URL",
                shown_host(url)
            ));
        }
        let http = reqwest_alloy::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .timeout(timeout)
            .build()
            .map_err(|e| format!("HTTP client for {}: {e}", shown_host(url)))?;
        let host = shown_host(url);
        let is_local = alloy_transport::utils::guess_local_url(parsed.as_str());
        let transport = crate::paced_http::PacedHttp::new(
            http,
            parsed,
            std::sync::Arc::new(paywatch_core::Pacer::new(requests_per_second)),
            host.clone(),
        );
        Ok(Rpc {
            host,
            client: RpcClient::new(transport, is_local),
            timeout,
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub async fn call<P: RpcSend, R: RpcRecv>(
        &self,
        method: &'static str,
        params: P,
    ) -> Result<R, CallError> {
        let request = self.client.request(method, params);
        match tokio::time::timeout(self.timeout, request).await {
            Ok(answer) => answer.map_err(classify_error),
            Err(_) => Err(CallError::Timeout(self.timeout)),
        }
    }

    /// The same method with each of `params`, in one request.
    pub async fn batch<P: RpcSend, R: RpcRecv>(
        &self,
        method: &'static str,
        params: &[P],
    ) -> Result<Vec<Result<R, CallError>>, CallError> {
        let mut batch = self.new_batch();
        let waiters = params
            .iter()
            .map(|p| batch.add(method, p))
            .collect::<Result<Vec<_>, _>>()?;
        batch.send().await?;
        let mut out = Vec::with_capacity(waiters.len());
        for w in waiters {
            out.push(w.await.map_err(classify_error));
        }
        Ok(out)
    }

    pub fn new_batch(&self) -> Batch<'_> {
        Batch {
            inner: self.client.new_batch(),
            timeout: self.timeout,
        }
    }
}

/// Calls of several methods sent as one request.
#[derive(Debug)]
pub struct Batch<'a> {
    inner: BatchRequest<'a>,
    timeout: Duration,
}

impl Batch<'_> {
    pub fn add<P: RpcSend, R: RpcRecv>(
        &mut self,
        method: &'static str,
        params: &P,
    ) -> Result<Waiter<R>, CallError> {
        self.inner
            .add_call(Cow::Borrowed(method), params)
            .map_err(classify_error)
    }

    pub async fn send(self) -> Result<(), CallError> {
        match tokio::time::timeout(self.timeout, self.inner.send()).await {
            Ok(sent) => sent.map_err(classify_error),
            Err(_) => Err(CallError::Timeout(self.timeout)),
        }
    }
}

/// Providers refuse big asks in many words: Alchemy and Infura say "limit"
/// or "exceed", geth "too many", others answer HTTP 413.
pub(crate) fn classify_error(e: TransportError) -> CallError {
    match e {
        alloy_json_rpc::RpcError::ErrorResp(payload) => {
            let message = payload.message.to_string();
            if payload.code == 429 || names_a_rate_limit(&message) {
                CallError::RateLimited(message)
            } else if payload.code == -32002 || names_a_timeout(&message) {
                CallError::TimedOut(message)
            } else if payload.code == -32005 || names_a_size_limit(&message) {
                CallError::TooLarge(message)
            } else {
                CallError::Node {
                    code: payload.code,
                    message,
                }
            }
        }
        alloy_json_rpc::RpcError::NullResp => {
            CallError::Decode("null where a value was expected".into())
        }
        alloy_json_rpc::RpcError::DeserError { err, text } => {
            let mut text = text;
            text.truncate(200);
            CallError::Decode(format!("{err}: {text}"))
        }
        alloy_json_rpc::RpcError::Transport(TransportErrorKind::HttpError(http)) => {
            let mut body = http.body.clone();
            body.truncate(200);
            if http.status == 429 || names_a_rate_limit(&body) {
                CallError::RateLimited(format!("HTTP {}: {body}", http.status))
            } else if matches!(http.status, 408 | 504) {
                CallError::TimedOut(format!("HTTP {}: {body}", http.status))
            } else if http.status == 413 || names_a_size_limit(&body) {
                CallError::TooLarge(format!("HTTP {}: {body}", http.status))
            } else {
                CallError::Transport(format!("HTTP {}: {body}", http.status))
            }
        }
        alloy_json_rpc::RpcError::Transport(TransportErrorKind::Custom(err))
            if err
                .downcast_ref::<reqwest_alloy::Error>()
                .is_some_and(|e| e.is_timeout()) =>
        {
            CallError::TimedOut("the HTTP client's timeout".into())
        }
        other => CallError::Transport(other.to_string()),
    }
}

/// Each client says it ran out of time in its own words: geth and erigon
/// stop the tracer with "execution timeout", reth's timeout inspector says
/// "timeout during evm execution", nethermind cancels the request with
/// "Request was canceled due to enabled timeout." (-32016), and geth's
/// server "request timed out" (-32002).
pub(crate) fn names_a_timeout(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "timed out",
        "execution timeout",
        "timeout during evm execution",
        "due to enabled timeout",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// Throttling, told apart from size refusals that use the same codes:
/// Infura's -32005 says "rate limited" or "request count exceeded",
/// Alchemy's "exceeded its compute units per second capacity".
fn names_a_rate_limit(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "rate limit",
        "rate-limit",
        "request rate",
        "request count",
        "compute units",
        "too many requests",
        "throughput",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// Whether a batch's failed answers, taken together, refuse its size: one
/// size error anywhere (geth answers a too-large batch with one error and
/// leaves the other calls unanswered), or no call answered at all with every
/// one missing (a single error object with a null id answers none of them).
pub(crate) fn size_refusal<'a>(errors: impl Iterator<Item = &'a CallError>) -> Option<String> {
    let mut all_missing = true;
    let mut any = false;
    for e in errors {
        any = true;
        match e {
            CallError::TooLarge(why) => return Some(why.clone()),
            CallError::Transport(why) if why.contains("missing response") => {}
            _ => all_missing = false,
        }
    }
    (any && all_missing).then(|| "the node answered none of the batch's calls".to_owned())
}

fn names_a_size_limit(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "limit",
        "exceed",
        "too many",
        "too large",
        "more than",
        "response size",
        "batch size",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// scheme://host:port of a URL, without path, query or credentials.
pub(crate) fn shown_host(url: &str) -> String {
    paywatch_core::shown_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_an_api_key_shows_only_its_host() {
        assert_eq!(
            shown_host("https://user:pw@eth-mainnet.example.com/v2/SECRETKEY?x=1"),
            "https://eth-mainnet.example.com"
        );
        assert_eq!(shown_host("http://127.0.0.1:8545"), "http://127.0.0.1:8545");
    }

    #[test]
    fn throttling_is_told_apart_from_size_refusals() {
        for m in [
            "daily request count exceeded, request rate limited",
            "project ID request rate exceeded",
            "Your app has exceeded its compute units per second capacity",
            "Too Many Requests",
        ] {
            assert!(names_a_rate_limit(m), "{m}");
        }
        for m in [
            "query returned more than 10000 results",
            "batch size too large",
        ] {
            assert!(!names_a_rate_limit(m), "{m}");
        }
    }

    #[test]
    fn provider_size_refusals_are_told_apart_from_other_errors() {
        for m in [
            "query returned more than 10000 results",
            "Log response size exceeded",
            "batch size too large",
            "too many requests in batch",
        ] {
            assert!(names_a_size_limit(m), "{m}");
        }
        assert!(!names_a_size_limit("execution reverted"));
    }

    #[test]
    fn each_clients_trace_timeout_is_a_timeout() {
        let error = |code: i64, message: &str| {
            let payload = alloy_json_rpc::ErrorPayload {
                code,
                message: message.to_owned().into(),
                data: None,
            };
            classify_error(alloy_json_rpc::RpcError::ErrorResp(payload))
        };
        for (code, message) in [
            // geth and erigon: the tracer stopped at its timeout
            (-32000, "execution timeout"),
            // reth (revm-inspectors' timeout inspector)
            (-32000, "timeout during evm execution"),
            // nethermind: the request's own deadline
            (-32016, "Request was canceled due to enabled timeout."),
        ] {
            assert!(
                matches!(error(code, message), CallError::TimedOut(_)),
                "{message}: {:?}",
                error(code, message)
            );
        }
        assert!(matches!(
            error(-32000, "execution reverted"),
            CallError::Node { .. }
        ));
    }
}

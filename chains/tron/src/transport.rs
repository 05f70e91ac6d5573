//! What every request to a Tron node or hosted provider carries and waits
//! for: the configured metadata (an API key such as TronGrid's
//! `TRON-PRO-API-KEY`), its turn under the provider's budget
//! (`rpc.requests_per_second`), and after a throttled answer
//! (`RESOURCE_EXHAUSTED`, or HTTP 429 from a proxy) a pause that every
//! request to that provider waits out: the `Retry-After` it names, else one
//! that doubles from a second while the throttling lasts.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use paywatch_core::Pacer;
use tonic::body::BoxBody;
use tonic::codegen::http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use tonic::codegen::http::{HeaderMap, Request, Response, StatusCode};
use tracing::warn;

/// The first pause after a throttled answer, doubled while they go on.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
/// The longest pause: past it the watcher's own backoff takes over.
const MAX_PAUSE: Duration = Duration::from_secs(60);
/// gRPC's RESOURCE_EXHAUSTED, as `grpc-status` carries it.
const RESOURCE_EXHAUSTED: &str = "8";

/// Metadata for every request, checked when the configuration is read.
pub(crate) type Metadata = Arc<[(HeaderName, HeaderValue)]>;

/// Reads `(name, value)` pairs as gRPC metadata; names the pair that is
/// not one.
pub(crate) fn metadata(pairs: &[(String, String)]) -> Result<Metadata, String> {
    pairs
        .iter()
        .map(|(name, value)| {
            let n = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|e| format!("header name {name:?}: {e}"))?;
            // Never echo a value: it is usually a key.
            let v = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of header {name:?} is not valid in a header"))?;
            Ok((n, v))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Arc::from)
}

#[derive(Debug)]
pub(crate) struct Budget {
    pub(crate) pacer: Pacer,
    /// Throttled answers in a row.
    throttled: AtomicU32,
    host: String,
}

impl Budget {
    pub(crate) fn new(requests_per_second: u32, host: String) -> Budget {
        Budget {
            pacer: Pacer::new(requests_per_second),
            throttled: AtomicU32::new(0),
            host,
        }
    }

    /// Looks at an answer's head: a throttled one pauses every request.
    fn answered(&self, status: StatusCode, headers: &HeaderMap) {
        let grpc_status = headers.get("grpc-status").and_then(|v| v.to_str().ok());
        let throttled =
            status == StatusCode::TOO_MANY_REQUESTS || grpc_status == Some(RESOURCE_EXHAUSTED);
        if !throttled {
            if status.is_success() && grpc_status.is_none_or(|s| s == "0") {
                self.throttled.store(0, Ordering::Relaxed);
            }
            return;
        }
        let streak = self.throttled.fetch_add(1, Ordering::Relaxed);
        let wait = retry_after(headers).unwrap_or_else(|| {
            FIRST_PAUSE
                .saturating_mul(1u32 << streak.min(6))
                .min(MAX_PAUSE)
        });
        warn!(host = %self.host, wait_secs = wait.as_secs(), in_a_row = streak + 1,
            "the provider is throttling paywatch; every request waits");
        self.pacer.pause(wait);
    }
}

/// `Retry-After` in seconds, at most [`MAX_PAUSE`].
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    paywatch_core::retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, MAX_PAUSE)
}

/// A gRPC channel with the metadata, the pacing and the pauses.
#[derive(Debug, Clone)]
pub(crate) struct Paced<S> {
    inner: S,
    metadata: Metadata,
    budget: Arc<Budget>,
}

impl<S> Paced<S> {
    pub(crate) fn new(inner: S, metadata: Metadata, budget: Arc<Budget>) -> Paced<S> {
        Paced {
            inner,
            metadata,
            budget,
        }
    }
}

impl<S, B> tower::Service<Request<BoxBody>> for Paced<S>
where
    S: tower::Service<Request<BoxBody>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<BoxBody>) -> Self::Future {
        for (name, value) in self.metadata.iter() {
            req.headers_mut().insert(name.clone(), value.clone());
        }
        // The clone made ready is the one that calls (tower's rule).
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        let budget = Arc::clone(&self.budget);
        Box::pin(async move {
            budget.pacer.acquire().await;
            let response = ready.call(req).await?;
            budget.answered(response.status(), response.headers());
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_names_what_is_wrong_and_never_the_value() {
        let ok = metadata(&[("TRON-PRO-API-KEY".into(), "k-1".into())]).unwrap();
        assert_eq!(ok[0].0.as_str(), "tron-pro-api-key");
        let err = metadata(&[("bad name".into(), "x".into())]).unwrap_err();
        assert!(err.contains("bad name"), "{err}");
        let err = metadata(&[("x-token".into(), "secret\nvalue".into())]).unwrap_err();
        assert!(err.contains("x-token") && !err.contains("secret"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn throttled_answers_pause_for_longer_until_one_goes_through() {
        let budget = Budget::new(0, "node".into());
        let mut throttled = HeaderMap::new();
        throttled.insert("grpc-status", HeaderValue::from_static("8"));
        let start = tokio::time::Instant::now();
        budget.answered(StatusCode::OK, &throttled);
        budget.pacer.acquire().await;
        assert_eq!(start.elapsed(), FIRST_PAUSE);
        budget.answered(StatusCode::OK, &throttled);
        let second = tokio::time::Instant::now();
        budget.pacer.acquire().await;
        assert_eq!(second.elapsed(), FIRST_PAUSE * 2, "doubled");
        budget.answered(StatusCode::OK, &HeaderMap::new());
        budget.answered(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new());
        let third = tokio::time::Instant::now();
        budget.pacer.acquire().await;
        assert_eq!(third.elapsed(), FIRST_PAUSE, "a success starts over");
        let mut named = HeaderMap::new();
        named.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        budget.answered(StatusCode::TOO_MANY_REQUESTS, &named);
        let fourth = tokio::time::Instant::now();
        budget.pacer.acquire().await;
        assert_eq!(
            fourth.elapsed(),
            Duration::from_secs(7),
            "as the provider asked"
        );
    }
}

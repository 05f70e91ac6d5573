//! alloy's HTTP transport, with two things a hosted provider needs and
//! alloy's own does not do: requests start no faster than the provider's
//! budget (`rpc.requests_per_second`), and a 429's `Retry-After` holds back
//! every request to that provider until it has passed. alloy's transport
//! drops the response's headers, so the wait the provider asked for would
//! be lost.

use std::sync::Arc;
use std::task;
use std::time::Duration;

use alloy_json_rpc::{RequestPacket, ResponsePacket};
use alloy_transport::{TransportError, TransportErrorKind, TransportFut, TransportResult};
use paywatch_core::Pacer;
use reqwest_alloy::header::RETRY_AFTER;
use reqwest_alloy::{Client, StatusCode, Url};
use tracing::warn;

/// The longest `Retry-After` honoured: a provider asking for more is
/// asked again sooner, and the watcher's backoff takes over from there.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

#[derive(Clone)]
pub(crate) struct PacedHttp {
    client: Client,
    url: Url,
    pacer: Arc<Pacer>,
    host: String,
}

impl PacedHttp {
    pub(crate) fn new(client: Client, url: Url, pacer: Arc<Pacer>, host: String) -> PacedHttp {
        PacedHttp {
            client,
            url,
            pacer,
            host,
        }
    }

    async fn send(self, req: RequestPacket) -> TransportResult<ResponsePacket> {
        self.pacer.acquire().await;
        let resp = self
            .client
            .post(self.url)
            .json(&req)
            .send()
            .await
            // reqwest names the URL in its errors, and a provider's URL
            // holds its API key (`…/v3/KEY`): errors reach logs and the API.
            .map_err(|e| TransportErrorKind::custom(e.without_url()))?;
        let status = resp.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            if let Some(wait) = retry_after(resp.headers()) {
                warn!(host = %self.host, wait_secs = wait.as_secs(), "the provider asks to wait");
                self.pacer.pause(wait);
            }
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| TransportErrorKind::custom(e.without_url()))?;
        if !status.is_success() {
            return Err(TransportErrorKind::http_error(
                status.as_u16(),
                String::from_utf8_lossy(&body).into_owned(),
            ));
        }
        serde_json::from_slice(&body)
            .map_err(|err| TransportError::deser_err(err, String::from_utf8_lossy(&body)))
    }
}

/// `Retry-After` in seconds, at most [`MAX_RETRY_AFTER`].
fn retry_after(headers: &reqwest_alloy::header::HeaderMap) -> Option<Duration> {
    paywatch_core::retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, MAX_RETRY_AFTER)
}

impl tower::Service<RequestPacket> for PacedHttp {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, _cx: &mut task::Context<'_>) -> task::Poll<Result<(), Self::Error>> {
        task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: RequestPacket) -> Self::Future {
        Box::pin(self.clone().send(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest_alloy::header::{HeaderMap, HeaderValue};

    /// A provider's URL holds its key; a failed request must not repeat it.
    #[tokio::test]
    async fn a_failed_request_does_not_name_the_url_and_its_key() {
        let url: Url = "http://127.0.0.1:9/v3/SECRETKEY123".parse().unwrap();
        let http = PacedHttp::new(
            Client::new(),
            url,
            Arc::new(Pacer::new(0)),
            "127.0.0.1:9".into(),
        );
        let req = alloy_json_rpc::Request::new("eth_blockNumber", 1u64.into(), ());
        let packet = RequestPacket::Single(req.serialize().unwrap());
        let err = http.send(packet).await.unwrap_err().to_string();
        assert!(!err.contains("SECRETKEY123"), "{err}");
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_capped() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static(" 2 "));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("86400"));
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
    }
}

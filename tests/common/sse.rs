//! A server-sent events client over a real HTTP connection, as a browser's
//! EventSource reads a stream: events split on blank lines, comments
//! (keep-alives) skipped, `id`, `event` and `data` fields kept.

use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
}

impl SseEvent {
    /// The id as the feed cursor it is.
    pub fn cursor(&self) -> i64 {
        self.id
            .as_deref()
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| panic!("event without a numeric id: {self:?}"))
    }
}

pub struct EventStream {
    response: reqwest::Response,
    buffer: String,
}

impl EventStream {
    /// Opens `url` with an optional bearer token and `Last-Event-ID`;
    /// panics unless it answers 200 `text/event-stream`.
    pub async fn open(url: &str, token: Option<&str>, last_event_id: Option<i64>) -> EventStream {
        let (status, stream) = EventStream::try_open(url, token, last_event_id).await;
        let stream = stream.unwrap_or_else(|body| panic!("{url} answered {status}: {body}"));
        stream
    }

    /// The status, and the stream or the body of a refusal.
    pub async fn try_open(
        url: &str,
        token: Option<&str>,
        last_event_id: Option<i64>,
    ) -> (StatusCode, Result<EventStream, String>) {
        EventStream::try_open_with(&Client::new(), url, token, last_event_id).await
    }

    /// As [`EventStream::try_open`], over `client`: one that trusts a test
    /// CA, say, or connects from an address of its own.
    pub async fn try_open_with(
        client: &Client,
        url: &str,
        token: Option<&str>,
        last_event_id: Option<i64>,
    ) -> (StatusCode, Result<EventStream, String>) {
        let mut req = client.get(url).header("accept", "text/event-stream");
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id.to_string());
        }
        let response = req.send().await.expect("an HTTP answer");
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if status != StatusCode::OK || !content_type.starts_with("text/event-stream") {
            return (status, Err(response.text().await.unwrap_or_default()));
        }
        (
            status,
            Ok(EventStream {
                response,
                buffer: String::new(),
            }),
        )
    }

    /// A stream already opened (with headers of the caller's own); panics
    /// unless it answered 200 `text/event-stream`.
    pub fn from_response(response: reqwest::Response) -> EventStream {
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(
            response.status() == StatusCode::OK && content_type.starts_with("text/event-stream"),
            "not an event stream: {} {content_type}",
            response.status()
        );
        EventStream {
            response,
            buffer: String::new(),
        }
    }

    /// The next event within `wait`; `None` if none came or the stream ended.
    pub async fn next(&mut self, wait: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse(&block) {
                    return Some(event);
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk()).await;
            match chunk {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }

    /// Events until `done` says the last one came, within `wait` in all.
    pub async fn until(
        &mut self,
        wait: Duration,
        done: impl Fn(&SseEvent) -> bool,
    ) -> Vec<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(e) = self.next(left).await else {
                panic!("the stream stopped before the awaited event; got {out:#?}");
            };
            let finished = done(&e);
            out.push(e);
            if finished {
                return out;
            }
        }
    }
}

fn parse(block: &str) -> Option<SseEvent> {
    let mut id = None;
    let mut event = "message".to_owned();
    let mut data = String::new();
    let mut any = false;
    for line in block.lines() {
        if line.starts_with(':') || line.is_empty() {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.to_owned()),
            "event" => event = value.to_owned(),
            "data" => {
                if any {
                    data.push('\n');
                }
                data.push_str(value);
                any = true;
            }
            _ => {}
        }
    }
    if !any {
        return None;
    }
    let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
    Some(SseEvent { id, event, data })
}

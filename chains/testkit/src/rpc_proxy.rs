//! A JSON-RPC proxy in front of one or more real nodes, as a load balancer
//! or a node of another version looks to paywatch: each HTTP request is
//! handed to a [`Route`], which forwards it (maybe changed) to a backend of
//! its choosing, or answers it itself.
//!
//! [`Alternate`] sends requests to each backend in turn, as a round-robin
//! balancer over nodes that disagree does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::litecoind::HarnessError;

/// The backends behind a proxy, as a [`Route`] reaches them.
#[derive(Debug)]
pub struct Backends {
    urls: Vec<String>,
    client: reqwest::Client,
}

/// One HTTP answer: status and JSON body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Backends {
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// Sends `body` to backend `i` at `path` with the client's credentials.
    pub async fn forward(
        &self,
        i: usize,
        path: &str,
        authorization: Option<&str>,
        body: &Value,
    ) -> Result<Answer, String> {
        let mut request = self
            .client
            .post(format!("{}{path}", self.urls[i]))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(auth) = authorization {
            request = request.header(reqwest::header::AUTHORIZATION, auth);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| e.to_string())?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok(Answer { status, body })
    }
}

/// What the proxy does with each request.
#[async_trait]
pub trait Route: Send + Sync + 'static {
    /// `body` is the request's JSON: one call or a batch.
    async fn handle(
        &self,
        backends: &Backends,
        path: &str,
        authorization: Option<&str>,
        body: Value,
    ) -> Answer;
}

/// Requests to each backend in turn: `turn` requests to one, then `turn` to
/// the next. A turn of 1 is per-request round robin; a longer one is a
/// balancer that keeps a client on one backend for a while (a sticky
/// session, or a failover and back).
#[derive(Debug)]
pub struct Alternate {
    turn: usize,
    next: AtomicUsize,
}

impl Alternate {
    pub fn new(turn: usize) -> Alternate {
        Alternate {
            turn: turn.max(1),
            next: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl Route for Alternate {
    async fn handle(
        &self,
        backends: &Backends,
        path: &str,
        authorization: Option<&str>,
        body: Value,
    ) -> Answer {
        let i = self.next.fetch_add(1, Ordering::SeqCst) / self.turn % backends.len().max(1);
        backends
            .forward(i, path, authorization, &body)
            .await
            .unwrap_or_else(|why| Answer {
                status: 502,
                body: Value::String(why),
            })
    }
}

/// A running proxy; it stops when dropped.
#[derive(Debug)]
pub struct RpcProxy {
    url: String,
    task: JoinHandle<()>,
}

impl RpcProxy {
    /// Listens on a free local port in front of `backends` (their RPC URLs).
    pub async fn start(backends: Vec<String>, route: impl Route) -> Result<RpcProxy, HarnessError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| HarnessError::io("binding the RPC proxy", e))?;
        let url = format!(
            "http://{}",
            listener
                .local_addr()
                .map_err(|e| HarnessError::io("the RPC proxy's address", e))?
        );
        let backends = Arc::new(Backends {
            urls: backends,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .pool_max_idle_per_host(0)
                .build()
                .map_err(|e| HarnessError::Transport {
                    method: "(proxy client)".into(),
                    detail: e.to_string(),
                })?,
        });
        let route: Arc<dyn Route> = Arc::new(route);
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (backends, route) = (backends.clone(), route.clone());
                tokio::spawn(serve(socket, backends, route));
            }
        });
        Ok(RpcProxy { url, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for RpcProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request per connection, answered with `Connection: close`.
async fn serve(mut socket: TcpStream, backends: Arc<Backends>, route: Arc<dyn Route>) {
    let Some((head, body)) = read_request(&mut socket).await else {
        return;
    };
    let path = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("/")
        .to_owned();
    let authorization = crate::http_request::header(&head, "authorization").map(str::to_owned);
    let answer = match serde_json::from_slice::<Value>(&body) {
        Ok(body) => {
            route
                .handle(&backends, &path, authorization.as_deref(), body)
                .await
        }
        Err(e) => Answer {
            status: 400,
            body: Value::String(e.to_string()),
        },
    };
    let text = answer.body.to_string();
    let response = format!(
        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        answer.status,
        text.len()
    );
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.shutdown().await;
}

async fn read_request(socket: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    crate::http_request::next_request(socket, &mut Vec::new())
        .await
        .ok()
        .flatten()
}

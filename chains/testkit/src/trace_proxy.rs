//! A JSON-RPC proxy in front of anvil that answers call traces the way a
//! real node does when it cannot trace: geth's per-transaction
//! `"execution timeout"`, a provider without the `debug_*` namespace
//! (-32601), a node whose state for the block is pruned ("missing trie
//! node"). Everything else is anvil's own answer, byte for byte.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How trace answers are spoiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceFault {
    /// geth's answer when one transaction's tracer runs past its timeout:
    /// the block trace succeeds, and that transaction's entry is
    /// `{"txHash": …, "error": "execution timeout"}` without a result.
    TxTimeout { tx: String },
    /// A provider that does not serve `debug_*`: geth's -32601 "the method
    /// … does not exist/is not available" for each trace call.
    MethodNotFound,
    /// A node that no longer holds the block's state: geth's -32000
    /// "missing trie node …" for each trace call.
    MissingTrieNode,
}

/// What the proxy saw of the trace calls.
#[derive(Debug, Default, Clone)]
pub struct TraceCalls {
    /// The options object of every `debug_traceBlockByHash` /
    /// `debug_traceBlockByNumber` call, in arrival order.
    pub options: Vec<Value>,
    /// Trace calls answered with the fault, by method.
    pub spoiled: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
struct State {
    fault: Option<TraceFault>,
    calls: TraceCalls,
}

/// The proxy; stops when dropped.
#[derive(Debug)]
pub struct TraceProxy {
    url: String,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl Drop for TraceProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl TraceProxy {
    /// A proxy on 127.0.0.1 in front of `upstream` (anvil's URL).
    pub async fn start(upstream: String, fault: Option<TraceFault>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(State {
            fault,
            calls: TraceCalls::default(),
        }));
        let http = reqwest::Client::new();
        let shared = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (upstream, http, state) = (upstream.clone(), http.clone(), shared.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve(conn, &upstream, &http, &state).await {
                        eprintln!("trace proxy connection: {e}");
                    }
                });
            }
        });
        Ok(TraceProxy { url, state, accept })
    }

    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// From the next request on; `None` lets traces through again.
    pub fn set_fault(&self, fault: Option<TraceFault>) {
        self.lock().fault = fault;
    }

    pub fn calls(&self) -> TraceCalls {
        self.lock().calls.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn is_trace(method: &str) -> bool {
    matches!(
        method,
        "debug_traceBlockByHash" | "debug_traceBlockByNumber" | "debug_traceTransaction"
    )
}

/// Requests on one keep-alive connection, one after the other.
async fn serve(
    mut conn: TcpStream,
    upstream: &str,
    http: &reqwest::Client,
    state: &Mutex<State>,
) -> Result<(), String> {
    let mut buf = Vec::new();
    while let Some((_, body)) = crate::http_request::next_request(&mut conn, &mut buf).await? {
        let (status, answer) = answer(body, upstream, http, state).await?;
        let mut out = format!(
            "HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        )
        .into_bytes();
        out.extend_from_slice(&answer);
        conn.write_all(&out).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Anvil's answer, with each trace call's answer spoiled by the fault.
async fn answer(
    body: Vec<u8>,
    upstream: &str,
    http: &reqwest::Client,
    state: &Mutex<State>,
) -> Result<(u16, Vec<u8>), String> {
    let request: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let calls: Vec<Value> = match &request {
        Value::Array(calls) => calls.clone(),
        single => vec![single.clone()],
    };
    let fault = {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        for c in calls
            .iter()
            .filter(|c| is_trace(c["method"].as_str().unwrap_or("")))
        {
            s.calls.options.push(c["params"][1].clone());
        }
        s.fault.clone()
    };
    let response = http
        .post(upstream)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("anvil: {e}"))?;
    let status = response.status().as_u16();
    let raw = response.bytes().await.map_err(|e| format!("anvil: {e}"))?;
    let Some(fault) = fault else {
        return Ok((status, raw.to_vec()));
    };
    let mut answer: Value = serde_json::from_slice(&raw).map_err(|e| format!("anvil: {e}"))?;
    let mut spoiled = Vec::new();
    let mut spoil = |one: &mut Value| {
        let Some(call) = calls.iter().find(|c| c["id"] == one["id"]) else {
            return;
        };
        let method = call["method"].as_str().unwrap_or("");
        if !is_trace(method) {
            return;
        }
        let id = one["id"].clone();
        let error = |code: i64, message: String| json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
        match &fault {
            TraceFault::MethodNotFound => {
                *one = error(
                    -32601,
                    format!("the method {method} does not exist/is not available"),
                );
            }
            TraceFault::MissingTrieNode => {
                *one = error(
                    -32000,
                    "missing trie node 4f3c9a2d6b8e1f0a7c5d3b9e2f1a8c6d4e0b7a9f3c5d1e8b2a6f4c0d9e7b1a3c \
                     (path ) state 0x4f3c9a2d6b8e1f0a7c5d3b9e2f1a8c6d4e0b7a9f3c5d1e8b2a6f4c0d9e7b1a3c \
                     is not available, not found"
                        .to_owned(),
                );
            }
            TraceFault::TxTimeout { tx } => {
                let Some(entries) = one.get_mut("result").and_then(Value::as_array_mut) else {
                    return;
                };
                let mut hit = false;
                for e in entries.iter_mut() {
                    if e["txHash"]
                        .as_str()
                        .is_some_and(|h| h.eq_ignore_ascii_case(tx))
                    {
                        *e = json!({ "txHash": e["txHash"].clone(), "error": "execution timeout" });
                        hit = true;
                    }
                }
                if !hit {
                    return;
                }
            }
        }
        spoiled.push(method.to_owned());
    };
    match &mut answer {
        Value::Array(items) => items.iter_mut().for_each(&mut spoil),
        one => spoil(one),
    }
    {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        for m in spoiled {
            *s.calls.spoiled.entry(m).or_default() += 1;
        }
    }
    Ok((
        status,
        serde_json::to_vec(&answer).map_err(|e| e.to_string())?,
    ))
}

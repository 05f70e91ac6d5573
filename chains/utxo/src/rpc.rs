//! JSON-RPC to bitcoind or litecoind, one call or a batch per HTTP request.

use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

/// How to log in to the node. The cookie is re-read whenever the node
/// refuses it, because the node writes a new one at every start.
#[derive(Clone)]
#[non_exhaustive]
pub enum RpcAuth {
    UserPassword { user: String, password: String },
    CookieFile(PathBuf),
}

impl fmt::Debug for RpcAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcAuth::UserPassword { user, .. } => write!(f, "UserPassword({user}, ***)"),
            RpcAuth::CookieFile(p) => write!(f, "CookieFile({})", p.display()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    #[error("node unreachable at {url}: {why}")]
    Unreachable { url: String, why: String },
    #[error("node refused the credentials ({0})")]
    Unauthorized(String),
    #[error("cannot read the RPC cookie {path}: {why}")]
    Cookie { path: String, why: String },
    #[error("node answered HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("{method}: node error {code}: {message}")]
    Node {
        method: String,
        code: i64,
        message: String,
    },
    #[error("{method}: unreadable answer: {why}")]
    Garbage { method: String, why: String },
}

/// Bitcoin Core's "not found" codes: a height past the tip, an unknown block.
pub const RPC_INVALID_PARAMETER: i64 = -8;
pub const RPC_INVALID_ADDRESS_OR_KEY: i64 = -5;

pub struct NodeRpc {
    http: reqwest::Client,
    url: String,
    auth: RpcAuth,
    cookie: Mutex<Option<String>>,
}

impl fmt::Debug for NodeRpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeRpc")
            .field("url", &redact(&self.url))
            .field("auth", &self.auth)
            .finish()
    }
}

#[derive(Deserialize)]
struct Response<T> {
    result: Option<T>,
    error: Option<NodeErrorBody>,
    id: Option<Value>,
}

#[derive(Deserialize)]
struct NodeErrorBody {
    code: i64,
    message: String,
}

impl NodeRpc {
    pub fn new(url: &str, auth: RpcAuth) -> NodeRpc {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(120))
            // No idle keep-alive: Bitcoin Core's `stop` waits for every
            // open HTTP connection, so a pooled one would hold up a node restart.
            .pool_max_idle_per_host(0)
            .build()
            .expect("a plain HTTP client builds");
        NodeRpc {
            http,
            url: url.trim_end_matches('/').to_owned(),
            auth,
            cookie: Mutex::new(None),
        }
    }

    pub fn url(&self) -> String {
        redact(&self.url)
    }

    /// The node's host, as its RPC URL names it: its P2P port is there too.
    pub(crate) fn host(&self) -> Option<String> {
        // IPv6 hosts come bracketed, as host:port needs them.
        reqwest::Url::parse(&self.url)
            .ok()?
            .host_str()
            .map(str::to_owned)
    }

    /// The same node and credentials at `path` past this URL, such as
    /// `/wallet/NAME` for a call to one wallet of several.
    pub(crate) fn at_path(&self, path: &str) -> NodeRpc {
        NodeRpc::new(&format!("{}{path}", self.url), self.auth.clone())
    }

    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, RpcError> {
        let body = json!({"jsonrpc": "1.0", "id": 0, "method": method, "params": params});
        let bytes = self.post(&body).await?;
        let resp: Response<T> = serde_json::from_slice(&bytes).map_err(|e| RpcError::Garbage {
            method: method.to_owned(),
            why: e.to_string(),
        })?;
        unpack(method, resp)
    }

    /// One request carrying `params.len()` calls of `method`; the answers
    /// come back in the order of `params`, each its own success or error.
    pub async fn batch<T: DeserializeOwned>(
        &self,
        method: &str,
        params: &[Value],
    ) -> Result<Vec<Result<T, RpcError>>, RpcError> {
        if params.is_empty() {
            return Ok(Vec::new());
        }
        let body: Vec<Value> = params
            .iter()
            .enumerate()
            .map(|(i, p)| json!({"jsonrpc": "1.0", "id": i, "method": method, "params": p}))
            .collect();
        let bytes = self.post(&Value::Array(body)).await?;
        let garbage = |why: String| RpcError::Garbage {
            method: method.to_owned(),
            why,
        };
        let answers: Vec<Response<T>> =
            serde_json::from_slice(&bytes).map_err(|e| garbage(e.to_string()))?;
        if answers.len() != params.len() {
            return Err(garbage(format!(
                "{} answers to {} calls",
                answers.len(),
                params.len()
            )));
        }
        let mut ordered: Vec<Option<Result<T, RpcError>>> = params.iter().map(|_| None).collect();
        for a in answers {
            let slot =
                a.id.as_ref()
                    .and_then(Value::as_u64)
                    .and_then(|i| usize::try_from(i).ok())
                    .filter(|i| *i < ordered.len() && ordered[*i].is_none())
                    .ok_or_else(|| garbage(format!("answer with unknown id {:?}", a.id)))?;
            ordered[slot] = Some(unpack(method, a));
        }
        Ok(ordered
            .into_iter()
            .map(|o| o.expect("every id answered once"))
            .collect())
    }

    async fn post(&self, body: &Value) -> Result<impl std::ops::Deref<Target = [u8]>, RpcError> {
        for attempt in 0..2 {
            let (user, password) = self.credentials(attempt > 0)?;
            let resp = self
                .http
                .post(&self.url)
                .basic_auth(user, Some(password))
                .json(body)
                .send()
                .await
                .map_err(|e| RpcError::Unreachable {
                    url: self.url(),
                    why: error_chain(&e.without_url()),
                })?;
            let status = resp.status();
            if status == reqwest::StatusCode::UNAUTHORIZED {
                if attempt == 0 && matches!(self.auth, RpcAuth::CookieFile(_)) {
                    continue; // the node restarted and wrote a new cookie
                }
                return Err(RpcError::Unauthorized(format!("{:?}", self.auth)));
            }
            let bytes = resp.bytes().await.map_err(|e| RpcError::Unreachable {
                url: self.url(),
                why: error_chain(&e.without_url()),
            })?;
            // Bitcoin Core answers errors with HTTP 500 and a JSON body.
            if !(status.is_success() || status.as_u16() == 500 || status.as_u16() == 404) {
                return Err(RpcError::Http {
                    status: status.as_u16(),
                    body: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
                });
            }
            return Ok(bytes);
        }
        unreachable!("the loop returns on its last attempt")
    }

    fn credentials(&self, reread: bool) -> Result<(String, String), RpcError> {
        match &self.auth {
            RpcAuth::UserPassword { user, password } => Ok((user.clone(), password.clone())),
            RpcAuth::CookieFile(path) => {
                let mut cached = self.cookie.lock().unwrap_or_else(|p| p.into_inner());
                if reread || cached.is_none() {
                    let text = std::fs::read_to_string(path).map_err(|e| RpcError::Cookie {
                        path: path.display().to_string(),
                        why: e.to_string(),
                    })?;
                    *cached = Some(text.trim().to_owned());
                }
                let cookie = cached.as_deref().unwrap_or_default();
                let (u, p) = cookie.split_once(':').ok_or_else(|| RpcError::Cookie {
                    path: path.display().to_string(),
                    why: "expected user:password".to_owned(),
                })?;
                Ok((u.to_owned(), p.to_owned()))
            }
        }
    }
}

fn unpack<T>(method: &str, resp: Response<T>) -> Result<T, RpcError> {
    if let Some(e) = resp.error {
        return Err(RpcError::Node {
            method: method.to_owned(),
            code: e.code,
            message: e.message,
        });
    }
    resp.result.ok_or_else(|| RpcError::Garbage {
        method: method.to_owned(),
        why: "neither result nor error".to_owned(),
    })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// A URL fit for logs: scheme, host and port; a wallet path or a password
/// in it stays out.
fn redact(url: &str) -> String {
    paywatch_core::shown_url(url)
}

//! The HTTP API served on a port of its own over a test's Context, and a
//! client that reads every answer as JSON (images as their type and size).

use std::collections::HashMap;
use std::sync::Arc;

use paywatch::api::{self, ApiState, TokenTable};
use paywatch::app::Context;
use paywatch::clock::Clock;
use paywatch::settings::Settings;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};

use super::Harness;

/// One token per role, as `context_with_role_tokens` configures them.
pub const STOREFRONT: &str = "shop-token-3f9a";
pub const OPERATOR: &str = "ops-token-81c2";
pub const SUPPORT: &str = "help-token-77d0";

/// The daemon's Context over a harness: its network enabled, its store,
/// clock, watch set, intents and reconciler, and the three role tokens.
pub fn context_with_role_tokens(h: &Harness) -> Context {
    let mut settings = Settings::load(None).expect("defaults");
    settings.database.url = h.db.url.clone();
    let n = settings
        .networks
        .get_mut(h.network.as_str())
        .expect("the harness network has settings");
    n.enabled = true;
    // The harness's chain is scripted: a development setup.
    n.source = "devchain".into();
    settings.devchain.enabled = true;
    for (role, token) in [
        ("storefront", STOREFRONT),
        ("operator", OPERATOR),
        ("support", SUPPORT),
    ] {
        settings
            .api
            .tokens
            .insert(role.into(), vec![TokenTable::hash_token(token)]);
    }
    let clock: Arc<dyn Clock> = h.clock.clone();
    Context {
        settings,
        store: h.store.clone(),
        clock,
        watch: HashMap::from([(h.network, h.watch.clone())]),
        intents: h.intents.clone(),
        reconciler: h.reconciler.clone(),
    }
}

pub struct ApiClient {
    pub base: String,
    http: Client,
}

impl ApiClient {
    /// Serves `ctx`'s API on 127.0.0.1 until the test ends.
    pub async fn serve(ctx: Context) -> ApiClient {
        // The accept queue `api.listen` gets (4,096), not tokio's default of
        // 1,024: a burst of connections waits there rather than having its
        // SYNs dropped and retried seconds later.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(4096).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = ApiState::new(ctx).expect("tokens");
        tokio::spawn(api::serve(listener, state, std::future::pending::<()>()));
        ApiClient {
            base,
            http: Client::new(),
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        key: Option<&str>,
        body: Option<String>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.expect("HTTP answer");
        let status = resp.status();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let bytes = resp.bytes().await.unwrap();
        if status.is_success() && content_type.starts_with("image/") {
            // An image: its type and size, and its first bytes for signatures.
            let head = String::from_utf8_lossy(&bytes[..bytes.len().min(8)]).into_owned();
            return (
                status,
                json!({"image": content_type, "bytes": bytes.len(), "head": head}),
            );
        }
        let text = String::from_utf8_lossy(&bytes);
        let v = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{path} answered {status} with non-JSON {text:?}: {e}"));
        (status, v)
    }
}

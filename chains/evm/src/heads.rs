//! A websocket `newHeads` subscription that only wakes the watcher. The
//! header it carries is never used: the watcher fetches by number and hash
//! over HTTP, as it does when polling, so a lying or lagging socket can
//! delay a block but never change one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::B256;
use alloy_pubsub::RawSubscription;
use alloy_rpc_client::RpcClient;
use alloy_transport_ws::WsConnect;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::rpc::shown_host;

const MAX_BACKOFF: Duration = Duration::from_secs(60);

pub(crate) struct HeadTrigger {
    url: String,
    signal: Arc<Notify>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for HeadTrigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadTrigger")
            .field("host", &shown_host(&self.url))
            .finish()
    }
}

impl HeadTrigger {
    pub(crate) fn new(url: &str) -> Result<HeadTrigger, String> {
        if !(url.starts_with("ws://") || url.starts_with("wss://")) {
            return Err(format!(
                "'{}' must be a ws:// or wss:// URL",
                shown_host(url)
            ));
        }
        Ok(HeadTrigger {
            url: url.to_owned(),
            signal: Arc::new(Notify::new()),
            task: Mutex::new(None),
        })
    }

    pub(crate) fn signal(&self) -> Arc<Notify> {
        self.signal.clone()
    }

    /// Started from the first `tip()`, inside the watcher's runtime; started
    /// again if it ever ended.
    pub(crate) fn ensure_running(&self) {
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            *task = Some(tokio::spawn(follow(self.url.clone(), self.signal.clone())));
        }
    }
}

impl Drop for HeadTrigger {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

async fn follow(url: String, signal: Arc<Notify>) {
    let host = shown_host(&url);
    let mut backoff = Duration::from_secs(1);
    loop {
        match subscribe(&url).await {
            Ok((_client, mut heads)) => {
                info!(%host, "following newHeads");
                backoff = Duration::from_secs(1);
                while let Ok(_) | Err(RecvError::Lagged(_)) = heads.recv().await {
                    signal.notify_one();
                }
                debug!(%host, "newHeads subscription closed");
            }
            Err(why) => warn!(%host, %why, "no newHeads subscription; polling meanwhile"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn subscribe(url: &str) -> Result<(RpcClient, RawSubscription), String> {
    let client = RpcClient::connect_pubsub(WsConnect::new(url))
        .await
        .map_err(|e| e.to_string())?;
    let id: B256 = client
        .request("eth_subscribe", ("newHeads",))
        .await
        .map_err(|e| e.to_string())?;
    let sub = client.get_raw_subscription(id).await;
    Ok((client, sub))
}

//! The node's own P2P announcements as the trigger for the watcher's next
//! step, as NBXplorer hears them: a version/verack handshake, `sendheaders`,
//! then every `inv` or `headers` (a new block, a new transaction) and
//! `ping` answered with `pong`. Only a trigger: what a block or the mempool
//! holds is still fetched and verified over RPC as at each poll, so
//! Litecoin's MWEB extension blocks are read as before.
//!
//! A port that cannot be reached, or a node that refuses the handshake,
//! leaves the source polling: said once in a log line (and in
//! [`PushState`], for the metric and `paywatch status`), then tried again
//! in the background with a growing pause.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bitcoin::hashes::{sha256d, Hash};
use bitcoin::p2p::address::Address;
use bitcoin::p2p::message_network::VersionMessage;
use bitcoin::p2p::ServiceFlags;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::NodeRpc;

/// `sendheaders` needs 70012; below `wtxidrelay` (70016), so transactions
/// are announced by txid without a further handshake.
const PROTOCOL_VERSION: u32 = 70015;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A node pings every two minutes; silence far beyond that is a dead link.
const SILENCE_LIMIT: Duration = Duration::from_secs(6 * 60);
/// Far above any message a node sends unasked (`headers` is 162 KB at most).
const MAX_PAYLOAD: usize = 32 << 20;
const MAX_RETRY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
enum P2pError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error(
        "the node speaks another network (magic {got:02x?}, expected {want:02x?}): wrong port?"
    )]
    Magic { got: [u8; 4], want: [u8; 4] },
    #[error("a {command} message of {len} bytes, beyond any a node sends")]
    TooLong { command: String, len: usize },
    #[error("a {0} message whose checksum does not match")]
    Checksum(String),
    #[error("the node refused paywatch: {0}")]
    Rejected(String),
    #[error("the node closed the connection")]
    Closed,
    #[error("{0}")]
    Chain(String),
}

/// Whether announcements arrive, for the watcher's metric and status.
#[derive(Debug, Default)]
pub struct PushState {
    connected: AtomicBool,
    /// Why the last try failed, while polling stands in.
    why: Mutex<Option<String>>,
}

impl PushState {
    /// Why announcements do not arrive, once a try failed; `None` while
    /// they arrive, and before the first try ended.
    pub fn fallback(&self) -> Option<String> {
        if self.connected.load(Ordering::Relaxed) {
            return None;
        }
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Listens for as long as it lives.
#[derive(Debug)]
pub(crate) struct P2pTrigger {
    task: tokio::task::JoinHandle<()>,
    pub(crate) signal: Arc<Notify>,
    pub(crate) state: Arc<PushState>,
}

impl Drop for P2pTrigger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The wire's magic bytes and default P2P port of a chain, by the name the
/// node's `getblockchaininfo` gives it.
pub(crate) fn wire(network: paywatch_core::Network, chain: &str) -> Option<([u8; 4], u16)> {
    use paywatch_core::Network::{Bitcoin, Litecoin};
    Some(match (network, chain) {
        (Bitcoin, "main") => ([0xf9, 0xbe, 0xb4, 0xd9], 8333),
        (Bitcoin, "test") => ([0x0b, 0x11, 0x09, 0x07], 18333),
        (Bitcoin, "testnet4") => ([0x1c, 0x16, 0x3f, 0x28], 48333),
        (Bitcoin, "signet") => ([0x0a, 0x03, 0xcf, 0x40], 38333),
        (Litecoin, "main") => ([0xfb, 0xc0, 0xb6, 0xdb], 9333),
        (Litecoin, "test") => ([0xfd, 0xd2, 0xc8, 0xf1], 19335),
        (Bitcoin | Litecoin, "regtest") => (
            [0xfa, 0xbf, 0xb5, 0xda],
            if network == Bitcoin { 18444 } else { 19444 },
        ),
        _ => return None,
    })
}

/// Where to listen: the node behind `rpc`, at `address` (host:port), or
/// by default at its RPC host on its chain's P2P port.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) rpc: Arc<NodeRpc>,
    pub(crate) network: paywatch_core::Network,
    pub(crate) address: Option<String>,
}

impl Target {
    /// The node's address and its chain's magic, asked of the node: a
    /// "test" chain may be any of several.
    async fn resolve(&self) -> Result<(String, [u8; 4]), P2pError> {
        let info: serde_json::Value = self
            .rpc
            .call("getblockchaininfo", serde_json::json!([]))
            .await
            .map_err(|e| P2pError::Chain(format!("getblockchaininfo: {e}")))?;
        let chain = info["chain"].as_str().unwrap_or_default();
        let (magic, port) = wire(self.network, chain).ok_or_else(|| {
            P2pError::Chain(format!(
                "no P2P magic known for {} chain {chain:?}",
                self.network
            ))
        })?;
        let address = match &self.address {
            Some(a) => a.clone(),
            None => {
                let host = self.rpc.host().ok_or_else(|| {
                    P2pError::Chain("the RPC URL names no host to find the P2P port at".into())
                })?;
                format!("{host}:{port}")
            }
        };
        Ok((address, magic))
    }
}

/// Starts listening; stops when the trigger is dropped.
pub(crate) fn spawn(target: Target) -> P2pTrigger {
    let signal = Arc::new(Notify::new());
    let state = Arc::new(PushState::default());
    let task = tokio::spawn(listen(target, signal.clone(), state.clone()));
    P2pTrigger {
        task,
        signal,
        state,
    }
}

async fn listen(target: Target, signal: Arc<Notify>, state: Arc<PushState>) {
    let mut retry = Duration::from_secs(1);
    let mut said_fallback = false;
    loop {
        let (address, ended) = match target.resolve().await {
            Ok((address, magic)) => {
                let ended = session(&address, magic, &signal, &state).await;
                (address, ended)
            }
            Err(e) => (target.address.clone().unwrap_or_default(), Err(e)),
        };
        let was_connected = state.connected.swap(false, Ordering::Relaxed);
        let why = match ended {
            Ok(()) => P2pError::Closed.to_string(),
            Err(e) => e.to_string(),
        };
        *state.why.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        if was_connected {
            retry = Duration::from_secs(1);
            said_fallback = false;
        }
        if said_fallback {
            debug!(%address, error = %why, "node P2P still unusable; polling");
        } else {
            warn!(alert = "p2p_fallback", %address, error = %why,
                  "the node's P2P announcements cannot be heard: new blocks and payments are seen at each poll until they can; trying again in the background");
            said_fallback = true;
        }
        // Whatever was announced meanwhile is looked at now.
        signal.notify_one();
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(MAX_RETRY);
    }
}

async fn session(
    address: &str,
    magic: [u8; 4],
    signal: &Notify,
    state: &PushState,
) -> Result<(), P2pError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| P2pError::Timeout(CONNECT_TIMEOUT))??;
    stream.set_nodelay(true)?;
    let peer = stream.peer_addr()?;
    let (mut reader, mut writer) = stream.into_split();
    send(&mut writer, magic, "version", &version(peer)).await?;
    let handshake = async {
        let (mut version_seen, mut verack_seen) = (false, false);
        while !(version_seen && verack_seen) {
            let (command, payload) = read(&mut reader, magic).await?;
            match command.as_str() {
                "version" => {
                    version_seen = true;
                    send(&mut writer, magic, "verack", &[]).await?;
                }
                "verack" => verack_seen = true,
                "ping" => send(&mut writer, magic, "pong", &payload).await?,
                "reject" => {
                    return Err(P2pError::Rejected(String::from_utf8_lossy(&payload).into()))
                }
                _ => {}
            }
        }
        Ok::<_, P2pError>(())
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| P2pError::Timeout(HANDSHAKE_TIMEOUT))??;
    // New blocks as headers, announced at once rather than by inv.
    send(&mut writer, magic, "sendheaders", &[]).await?;
    state.connected.store(true, Ordering::Relaxed);
    *state.why.lock().unwrap_or_else(|p| p.into_inner()) = None;
    info!(%address, "following the node's P2P announcements: blocks and payments are looked at as the node tells");
    // Anything announced before the link came up is looked at now.
    signal.notify_one();
    loop {
        let (command, payload) = tokio::time::timeout(SILENCE_LIMIT, read(&mut reader, magic))
            .await
            .map_err(|_| P2pError::Timeout(SILENCE_LIMIT))??;
        match command.as_str() {
            "inv" | "headers" | "cmpctblock" => signal.notify_one(),
            "ping" => send(&mut writer, magic, "pong", &payload).await?,
            _ => {}
        }
    }
}

/// paywatch's `version`: no services, relay on (transactions announced).
fn version(peer: SocketAddr) -> Vec<u8> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    let unspecified = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
    let nonce = u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            & u128::from(u64::MAX),
    )
    .unwrap_or(1);
    let mut v = VersionMessage::new(
        ServiceFlags::NONE,
        now,
        Address::new(&peer, ServiceFlags::NONE),
        Address::new(&unspecified, ServiceFlags::NONE),
        nonce,
        format!("/paywatch:{}/", env!("CARGO_PKG_VERSION")),
        0,
    );
    v.version = PROTOCOL_VERSION;
    v.relay = true;
    bitcoin::consensus::encode::serialize(&v)
}

fn checksum(payload: &[u8]) -> [u8; 4] {
    let hash = sha256d::Hash::hash(payload).to_byte_array();
    [hash[0], hash[1], hash[2], hash[3]]
}

async fn send(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    magic: [u8; 4],
    command: &str,
    payload: &[u8],
) -> Result<(), P2pError> {
    let mut message = Vec::with_capacity(24 + payload.len());
    message.extend_from_slice(&magic);
    let mut name = [0u8; 12];
    name[..command.len()].copy_from_slice(command.as_bytes());
    message.extend_from_slice(&name);
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    message.extend_from_slice(&len.to_le_bytes());
    message.extend_from_slice(&checksum(payload));
    message.extend_from_slice(payload);
    writer.write_all(&message).await?;
    Ok(())
}

/// The next message: its command and payload.
async fn read(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    magic: [u8; 4],
) -> Result<(String, Vec<u8>), P2pError> {
    let mut header = [0u8; 24];
    match reader.read_exact(&mut header).await {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(P2pError::Closed),
        other => other?,
    };
    let got = [header[0], header[1], header[2], header[3]];
    if got != magic {
        return Err(P2pError::Magic { got, want: magic });
    }
    let command: String = header[4..16]
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| char::from(*b))
        .collect();
    let len = u32::from_le_bytes([header[16], header[17], header[18], header[19]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(P2pError::TooLong { command, len });
    }
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload).await?;
    if checksum(&payload) != header[20..24] {
        return Err(P2pError::Checksum(command));
    }
    Ok((command, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chain_paywatch_follows_has_its_wire_magic_and_port() {
        use paywatch_core::Network::{Bitcoin, Litecoin};
        assert_eq!(
            wire(Litecoin, "main"),
            Some(([0xfb, 0xc0, 0xb6, 0xdb], 9333))
        );
        assert_eq!(
            wire(Litecoin, "regtest"),
            Some(([0xfa, 0xbf, 0xb5, 0xda], 19444))
        );
        assert_eq!(
            wire(Bitcoin, "main"),
            Some(([0xf9, 0xbe, 0xb4, 0xd9], 8333))
        );
        assert_eq!(wire(Bitcoin, "regtest").map(|w| w.1), Some(18444));
        assert_eq!(wire(Bitcoin, "chipnet"), None);
    }

    #[test]
    fn a_version_message_says_it_relays_and_speaks_sendheaders() {
        let peer = SocketAddr::from(([127, 0, 0, 1], 19444));
        let bytes = version(peer);
        let v: VersionMessage = bitcoin::consensus::encode::deserialize(&bytes).unwrap();
        assert_eq!(v.version, PROTOCOL_VERSION);
        assert!(v.relay);
        assert!(v.user_agent.starts_with("/paywatch:"));
    }
}

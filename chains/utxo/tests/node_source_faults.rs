//! `NodeSource` against a fake bitcoind that misbehaves on request.
//!
//! The requirement: an unreachable node, a garbage answer or a block that is
//! not the one asked for leaves the watcher degraded and retrying with
//! backoff, and nothing from a bad answer is recorded. At the source that
//! means every such answer is `Err(SourceError::Transient(..))` naming the
//! problem (never `Ok` with wrong data, never a panic), and once the fault
//! clears the same source answers correctly again.
//!
//! The fake serves a one-block chain, Bitcoin mainnet's genesis block, over
//! just enough HTTP/1.1 and JSON-RPC 1.0 (single calls and batches, basic
//! auth, HTTP 500 with a JSON error body for node errors) for `NodeRpc`.

use std::sync::{Arc, Mutex};

use paywatch_core::{
    BlockRef, BlockSource, CanonicalStream, ChainEvent, Network, SourceBlock, SourceError,
    StreamError, WatchSet,
};
use paywatch_utxo::{
    from_hex, watch_key, Chain, NodeConfig, NodeRpc, NodeSource, Params, RawBlock, RpcAuth,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const GENESIS_HEX: &str = include_str!("fixtures/genesis_block.hex");
const GENESIS_HASH: &str = "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f";
const GENESIS_TIME: i64 = 1_231_006_505;
/// Mainnet block 100002: valid, but not the block asked for.
const BLOCK_100002_HEX: &str = include_str!("fixtures/block_13b8a.hex");
const BLOCK_100002_HASH: &str = "0000000000013b8ab2cd513b0261a14096412195a72a0c4827d229dcc7e0f7af";
/// Paid 10000000 sat in block 100002 (see fixtures/SOURCES.md): watched in
/// the wrong-block test, so accepting that block would report a payment.
const PAID_IN_100002: &str = "1AcFDzS6kF7zzFcjieVSDNfwreRyj8D4R5";
/// A byte inside the genesis coinbase's scriptSig text ("The Times 03/Jan/2009 …"):
/// flipping it keeps the block parseable but changes the coinbase txid.
const COINBASE_TEXT_BYTE: usize = 140;

const USER: &str = "paywatch";
const PASSWORD: &str = "s3cret-rpc-pw";

/// How the fake node misbehaves; `None` is a healthy node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// A node just started, still reloading its saved mempool.
    MempoolLoading,
    /// One byte flipped inside the coinbase transaction: merkle mismatch.
    CorruptBlock,
    /// The block's last three bytes missing.
    TruncatedBlock,
    /// The block's hex cut mid-byte.
    OddHexBlock,
    /// Another valid block (mainnet 100002) served for the genesis hash.
    WrongBlock,
    /// `<html>502</html>` with HTTP 502, as a proxy in front of a dead node.
    NotJson,
    /// `<html>…</html>` with HTTP 200.
    NotJsonOk,
    /// Strings answered as numbers, numbers as strings, objects as numbers.
    WrongShape,
    /// HTTP 401 for every request.
    Unauthorized,
    /// The connection closed after the request, without an answer.
    HangUp,
    /// `getblockchaininfo` says the node is on testnet.
    WrongChain,
    /// `getblockheader <genesis>` describes block 100002 instead.
    WrongHeader,
    /// `getblockcount` answers `u64::MAX`.
    HugeCount,
    /// `getblock` answers as a pruned node does for a block it deleted:
    /// RPC_MISC_ERROR (-1), "Block not available (pruned data)".
    Pruned,
}

struct FakeNode {
    url: String,
    fault: Arc<Mutex<Fault>>,
    /// Every JSON-RPC method called, in order (batches add one per call).
    calls: Arc<Mutex<Vec<String>>>,
    server: JoinHandle<()>,
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeNode {
    async fn start() -> FakeNode {
        FakeNode::start_on("127.0.0.1:0").await
    }

    async fn start_on(addr: &str) -> FakeNode {
        let listener = TcpListener::bind(addr).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let fault = Arc::new(Mutex::new(Fault::None));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (f, c) = (fault.clone(), calls.clone());
        let server = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, f.clone(), c.clone()));
            }
        });
        FakeNode {
            url,
            fault,
            calls,
            server,
        }
    }

    fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    fn source(&self) -> NodeSource {
        source_at(&self.url, &[])
    }

    fn calls_of(&self, method: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|m| *m == method)
            .count()
    }
}

fn source_at(url: &str, watched: &[&str]) -> NodeSource {
    let watch = WatchSet::new(Network::Bitcoin).keyed(watch_key(Network::Bitcoin));
    watch.extend(watched.iter().copied());
    NodeSource::new(
        NodeRpc::new(
            url,
            RpcAuth::UserPassword {
                user: USER.into(),
                password: PASSWORD.into(),
            },
        ),
        NodeConfig {
            params: Params::new(Network::Bitcoin, Chain::Main).unwrap(),
            confirmations: 3,
            blocks_per_request: 8,
            mempool: true,
            mempool_wallet: None,
        },
        Arc::new(watch),
    )
}

// ---- the fake node ---------------------------------------------------------

async fn serve(mut socket: TcpStream, fault: Arc<Mutex<Fault>>, calls: Arc<Mutex<Vec<String>>>) {
    let Some((head, body)) = read_request(&mut socket).await else {
        return;
    };
    let fault = *fault.lock().unwrap();
    let (status, body) = match fault {
        // Dropping the socket closes it with the request read and unanswered.
        Fault::HangUp => return,
        Fault::Unauthorized => (401, String::new()),
        Fault::NotJson => (502, "<html>502</html>".to_owned()),
        Fault::NotJsonOk => (200, "<html>it works</html>".to_owned()),
        _ if !authorized(&head) => (401, String::new()),
        _ => match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Array(batch)) => {
                let answers: Vec<Value> = batch
                    .iter()
                    .map(|call| answer(call, fault, &calls).1)
                    .collect();
                (200, Value::Array(answers).to_string())
            }
            Ok(call) => {
                // Bitcoin Core answers a failed single call with HTTP 500.
                let (ok, answer) = answer(&call, fault, &calls);
                (if ok { 200 } else { 500 }, answer.to_string())
            }
            Err(e) => (400, format!("not JSON: {e}")),
        },
    };
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        _ => "Bad Request",
    };
    let auth = if status == 401 {
        "WWW-Authenticate: Basic realm=\"jsonrpc\"\r\n"
    } else {
        ""
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.shutdown().await;
}

/// The request head and its `Content-Length` body; `None` if the client left.
async fn read_request(socket: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = header(&head, "content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((head, buf[head_end..head_end + len].to_vec()))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn authorized(head: &str) -> bool {
    header(head, "authorization")
        == Some(format!("Basic {}", base64(format!("{USER}:{PASSWORD}").as_bytes())).as_str())
}

fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One JSON-RPC answer: whether it succeeded, and the response object.
fn answer(call: &Value, fault: Fault, calls: &Mutex<Vec<String>>) -> (bool, Value) {
    let method = call.get("method").and_then(Value::as_str).unwrap_or("");
    calls.lock().unwrap().push(method.to_owned());
    let params = call
        .get("params")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let id = call.get("id").cloned().unwrap_or(Value::Null);
    match result(method, &params, fault) {
        Ok(result) => (true, json!({"result": result, "error": null, "id": id})),
        Err((code, message)) => (
            false,
            json!({"result": null, "error": {"code": code, "message": message}, "id": id}),
        ),
    }
}

fn result(method: &str, params: &[Value], fault: Fault) -> Result<Value, (i64, &'static str)> {
    let genesis_asked = params.first().and_then(Value::as_str) == Some(GENESIS_HASH);
    let result = match method {
        "getblockchaininfo" => json!({
            "chain": if fault == Fault::WrongChain { "test" } else { "main" },
            "blocks": 0,
            "headers": 0,
            "bestblockhash": GENESIS_HASH,
        }),
        "getbestblockhash" => json!(GENESIS_HASH),
        "getblockcount" if fault == Fault::HugeCount => json!(u64::MAX),
        "getblockcount" => json!(0),
        "getblockhash" => match params.first().and_then(Value::as_u64) {
            Some(0) => json!(GENESIS_HASH),
            _ => return Err((-8, "Block height out of range")),
        },
        "getblockheader" if genesis_asked && fault == Fault::WrongHeader => json!({
            "hash": BLOCK_100002_HASH,
            "confirmations": 1,
            "height": 100_002,
            "previousblockhash": "00000000000080b66c911bd5ba14a74260057311eaeb1982802f7010f1a9f090",
        }),
        "getblockheader" if genesis_asked => json!({
            "hash": GENESIS_HASH,
            "confirmations": 1,
            "height": 0,
            "time": GENESIS_TIME,
            "nextblockhash": null,
        }),
        "getblockheader" => return Err((-5, "Block not found")),
        "getblock" if genesis_asked && fault == Fault::Pruned => {
            return Err((-1, "Block not available (pruned data)"))
        }
        "getblock" if genesis_asked => json!(block_hex(fault)),
        "getblock" => return Err((-5, "Block not found")),
        "getmempoolinfo" => json!({"loaded": fault != Fault::MempoolLoading, "size": 0}),
        "getrawmempool" => json!([]),
        "getrawtransaction" => {
            return Err((-5, "No such mempool or blockchain transaction"));
        }
        _ => return Err((-32601, "Method not found")),
    };
    if fault == Fault::WrongShape {
        return Ok(match result {
            Value::Number(_) => json!("42"),
            _ => json!(42),
        });
    }
    Ok(result)
}

/// What the fake answers to `getblock <genesis> 0`.
fn block_hex(fault: Fault) -> String {
    let genesis = GENESIS_HEX.trim();
    match fault {
        Fault::CorruptBlock => {
            let mut bytes = from_hex(genesis).unwrap();
            bytes[COINBASE_TEXT_BYTE] ^= 0x20;
            to_hex(&bytes)
        }
        Fault::TruncatedBlock => {
            let bytes = from_hex(genesis).unwrap();
            to_hex(&bytes[..bytes.len() - 3])
        }
        Fault::OddHexBlock => genesis[..genesis.len() - 1].to_owned(),
        Fault::WrongBlock => BLOCK_100002_HEX.trim().to_owned(),
        _ => genesis.to_owned(),
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---- helpers ---------------------------------------------------------------

/// The message of a transient error; anything else fails the test.
fn transient<T: std::fmt::Debug>(answer: Result<T, SourceError>) -> String {
    match answer {
        Err(SourceError::Transient(msg)) => msg,
        other => panic!("expected a transient error, got {other:?}"),
    }
}

fn genesis_ref() -> BlockRef {
    BlockRef {
        height: 0,
        hash: GENESIS_HASH.to_owned(),
        parent: "0".repeat(64),
    }
}

/// The source reads the genesis block exactly, as after any fault cleared.
async fn reads_genesis(source: &NodeSource) {
    let tip = source.tip().await.expect("tip after the fault cleared");
    assert_eq!((tip.height, tip.hash.as_str()), (0, GENESIS_HASH));
    let block = source
        .block(0)
        .await
        .expect("block 0 after the fault cleared")
        .expect("block 0 exists");
    assert_eq!(
        block,
        SourceBlock {
            block: genesis_ref(),
            timestamp: GENESIS_TIME,
            transfers: Vec::new(),
        }
    );
}

// ---- tests -----------------------------------------------------------------

#[tokio::test]
async fn the_genesis_block_reads_with_its_coinbase_output() {
    // The fixture the fake serves: one coinbase paying 50 BTC to a P2PK
    // script. P2PK has no address, so no watch set can match it and the
    // source reports the block with no transfers.
    let bytes = from_hex(GENESIS_HEX).unwrap();
    let raw = RawBlock::parse(&bytes).unwrap();
    raw.verify(None).unwrap();
    let outputs: Vec<_> = raw.outputs(0).collect();
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0].value, 50 * 100_000_000);

    let node = FakeNode::start().await;
    let source = node.source();
    assert_eq!(source.network(), Network::Bitcoin);

    let tip = source.tip().await.unwrap();
    assert_eq!(
        tip,
        BlockRef {
            height: 0,
            hash: GENESIS_HASH.to_owned(),
            parent: String::new(),
        }
    );
    let block = source.block(0).await.unwrap().unwrap();
    assert_eq!(block.block, genesis_ref());
    assert_eq!(block.timestamp, GENESIS_TIME);
    assert!(block.transfers.is_empty(), "{:?}", block.transfers);

    // One block on the chain: nothing is final beyond it, and there is no block 1.
    assert_eq!(source.final_height().await.unwrap(), 0);
    assert_eq!(source.block(1).await.unwrap(), None);
    assert_eq!(
        source.block_ref(0).await.unwrap(),
        Some(BlockRef {
            height: 0,
            hash: GENESIS_HASH.to_owned(),
            parent: String::new(),
        })
    );
    assert_eq!(source.block_ref(1).await.unwrap(), None);

    let pool = source
        .unconfirmed()
        .await
        .unwrap()
        .expect("mempool followed");
    assert_eq!(pool.tip, GENESIS_HASH);
    assert!(pool.transfers.is_empty());

    // The block was fetched with batched getblockhash and getblock calls.
    assert!(node.calls_of("getblock") >= 1);
    assert!(
        node.calls_of("getblockchaininfo") == 1,
        "the chain is checked once"
    );
}

#[tokio::test]
async fn a_corrupt_block_is_refused_whole_and_the_next_good_answer_is_used() {
    let node = FakeNode::start().await;
    let source = node.source();
    source.tip().await.unwrap();

    node.set(Fault::CorruptBlock);
    for _ in 0..2 {
        let msg = transient(source.block(0).await);
        assert!(msg.contains("merkle"), "{msg}");
        assert!(msg.contains(GENESIS_HASH), "names the block: {msg}");
        assert!(msg.contains("height 0"), "names the height: {msg}");
    }
    let fetched = node.calls_of("getblock");

    node.set(Fault::None);
    reads_genesis(&source).await;
    assert!(
        node.calls_of("getblock") > fetched,
        "the good block was fetched anew, not taken from the bad answer"
    );
}

/// Retrying a block the node pruned never helps: the watcher halts, naming
/// the pruning and the height it needs.
#[tokio::test]
async fn a_block_the_node_pruned_halts_naming_the_pruning_and_the_height() {
    let node = FakeNode::start().await;
    let source = node.source();
    source.tip().await.unwrap();
    node.set(Fault::Pruned);
    let e = source.block(0).await.unwrap_err();
    assert!(!e.is_transient(), "retrying cannot bring it back: {e}");
    let msg = e.to_string();
    assert!(msg.contains("pruned"), "{msg}");
    assert!(msg.contains("height 0"), "names the height needed: {msg}");
}

#[tokio::test]
async fn a_truncated_block_is_refused() {
    let node = FakeNode::start().await;
    let source = node.source();
    source.tip().await.unwrap();

    node.set(Fault::TruncatedBlock);
    let msg = transient(source.block(0).await);
    assert!(msg.contains("ends early"), "{msg}");
    assert!(msg.contains(GENESIS_HASH), "{msg}");

    // Cut mid-byte, the hex itself is unreadable.
    node.set(Fault::OddHexBlock);
    let msg = transient(source.block(0).await);
    assert!(msg.contains("hex") && msg.contains("odd length"), "{msg}");
    assert!(msg.contains(GENESIS_HASH), "{msg}");

    node.set(Fault::None);
    reads_genesis(&source).await;
}

#[tokio::test]
async fn a_different_block_than_asked_for_is_refused() {
    let node = FakeNode::start().await;
    // Block 100002 pays this address: taking it for the genesis block would
    // report a payment that never happened at height 0.
    let source = source_at(&node.url, &[PAID_IN_100002]);
    source.tip().await.unwrap();

    node.set(Fault::WrongBlock);
    let msg = transient(source.block(0).await);
    assert!(msg.contains("asked for block"), "{msg}");
    assert!(
        msg.contains(GENESIS_HASH) && msg.contains(BLOCK_100002_HASH),
        "names both blocks: {msg}"
    );

    node.set(Fault::None);
    reads_genesis(&source).await;
}

#[tokio::test]
async fn non_json_and_wrong_shaped_answers_are_transient_errors() {
    let node = FakeNode::start().await;
    let source = node.source();
    // The chain check passes while the node is healthy (it is asked once).
    source.tip().await.unwrap();

    node.set(Fault::NotJson);
    for msg in [
        transient(source.tip().await),
        transient(source.block(0).await),
        transient(source.final_height().await),
        transient(source.block_ref(0).await),
        transient(source.unconfirmed().await),
    ] {
        assert!(
            msg.contains("HTTP 502") && msg.contains("<html>502</html>"),
            "{msg}"
        );
    }

    node.set(Fault::NotJsonOk);
    for (msg, method) in [
        (transient(source.tip().await), "getbestblockhash"),
        (transient(source.block(0).await), "getblockhash"),
        (transient(source.final_height().await), "getblockcount"),
        (transient(source.block_ref(0).await), "getblockhash"),
        (transient(source.unconfirmed().await), "getmempoolinfo"),
    ] {
        assert!(msg.contains("unreadable") && msg.contains(method), "{msg}");
    }

    node.set(Fault::WrongShape);
    for (msg, method) in [
        (transient(source.tip().await), "getbestblockhash"),
        (transient(source.block(0).await), "getblockhash"),
        (transient(source.final_height().await), "getblockcount"),
        (transient(source.block_ref(0).await), "getblockhash"),
        // The best block as the tip read it is the snapshot's "before".
        (transient(source.unconfirmed().await), "getrawmempool"),
    ] {
        assert!(msg.contains("unreadable") && msg.contains(method), "{msg}");
    }

    node.set(Fault::None);
    reads_genesis(&source).await;
}

#[tokio::test]
async fn a_garbage_chain_info_answer_is_transient_not_fatal() {
    let node = FakeNode::start().await;
    let source = node.source();

    // The first call of a fresh source asks getblockchaininfo, answered `42`.
    node.set(Fault::WrongShape);
    let msg = transient(source.tip().await);
    assert!(msg.contains("getblockchaininfo"), "{msg}");

    node.set(Fault::None);
    reads_genesis(&source).await;
}

#[tokio::test]
async fn a_header_for_another_block_is_refused() {
    let node = FakeNode::start().await;
    let source = node.source();
    source.tip().await.unwrap();

    node.set(Fault::WrongHeader);
    // A best block already read is not read again (its hash commits to its
    // header): a source that has not read it asks for the header.
    for msg in [
        transient(node.source().tip().await),
        transient(source.block_ref(0).await),
    ] {
        assert!(
            msg.contains(GENESIS_HASH) && msg.contains(BLOCK_100002_HASH),
            "names both blocks: {msg}"
        );
    }

    node.set(Fault::None);
    reads_genesis(&source).await;
}

#[tokio::test]
async fn an_absurd_block_count_is_an_error_not_a_panic() {
    let node = FakeNode::start().await;
    let source = Arc::new(node.source());
    node.set(Fault::HugeCount);
    let answer = tokio::spawn({
        let source = source.clone();
        async move { source.final_height().await }
    })
    .await
    .expect("final_height does not panic");
    let msg = transient(answer);
    assert!(msg.contains("getblockcount"), "{msg}");

    node.set(Fault::None);
    assert_eq!(source.final_height().await.unwrap(), 0);
}

#[tokio::test]
async fn refused_credentials_are_reported_as_such() {
    let node = FakeNode::start().await;
    let source = node.source();

    node.set(Fault::Unauthorized);
    for msg in [
        transient(source.tip().await),
        transient(source.block(0).await),
        transient(source.unconfirmed().await),
    ] {
        assert!(msg.contains("credentials"), "{msg}");
        assert!(msg.contains(USER), "names the user: {msg}");
        assert!(!msg.contains(PASSWORD), "leaks the password: {msg}");
    }

    // A source with a wrong password is refused by the fake itself.
    let wrong = NodeSource::new(
        NodeRpc::new(
            &node.url,
            RpcAuth::UserPassword {
                user: USER.into(),
                password: "not-the-password".into(),
            },
        ),
        NodeConfig {
            params: Params::new(Network::Bitcoin, Chain::Main).unwrap(),
            confirmations: 3,
            blocks_per_request: 8,
            mempool: true,
            mempool_wallet: None,
        },
        Arc::new(WatchSet::new(Network::Bitcoin).keyed(watch_key(Network::Bitcoin))),
    );
    node.set(Fault::None);
    let msg = transient(wrong.tip().await);
    assert!(msg.contains("credentials"), "{msg}");
    assert!(
        !msg.contains("not-the-password"),
        "leaks the password: {msg}"
    );

    reads_genesis(&source).await;
}

#[tokio::test]
async fn an_unreachable_node_is_transient_and_names_the_url() {
    // Bound and released: nothing listens there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{addr}");
    let source = source_at(&url, &[]);
    for msg in [
        transient(source.tip().await),
        transient(source.block(0).await),
        transient(source.final_height().await),
        transient(source.block_ref(0).await),
        transient(source.unconfirmed().await),
    ] {
        assert!(msg.contains("unreachable") && msg.contains(&url), "{msg}");
    }

    // A node that takes the request and hangs up is unreachable too.
    let node = FakeNode::start().await;
    let hung = node.source();
    node.set(Fault::HangUp);
    for msg in [
        transient(hung.tip().await),
        transient(hung.block(0).await),
        transient(hung.unconfirmed().await),
    ] {
        assert!(
            msg.contains("unreachable") && msg.contains(&node.url),
            "{msg}"
        );
    }
    node.set(Fault::None);
    reads_genesis(&hung).await;

    // The node comes up where the source looks: the same source recovers.
    let node = FakeNode::start_on(&addr.to_string()).await;
    assert_eq!(node.url, url);
    reads_genesis(&source).await;
}

#[tokio::test]
async fn a_node_on_another_chain_is_fatal() {
    let node = FakeNode::start().await;
    let source = node.source();
    node.set(Fault::WrongChain);
    let err = source.tip().await.unwrap_err();
    let SourceError::Fatal(msg) = &err else {
        panic!("expected a fatal error, got {err:?}");
    };
    assert!(
        msg.contains("'test'") && msg.contains("main"),
        "names both chains: {msg}"
    );
    assert!(msg.contains(&node.url), "names the node: {msg}");
    assert_eq!(
        node.calls_of("getbestblockhash"),
        0,
        "nothing read past the check"
    );
}

#[tokio::test]
async fn a_corrupt_answer_connects_nothing_in_the_canonical_stream() {
    let node = FakeNode::start().await;
    let mut stream = CanonicalStream::new(node.source(), Vec::new(), 0, 6);

    node.set(Fault::CorruptBlock);
    for _ in 0..2 {
        let err = stream.next_batch(10).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        let StreamError::Source(SourceError::Transient(msg)) = &err else {
            panic!("expected a transient source error, got {err:?}");
        };
        assert!(msg.contains("merkle"), "{msg}");
        assert_eq!(stream.cursor_tip(), None, "nothing connected");
    }

    node.set(Fault::None);
    let events = stream.next_batch(10).await.unwrap();
    assert_eq!(
        events,
        vec![ChainEvent::Connected {
            block: genesis_ref(),
            timestamp: GENESIS_TIME,
            transfers: Vec::new(),
        }]
    );
    assert_eq!(stream.cursor_tip(), Some(&genesis_ref()));
    assert!(stream.next_batch(10).await.unwrap().is_empty(), "caught up");
}

#[tokio::test]
async fn a_mempool_still_loading_is_not_taken_for_an_empty_one() {
    let node = FakeNode::start().await;
    let source = node.source();
    node.set(Fault::MempoolLoading);
    assert_eq!(
        source.unconfirmed().await.unwrap(),
        None,
        "no snapshot while the node reloads its pool: waiting payments would look dropped"
    );
    node.set(Fault::None);
    assert!(source.unconfirmed().await.unwrap().is_some());
}

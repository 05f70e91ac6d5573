//! `SolanaSource` against a small fake JSON-RPC node (HTTP/1.1 with
//! keep-alive) serving a chain built from the recorded transactions, with
//! skipped slots, a growing tip and a rate-limited phase.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paywatch_core::{
    Amount, Asset, AssetId, BlockSource, CanonicalStream, ChainEvent, Network, SourceError,
    WatchSet,
};
use paywatch_solana::{skipped_hash, watch_key, SolanaConfig, SolanaSource};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const SOL_FIXTURE: &str = include_str!("fixtures/gemwallet_transfer_sol_with_compute.json");
const USDC_FIXTURE: &str = include_str!("fixtures/gemwallet_usdc_transfer.json");
const USDC_OWNER: &str = "3UJQqKq8Xyx4aVRmHgEwpQZiW7toYRQCTy6Bgp1RdKnK";
const GENESIS: &str = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d";

fn hash(n: u8) -> String {
    bs58::encode([n; 32]).into_string()
}

fn tx(fixture: &str) -> Value {
    let answer: Value = serde_json::from_str(fixture).unwrap();
    let r = &answer["result"];
    json!({"transaction": r["transaction"], "meta": r["meta"], "version": r["version"]})
}

/// The account the SOL fixture pays 69_000_000 lamports to.
fn sol_recipient() -> String {
    let answer: Value = serde_json::from_str(SOL_FIXTURE).unwrap();
    let r = &answer["result"];
    let pre = r["meta"]["preBalances"].as_array().unwrap();
    let post = r["meta"]["postBalances"].as_array().unwrap();
    let i = (0..pre.len())
        .find(|&i| {
            post[i]
                .as_u64()
                .unwrap()
                .checked_sub(pre[i].as_u64().unwrap())
                == Some(69_000_000)
        })
        .unwrap();
    r["transaction"]["message"]["accountKeys"][i]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Slots 100..=107: 102, 103 and 105 skipped; the SOL payment in 101, the
/// USDC one in 104.
fn chain() -> BTreeMap<u64, Value> {
    let mut blocks = BTreeMap::new();
    let mut prev: (u64, String) = (99, hash(99));
    for slot in [100u64, 101, 104, 106, 107] {
        let txs = match slot {
            101 => vec![tx(SOL_FIXTURE)],
            104 => vec![tx(USDC_FIXTURE)],
            _ => Vec::new(),
        };
        let h = hash(u8::try_from(slot).unwrap());
        blocks.insert(
            slot,
            json!({
                "blockhash": h,
                "previousBlockhash": prev.1,
                "parentSlot": prev.0,
                "blockTime": 1_750_000_000 + slot,
                "blockHeight": slot - 10,
                "transactions": txs,
            }),
        );
        prev = (slot, h);
    }
    blocks
}

#[derive(Debug, Default)]
struct Node {
    blocks: BTreeMap<u64, Value>,
    tip: AtomicU64,
    finalized: AtomicU64,
    /// Requests answered 429 from the `throttle_at`-th on, for a second.
    throttle_at: Option<usize>,
    /// `getBlock` of the newest slot answers agave's -32014 "not yet", as
    /// a provider whose getBlock backend trails its getSlot backend.
    newest_not_yet: bool,
    /// A backend restored from a snapshot starting at this slot answers
    /// the next this many `getBlock` calls below it: agave's -32001.
    cleaned_up: Mutex<Option<(u64, u64)>>,
    log: Mutex<Log>,
}

#[derive(Debug, Default)]
struct Log {
    requests: usize,
    throttled_since: Option<Instant>,
    answered_429: usize,
    /// When each request was answered normally after the 429s began.
    served_after_429: Vec<Instant>,
    methods: Vec<String>,
}

const RETRY_AFTER_SECS: u64 = 1;

enum Reply {
    Ok(Value),
    TooMany,
}

impl Node {
    fn answer(&self, request: &Value) -> Reply {
        {
            let mut log = self.log.lock().unwrap();
            log.requests += 1;
            log.methods
                .push(request["method"].as_str().unwrap_or("").to_owned());
            if self.throttle_at == Some(log.requests) {
                log.throttled_since = Some(Instant::now());
            }
            if let Some(since) = log.throttled_since {
                if since.elapsed() < Duration::from_secs(RETRY_AFTER_SECS) {
                    log.answered_429 += 1;
                    return Reply::TooMany;
                }
                log.served_after_429.push(Instant::now());
            }
        }
        let params = &request["params"];
        let commitment = |i: usize| params[i]["commitment"].as_str().unwrap_or("finalized");
        let tip_for = |c: &str| match c {
            "finalized" => self.finalized.load(Ordering::SeqCst),
            _ => self.tip.load(Ordering::SeqCst),
        };
        let result = match request["method"].as_str().unwrap() {
            "getGenesisHash" => Ok(json!(GENESIS)),
            "getSlot" => Ok(json!(tip_for(commitment(0)))),
            "getBlocksWithLimit" => {
                let from = params[0].as_u64().unwrap();
                let limit = usize::try_from(params[1].as_u64().unwrap()).unwrap();
                let tip = tip_for(commitment(2));
                let slots: Vec<u64> = self
                    .blocks
                    .range(from..=tip.max(from))
                    .filter(|(s, _)| **s <= tip)
                    .map(|(s, _)| *s)
                    .take(limit)
                    .collect();
                Ok(json!(slots))
            }
            "getBlocks" => {
                let (from, to) = (params[0].as_u64().unwrap(), params[1].as_u64().unwrap());
                let tip = tip_for(commitment(2));
                let slots: Vec<u64> = self
                    .blocks
                    .range(from..=to.min(tip).max(from))
                    .filter(|(s, _)| **s <= tip.min(to))
                    .map(|(s, _)| *s)
                    .collect();
                Ok(json!(slots))
            }
            "getBlock" => {
                let slot = params[0].as_u64().unwrap();
                let opts = &params[1];
                assert_eq!(opts["rewards"], json!(false));
                assert_eq!(opts["maxSupportedTransactionVersion"], json!(0));
                let restored = {
                    let mut c = self.cleaned_up.lock().unwrap();
                    match c.as_mut() {
                        Some((first, left)) if slot < *first && *left > 0 => {
                            *left -= 1;
                            Some(*first)
                        }
                        _ => None,
                    }
                };
                if let Some(first) = restored {
                    Err(json!({"code": -32001, "message": format!(
                        "Block {slot} cleaned up, does not exist on node. First available block: {first}"
                    )}))
                } else if self.newest_not_yet && slot == tip_for(commitment(1)) {
                    Err(json!({"code": -32014,
                        "message": format!("Block status not yet available for slot {slot}")}))
                } else if slot > tip_for(commitment(1)) {
                    Err(
                        json!({"code": -32004, "message": format!("Block not available for slot {slot}")}),
                    )
                } else {
                    match self.blocks.get(&slot) {
                        None => Err(
                            json!({"code": -32007, "message": format!("Slot {slot} was skipped")}),
                        ),
                        Some(b) => {
                            let mut b = b.clone();
                            if opts["transactionDetails"] == json!("none") {
                                b.as_object_mut().unwrap().remove("transactions");
                            }
                            Ok(b)
                        }
                    }
                }
            }
            other => panic!("unexpected method {other}"),
        };
        let id = request["id"].clone();
        Reply::Ok(match result {
            Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
        })
    }
}

async fn serve_connection(node: Arc<Node>, stream: TcpStream) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        if read.read_exact(&mut body).await.is_err() {
            return;
        }
        let request: Value = serde_json::from_slice(&body).unwrap();
        let response = match node.answer(&request) {
            Reply::Ok(v) => {
                let body = serde_json::to_vec(&v).unwrap();
                let mut r = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                r.extend(body);
                r
            }
            Reply::TooMany => format!(
                "HTTP/1.1 429 Too Many Requests\r\nretry-after: {RETRY_AFTER_SECS}\r\ncontent-length: 0\r\n\r\n"
            )
            .into_bytes(),
        };
        if write.write_all(&response).await.is_err() {
            return;
        }
    }
}

async fn start(node: Arc<Node>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(node.clone(), stream));
        }
    });
    format!("http://{addr}")
}

fn watch() -> Arc<WatchSet> {
    let set = WatchSet::new(Network::Solana).keyed(watch_key());
    set.insert(&sol_recipient());
    set.insert(USDC_OWNER);
    Arc::new(set)
}

fn config(url: String) -> SolanaConfig {
    SolanaConfig {
        url,
        genesis_hash: Some(GENESIS.to_owned()),
        show_confirmed: true,
        max_requests_per_second: 0,
        blocks_per_request: 3,
        batches_in_flight: 2,
        request_timeout: Duration::from_secs(5),
        ..SolanaConfig::default()
    }
}

/// Polls the stream until its cursor reaches `until`, retrying transient
/// errors at once (the source itself must hold back when told to).
async fn drive(
    stream: &mut CanonicalStream<SolanaSource>,
    until: u64,
    events: &mut Vec<ChainEvent>,
) -> usize {
    let mut transient = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while stream.cursor_tip().is_none_or(|t| t.height < until) {
        assert!(
            Instant::now() < deadline,
            "stuck at {:?}",
            stream.cursor_tip()
        );
        match stream.next_batch(3).await {
            Ok(batch) => events.extend(batch),
            Err(e) if e.is_transient() => transient += 1,
            Err(e) => panic!("{e}"),
        }
    }
    transient
}

#[tokio::test]
async fn the_stream_walks_skipped_slots_and_waits_out_a_429() {
    let node = Arc::new(Node {
        blocks: chain(),
        tip: AtomicU64::new(101),
        finalized: AtomicU64::new(100),
        throttle_at: Some(14),
        ..Node::default()
    });
    let url = start(node.clone()).await;
    let source = SolanaSource::new(config(url), watch()).unwrap();
    let mut stream = CanonicalStream::new(source, Vec::new(), 100, 16);
    let mut events = Vec::new();

    drive(&mut stream, 101, &mut events).await;
    // Caught up: nothing more until the tip moves.
    assert_eq!(stream.next_batch(3).await.unwrap(), []);
    node.tip.store(107, Ordering::SeqCst);
    node.finalized.store(104, Ordering::SeqCst);
    let transient = drive(&mut stream, 107, &mut events).await;

    // Every slot once, in order, each linked to the one before: no reorgs.
    let heights: Vec<u64> = events.iter().map(|e| e.block().height).collect();
    assert_eq!(heights, (100..=107).collect::<Vec<_>>());
    assert!(events
        .iter()
        .all(|e| matches!(e, ChainEvent::Connected { .. })));
    for pair in events.windows(2) {
        assert_eq!(pair[1].block().parent, pair[0].block().hash);
    }
    let hash_at = |h: u64| {
        events[usize::try_from(h - 100).unwrap()]
            .block()
            .hash
            .clone()
    };
    assert_eq!(hash_at(101), hash(101));
    assert_eq!(hash_at(102), skipped_hash(102, &hash(101)));
    assert_eq!(hash_at(103), skipped_hash(103, &hash(101)));
    assert_eq!(hash_at(104), hash(104));
    assert_eq!(events[4].block().parent, skipped_hash(103, &hash(101)));
    assert_eq!(hash_at(105), skipped_hash(105, &hash(104)));
    assert_eq!(hash_at(107), hash(107));

    // The payments, at their slots and nowhere else.
    let mut paid = Vec::new();
    for e in &events {
        if let ChainEvent::Connected {
            block, transfers, ..
        } = e
        {
            for t in transfers {
                paid.push((block.height, t.asset.clone(), t.to.clone(), t.amount));
            }
        }
    }
    assert_eq!(
        paid,
        [
            (
                101,
                AssetId::Known(Asset::Sol),
                sol_recipient(),
                Amount(69_000_000)
            ),
            (
                104,
                // Circle's mint: real USDC, recognised as that asset.
                AssetId::Known(Asset::Usdc),
                USDC_OWNER.to_owned(),
                Amount(100_000)
            ),
        ]
    );

    // The 429 was met, reported as transient, and waited out: after it the
    // node saw only what was already in flight until Retry-After passed.
    {
        let log = node.log.lock().unwrap();
        let since = log.throttled_since.expect("the 429 phase happened");
        assert!(transient >= 1);
        assert!(
            log.answered_429 <= 4,
            "{} requests answered 429: the source kept asking",
            log.answered_429
        );
        assert!(log
            .served_after_429
            .iter()
            .all(|t| t.duration_since(since) >= Duration::from_secs(RETRY_AFTER_SECS)));
    }

    // Finality: slot 104, confirmed against the stream's own block there.
    assert_eq!(stream.source().final_height().await.unwrap(), 104);
    assert_eq!(stream.confirmed_final_height().await.unwrap(), Some(104));
    // A skipped slot's place is the same however it is asked for.
    assert_eq!(
        stream.source().block_ref(105).await.unwrap().unwrap().hash,
        hash_at(105)
    );
}

#[tokio::test]
async fn the_window_ends_below_skipped_slots_not_yet_resolved() {
    let mut blocks = chain();
    // 108.. do not exist yet; the tip is 104: 105 cannot be told apart from
    // a slot still to come, so the chain ends at 104.
    blocks.retain(|s, _| *s <= 104);
    let node = Arc::new(Node {
        blocks,
        tip: AtomicU64::new(104),
        finalized: AtomicU64::new(104),
        ..Node::default()
    });
    let url = start(node.clone()).await;
    let source = SolanaSource::new(config(url), watch()).unwrap();
    assert_eq!(source.tip().await.unwrap().height, 104);
    assert!(source.block(105).await.unwrap().is_none());
    let b = source.block(102).await.unwrap().unwrap();
    assert_eq!(b.block.hash, skipped_hash(102, &hash(101)));
    assert!(b.transfers.is_empty());
}

#[tokio::test]
async fn a_node_of_another_cluster_is_fatal() {
    let node = Arc::new(Node {
        blocks: chain(),
        tip: AtomicU64::new(107),
        ..Node::default()
    });
    let url = start(node).await;
    let mut cfg = config(url);
    cfg.genesis_hash = Some(hash(1));
    let source = SolanaSource::new(cfg, watch()).unwrap();
    let e = source.tip().await.unwrap_err();
    assert!(matches!(e, SourceError::Fatal(_)), "{e}");
}

#[tokio::test]
async fn an_unreachable_node_is_transient() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let source = SolanaSource::new(config(format!("http://{addr}")), watch()).unwrap();
    assert!(source.tip().await.unwrap_err().is_transient());
}

/// Issue 37 item 11, at the source: `getBlock` of the newest slot is "not
/// yet" each time it is asked (the provider's getBlock backend trails its
/// getSlot one). With no tip read before, that was an error, so the
/// watcher never started. The tip is the newest block served.
#[tokio::test]
async fn a_newest_slot_never_served_yet_leaves_the_tip_at_the_block_below() {
    let node = Arc::new(Node {
        blocks: chain(),
        tip: AtomicU64::new(107),
        finalized: AtomicU64::new(104),
        newest_not_yet: true,
        ..Node::default()
    });
    let url = start(node.clone()).await;
    let source = SolanaSource::new(config(url), watch()).unwrap();
    for _ in 0..3 {
        let tip = source
            .tip()
            .await
            .unwrap_or_else(|e| panic!("the block below is the tip: {e}"));
        assert_eq!((tip.height, tip.hash), (106, hash(106)));
    }
    let mut stream = CanonicalStream::new(source, Vec::new(), 100, 32);
    let mut events = Vec::new();
    assert_eq!(drive(&mut stream, 106, &mut events).await, 0, "no error");
    assert_eq!(stream.cursor_tip().map(|t| t.height), Some(106));
}

fn gap_config(url: String) -> SolanaConfig {
    SolanaConfig {
        gap_confirmation: paywatch_solana::GapConfirmation {
            answers: 3,
            over: Duration::from_millis(300),
        },
        ..config(url)
    }
}

/// Issue 37 item 2, at the source: one backend restored from a snapshot
/// answers "cleaned up" (-32001) for a slot the others serve. That one
/// answer was fatal, with advice to accept the gap. The slot is asked
/// again at once and read.
#[tokio::test]
async fn one_cleaned_up_answer_is_asked_again_and_the_block_read() {
    let node = Arc::new(Node {
        blocks: chain(),
        tip: AtomicU64::new(107),
        finalized: AtomicU64::new(104),
        cleaned_up: Mutex::new(Some((105, 1))),
        ..Node::default()
    });
    let url = start(node.clone()).await;
    let source = SolanaSource::new(gap_config(url), watch()).unwrap();
    source.tip().await.unwrap();
    let b = source
        .block(101)
        .await
        .unwrap_or_else(|e| panic!("another backend serves it: {e}"))
        .unwrap();
    assert_eq!(b.transfers.len(), 1);
}

/// A node that keeps saying "cleaned up" is believed only after several
/// answers over some time; until then the error is transient and never
/// advises `accept-gap`. A block served in between dismisses the claim.
#[tokio::test]
async fn cleaned_up_halts_only_once_confirmed_by_answers_over_time() {
    let node = Arc::new(Node {
        blocks: chain(),
        tip: AtomicU64::new(107),
        finalized: AtomicU64::new(104),
        cleaned_up: Mutex::new(Some((105, u64::MAX))),
        ..Node::default()
    });
    let url = start(node.clone()).await;
    let source = SolanaSource::new(gap_config(url), watch()).unwrap();
    source.tip().await.unwrap();
    let started = Instant::now();
    let halt = loop {
        match source.block(101).await {
            Err(SourceError::Transient(why)) => {
                assert!(
                    why.contains("not yet") && !why.contains("accept-gap"),
                    "{why}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(SourceError::Fatal(why)) => break why,
            other => panic!("{other:?}"),
        }
    };
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        halt.contains("paywatch chain accept-gap --network solana --resume-at 105"),
        "{halt}"
    );
}

//! The source behind a provider that refuses big batches: a JSON-RPC proxy
//! in front of a real anvil refuses every request of more than [`LIMIT`]
//! calls, and the source must shrink its batches, catch up through every
//! block with every payment, and never fail or stall on the refusals.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use paywatch_core::{Asset, AssetId, BlockSource, Network, WatchSet};
use paywatch_evm::{parse_address, watch_key, EvmConfig, EvmSource, Tokens};
use paywatch_testkit::anvil::{ACCOUNTS, CHAIN_ID};
use paywatch_testkit::{AnvilNode, AnvilOptions};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Most JSON-RPC calls the proxy lets through in one request.
const LIMIT: usize = 7;

/// How long [`Refusal::Silence`] keeps a request waiting: longer than the
/// client's timeout in those tests.
const SILENCE: Duration = Duration::from_secs(3);

/// How the proxy says no to a request of more than [`LIMIT`] calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// HTTP 413 with an empty body, as a reverse proxy or load balancer does.
    Http413,
    /// HTTP 200 with a -32005 "batch size limit exceeded" error for every
    /// call, each under its call's id.
    ErrorPerCall,
    /// geth's `--rpc.batch-request-limit`: HTTP 200 with an array of one
    /// -32600 "batch too large" error under the first call's id, and no
    /// answer for the other calls.
    GethStyle,
    /// No answer before the client's timeout, as a node (or a hosted
    /// provider) does with a batch too heavy to serve in time.
    Silence,
    /// geth's `-32002 request timed out` for every call of the batch.
    GethTimeout,
    /// No size limit, but the first `eth_getLogs` for each block hash is
    /// answered `[]` (later ones truthfully), as a node behind a load
    /// balancer that has not seen the block yet, or reth and Besu asked for
    /// a block hash they do not know yet.
    EmptyLogsFirst,
    /// No size limit, but every [`THROTTLE_EVERY`]th request is answered
    /// HTTP 429 `Too Many Requests` with a `Retry-After` of
    /// [`RETRY_AFTER`] seconds, as a hosted provider's rate limit does.
    Throttle,
    /// Every request let through: the provider only watches the pace.
    Nothing,
    /// No size limit, but a request holding more than [`TRACE_LIMIT`]
    /// `debug_traceBlockByHash` calls gets no answer before the client's
    /// timeout: traces cost a node far more than blocks or logs.
    SlowTraces,
}

/// Most traces [`Refusal::SlowTraces`] serves in one request in time.
const TRACE_LIMIT: usize = 3;

/// How the proxy throttles: every `every`th request, whatever its size, is
/// answered HTTP 429 `Too Many Requests` with `Retry-After: RETRY_AFTER`.
const THROTTLE_EVERY: usize = 5;

/// Seconds the throttling proxy asks the client to wait: longer than the
/// source's own first backoff, so only a client that reads the header waits
/// long enough.
const RETRY_AFTER: u64 = 3;

/// What the proxy saw, in the order it arrived.
#[derive(Debug, Default)]
struct Seen {
    /// Calls per request and whether the request was let through.
    requests: Vec<(usize, bool)>,
    /// Heights asked for with `eth_getBlockByNumber` in requests let through.
    heights: Vec<u64>,
    /// Block hashes whose logs were asked for already.
    logs_asked: std::collections::HashSet<String>,
    /// When each request arrived, and whether it was let through.
    arrivals: Vec<(Instant, bool)>,
    /// `eth_getBlockByNumber` calls in each request let through that had any.
    block_batches: Vec<usize>,
    /// `debug_traceBlockByHash` calls in each request let through that had any.
    trace_batches: Vec<usize>,
    /// Calls let through, by method.
    methods: std::collections::BTreeMap<String, u64>,
}

impl Seen {
    fn refused(&self) -> Vec<usize> {
        self.requests
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| *n)
            .collect()
    }

    fn forwarded(&self) -> Vec<usize> {
        self.requests
            .iter()
            .filter(|(_, ok)| *ok)
            .map(|(n, _)| *n)
            .collect()
    }
}

/// An HTTP/1.1 JSON-RPC proxy on 127.0.0.1 in front of `upstream`.
struct Proxy {
    url: String,
    seen: Arc<Mutex<Seen>>,
    accept: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    async fn start(upstream: String, refusal: Refusal) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let http = reqwest_alloy::Client::new();
        let shared = seen.clone();
        let accept = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (upstream, http, seen) = (upstream.clone(), http.clone(), shared.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve(conn, &upstream, &http, &seen, refusal).await {
                        eprintln!("proxy connection: {e}");
                    }
                });
            }
        });
        Proxy { url, seen, accept }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap()
    }
}

/// Requests on one keep-alive connection, one after the other, until the
/// client closes it.
async fn serve(
    mut conn: TcpStream,
    upstream: &str,
    http: &reqwest_alloy::Client,
    seen: &Mutex<Seen>,
    refusal: Refusal,
) -> Result<(), String> {
    let mut buf = Vec::new();
    while let Some((_, body)) =
        paywatch_testkit::http_request::next_request(&mut conn, &mut buf).await?
    {
        let (status, answer) = answer(body, upstream, http, seen, refusal).await?;
        let reason = match status {
            200 => "OK",
            413 => "Payload Too Large",
            429 => "Too Many Requests",
            _ => "Whatever",
        };
        let retry = if status == 429 {
            format!("retry-after: {RETRY_AFTER}\r\n")
        } else {
            String::new()
        };
        let mut out = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{retry}content-length: {}\r\n\r\n",
            answer.len()
        )
        .into_bytes();
        out.extend_from_slice(&answer);
        conn.write_all(&out).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The refusal for a request of more than [`LIMIT`] calls, else anvil's answer.
async fn answer(
    body: Vec<u8>,
    upstream: &str,
    http: &reqwest_alloy::Client,
    seen: &Mutex<Seen>,
    refusal: Refusal,
) -> Result<(u16, Vec<u8>), String> {
    let request: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let calls: Vec<&Value> = match &request {
        Value::Array(calls) => calls.iter().collect(),
        single => vec![single],
    };
    let asked_before = seen.lock().unwrap().requests.len();
    let count = |method: &str| calls.iter().filter(|c| c["method"] == method).count();
    let (blocks, traces) = (
        count("eth_getBlockByNumber"),
        count("debug_traceBlockByHash"),
    );
    let refused = match refusal {
        Refusal::Throttle => (asked_before + 1).is_multiple_of(THROTTLE_EVERY),
        Refusal::EmptyLogsFirst | Refusal::Nothing => false,
        Refusal::SlowTraces => traces > TRACE_LIMIT,
        _ => calls.len() > LIMIT,
    };
    if refusal == Refusal::EmptyLogsFirst {
        return lying_about_logs(&request, upstream, http, seen).await;
    }
    {
        let mut seen = seen.lock().unwrap();
        seen.requests.push((calls.len(), !refused));
        seen.arrivals.push((Instant::now(), !refused));
        if !refused {
            for c in &calls {
                let method = c["method"].as_str().unwrap_or("").to_owned();
                *seen.methods.entry(method).or_default() += 1;
            }
            if blocks > 0 {
                seen.block_batches.push(blocks);
            }
            if traces > 0 {
                seen.trace_batches.push(traces);
            }
            seen.heights.extend(
                calls
                    .iter()
                    .filter(|c| c["method"] == "eth_getBlockByNumber")
                    .filter_map(|c| c["params"][0].as_str())
                    .filter_map(|h| u64::from_str_radix(h.strip_prefix("0x")?, 16).ok()),
            );
        }
    }
    if refused {
        let error = |id: &Value, code: i64, message: &str| json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
        return Ok(match refusal {
            Refusal::Http413 => (413, Vec::new()),
            Refusal::ErrorPerCall => {
                let errors: Vec<Value> = calls
                    .iter()
                    .map(|c| error(&c["id"], -32005, "batch size limit exceeded"))
                    .collect();
                (200, serde_json::to_vec(&errors).unwrap())
            }
            Refusal::GethStyle => {
                let errors = [error(&calls[0]["id"], -32600, "batch too large")];
                (200, serde_json::to_vec(&errors).unwrap())
            }
            Refusal::Silence | Refusal::SlowTraces => {
                tokio::time::sleep(SILENCE).await;
                (504, Vec::new())
            }
            Refusal::Throttle => (429, b"Too Many Requests".to_vec()),
            Refusal::EmptyLogsFirst => unreachable!("answered by lying_about_logs"),
            Refusal::Nothing => unreachable!("nothing is refused"),
            Refusal::GethTimeout => {
                let errors: Vec<Value> = calls
                    .iter()
                    .map(|c| error(&c["id"], -32002, "request timed out"))
                    .collect();
                (200, serde_json::to_vec(&errors).unwrap())
            }
        });
    }
    let response = http
        .post(upstream)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("anvil: {e}"))?;
    let status = response.status().as_u16();
    let answer = response.bytes().await.map_err(|e| format!("anvil: {e}"))?;
    Ok((status, answer.to_vec()))
}

/// Anvil's answer, but each call's first `eth_getLogs` for a block hash
/// answered `[]` in place.
async fn lying_about_logs(
    request: &Value,
    upstream: &str,
    http: &reqwest_alloy::Client,
    seen: &Mutex<Seen>,
) -> Result<(u16, Vec<u8>), String> {
    let response = http
        .post(upstream)
        .json(request)
        .send()
        .await
        .map_err(|e| format!("anvil: {e}"))?;
    let mut answer: Value = response.json().await.map_err(|e| format!("anvil: {e}"))?;
    let calls: Vec<Value> = match request {
        Value::Array(calls) => calls.clone(),
        single => vec![single.clone()],
    };
    let mut seen = seen.lock().unwrap();
    seen.requests.push((calls.len(), true));
    let answers: Vec<&mut Value> = match &mut answer {
        Value::Array(a) => a.iter_mut().collect(),
        single => vec![single],
    };
    for a in answers {
        let Some(call) = calls.iter().find(|c| c["id"] == a["id"]) else {
            continue;
        };
        if call["method"] == "eth_getLogs" {
            let hash = call["params"][0]["blockHash"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            if seen.logs_asked.insert(hash) {
                a["result"] = json!([]);
            }
        }
    }
    Ok((200, serde_json::to_vec(&answer).unwrap()))
}

const W1: &str = "0x00000000000000000000000000000000000000aa";
const W2: &str = "0x00000000000000000000000000000000000000bb";
const UNWATCHED: &str = "0x00000000000000000000000000000000000000cc";

/// A payment the source must find: height, txid, asset, amount, payee.
type Payment = (u64, String, AssetId, u128, String);

/// The height `tx` was mined at, once it is.
async fn mined_at(node: &AnvilNode, tx: &str) -> u64 {
    let receipt = node.receipt(tx).await.unwrap();
    let number = receipt["blockNumber"].as_str().unwrap();
    u64::from_str_radix(number.trim_start_matches("0x"), 16).unwrap()
}

/// 120 blocks with payments to watched addresses: alone in a row of
/// consecutive blocks, several in one block, and in the last block, with
/// payments to an unwatched address among them.
async fn chain(node: &AnvilNode) -> (Tokens, Vec<Payment>) {
    let usdt = node
        .deploy_token("Tether", "USDT", 1_000_000_000)
        .await
        .unwrap();
    let tokens = Tokens::new([(Asset::Usdt, parse_address(&usdt).unwrap())]);
    let eth = AssetId::Known(Asset::Eth);
    let tok = AssetId::Known(Asset::Usdt);
    let mut paid = Vec::new();
    node.mine(9).await.unwrap();

    // Payments in consecutive blocks: their logs, traces and receipts alone
    // are more than LIMIT calls for a few blocks.
    for (i, (to, token)) in [
        (W1, false),
        (W2, false),
        (W1, true),
        (W1, false),
        (W2, false),
    ]
    .into_iter()
    .enumerate()
    {
        let amount = 1_000 + i as u128;
        let tx = if token {
            node.token_transfer(&usdt, ACCOUNTS[0], to, amount).await
        } else {
            node.send_eth(ACCOUNTS[1], to, amount).await
        }
        .unwrap();
        let asset = if token { tok.clone() } else { eth.clone() };
        paid.push((mined_at(node, &tx).await, tx, asset, amount, to.into()));
    }
    let tx = node.send_eth(ACCOUNTS[1], UNWATCHED, 5).await.unwrap();
    mined_at(node, &tx).await;
    node.mine(30).await.unwrap();

    // Several payments in one block.
    node.set_automine(false).await.unwrap();
    let mut pending = Vec::new();
    for (i, (from, to)) in [(ACCOUNTS[2], W1), (ACCOUNTS[3], W2), (ACCOUNTS[4], W1)]
        .into_iter()
        .enumerate()
    {
        let amount = 2_000 + i as u128;
        pending.push((
            node.send_eth(from, to, amount).await.unwrap(),
            eth.clone(),
            amount,
            to,
        ));
    }
    let tx = node
        .token_transfer(&usdt, ACCOUNTS[0], W2, 3_000)
        .await
        .unwrap();
    pending.push((tx, tok.clone(), 3_000, W2));
    node.send_eth(ACCOUNTS[5], UNWATCHED, 6).await.unwrap();
    let height = node.mine(1).await.unwrap();
    node.set_automine(true).await.unwrap();
    for (tx, asset, amount, to) in pending {
        assert_eq!(mined_at(node, &tx).await, height);
        paid.push((height, tx, asset, amount, to.into()));
    }

    let tip = node.mine(119 - height).await.unwrap();
    assert_eq!(tip, 119);
    let tx = node.send_eth(ACCOUNTS[6], W2, 4_000).await.unwrap();
    assert_eq!(mined_at(node, &tx).await, 120);
    paid.push((120, tx, eth, 4_000, W2.into()));
    (tokens, paid)
}

async fn catches_up_behind_a_provider_that_refuses(refusal: Refusal) {
    catch_up(refusal, 0).await;
}

/// Every block read through the proxy, the source pacing itself at
/// `requests_per_second` (0: no pacing); what the proxy saw.
async fn catch_up(refusal: Refusal, requests_per_second: u32) -> Seen {
    let node = AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"));
    let (tokens, mut expected) = chain(&node).await;
    let proxy = Proxy::start(node.url(), refusal).await;
    let watch = WatchSet::new(Network::Ethereum).keyed(watch_key());
    watch.extend([W1, W2]);
    let src = EvmSource::new(
        EvmConfig {
            url: proxy.url.clone(),
            chain_id: Some(CHAIN_ID),
            tokens,
            traces: true,
            blocks_per_request: 50,
            batches_in_flight: 2,
            request_timeout: if matches!(refusal, Refusal::Silence | Refusal::SlowTraces) {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(10)
            },
            requests_per_second,
            ..EvmConfig::default()
        },
        Arc::new(watch),
    )
    .unwrap();

    // Every block from the genesis on, each once, without an error: a
    // refusal the source does not adapt to fails the test here, a stall
    // at the timeout.
    let (tip, blocks) = tokio::time::timeout(Duration::from_secs(60), async {
        let tip = src.tip().await.unwrap();
        let mut blocks = Vec::new();
        for h in 0..=tip.height {
            let b = src
                .block(h)
                .await
                .unwrap_or_else(|e| panic!("block {h} ({refusal:?}): {e}"))
                .unwrap_or_else(|| panic!("no block {h} of {} ({refusal:?})", tip.height));
            blocks.push(b);
        }
        assert!(src.block(tip.height + 1).await.unwrap().is_none());
        (tip, blocks)
    })
    .await
    .unwrap_or_else(|_| panic!("catching up stalled ({refusal:?}): {:?}", proxy.seen()));

    assert_eq!(tip.height, 120);
    for (h, b) in blocks.iter().enumerate() {
        assert_eq!(b.block.height, h as u64);
        assert_eq!(b.block.hash, node.block_hash(h as u64).await.unwrap());
        if h > 0 {
            assert_eq!(b.block.parent, blocks[h - 1].block.hash, "block {h}");
        }
    }
    let mut found: Vec<Payment> = blocks
        .iter()
        .flat_map(|b| {
            b.transfers.iter().map(|t| {
                assert!(t.success, "{t:?}");
                (
                    b.block.height,
                    t.txid.clone(),
                    t.asset.clone(),
                    t.amount.0,
                    t.to.clone(),
                )
            })
        })
        .collect();
    found.sort();
    expected.sort();
    assert_eq!(found, expected, "{refusal:?}");

    let seen = std::mem::take(&mut *proxy.seen());
    let refused = seen.refused();
    let forwarded = seen.forwarded();
    if refusal == Refusal::SlowTraces {
        eprintln!(
            "SlowTraces: block batches {:?}; trace batches {:?}; refused {refused:?}",
            seen.block_batches, seen.trace_batches
        );
        // Blocks and logs went 50 at a time all along: the traces alone
        // were asked for in fewer, within what the node serves in time.
        assert!(
            seen.block_batches.iter().filter(|n| **n == 50).count() >= 2,
            "block batches were shrunk for the traces: {:?}",
            seen.block_batches
        );
        // Besides single-block asks at the tip, only the tail's 21 is short.
        assert!(
            seen.block_batches.iter().all(|n| *n == 1 || *n >= 21),
            "{:?}",
            seen.block_batches
        );
        assert!(
            seen.trace_batches.iter().any(|n| *n > 1),
            "traces still go several at a time: {:?}",
            seen.trace_batches
        );
        return seen;
    }
    if matches!(refusal, Refusal::EmptyLogsFirst | Refusal::Nothing) {
        // Every payment was found above, the tokens' included.
        return seen;
    }
    if refusal == Refusal::Throttle {
        // Throttling is no size limit: batches were never shrunk for it.
        assert!(
            !refused.is_empty(),
            "the provider throttled: {:?}",
            seen.requests
        );
        assert!(forwarded.iter().any(|n| *n > LIMIT), "{forwarded:?}");
        assert!(refused.iter().all(|n| *n > LIMIT || *n <= 2), "{refused:?}");
        // Nothing was asked of the provider again before the wait it asked
        // for was over (a request already on its way when the 429 went out
        // may still arrive just after it).
        let asked = Duration::from_secs(RETRY_AFTER) - Duration::from_millis(100);
        for (at, _) in seen.arrivals.iter().filter(|(_, ok)| !ok) {
            let early: Vec<Duration> = seen
                .arrivals
                .iter()
                .map(|(t, _)| t.saturating_duration_since(*at))
                .filter(|d| *d > Duration::from_millis(200) && *d < asked)
                .collect();
            assert!(
                early.is_empty(),
                "asked again {early:?} after a 429 with Retry-After: {RETRY_AFTER}"
            );
        }
        return seen;
    }
    let mut heights = seen.heights.clone();
    heights.sort_unstable();
    let asked = heights.len();
    heights.dedup();
    eprintln!(
        "{refusal:?}: {} requests, {} refused {refused:?}; forwarded {forwarded:?}; \
         {asked} block heights asked for, {} distinct",
        seen.requests.len(),
        refused.len(),
        heights.len()
    );
    // The first ask was the configured 50 blocks, and the provider said no.
    assert!(refused.contains(&50), "{refused:?}");
    // Everything let through was within the limit, by construction; the
    // source still asked for several blocks at a time, not one by one.
    assert!(forwarded.iter().all(|n| *n <= LIMIT));
    assert!(forwarded.iter().any(|n| *n > LIMIT / 2), "{forwarded:?}");
    // It settled below the limit rather than bouncing off it: most requests
    // got through, and far fewer than one per block were needed.
    assert!(refused.len() < forwarded.len(), "{:?}", seen.requests);
    assert!(seen.requests.len() < 121, "{:?}", seen.requests);
    // Every height was fetched, and the one past the tip once asked for.
    assert_eq!(heights, (0..=121).collect::<Vec<u64>>());
    seen
}

#[tokio::test]
async fn batches_shrink_when_the_provider_answers_http_413() {
    catches_up_behind_a_provider_that_refuses(Refusal::Http413).await;
}

#[tokio::test]
async fn batches_shrink_when_the_provider_answers_an_error_per_call() {
    catches_up_behind_a_provider_that_refuses(Refusal::ErrorPerCall).await;
}

/// geth answers one call (the first) with "batch too large" and leaves the
/// others unanswered: the batch's answers must be judged together.
#[tokio::test]
async fn batches_shrink_when_the_provider_answers_like_geth() {
    catches_up_behind_a_provider_that_refuses(Refusal::GethStyle).await;
}

/// A client timeout on a big batch halves it, as a size refusal does: the
/// same size asked again would time out for ever.
#[tokio::test]
async fn batches_shrink_when_the_provider_times_out_on_big_ones() {
    catches_up_behind_a_provider_that_refuses(Refusal::Silence).await;
}

/// geth's own "request timed out" (-32002) halves the batch too.
#[tokio::test]
async fn batches_shrink_when_geth_answers_request_timed_out() {
    catches_up_behind_a_provider_that_refuses(Refusal::GethTimeout).await;
}

/// A provider that throttles one request in five (HTTP 429 with
/// `Retry-After`) is waited out for as long as it asks: throttling is not read as "too large", batches are
/// not shrunk for it, and nothing is missed.
#[tokio::test]
async fn a_throttling_provider_is_waited_out_without_shrinking_batches() {
    catches_up_behind_a_provider_that_refuses(Refusal::Throttle).await;
}

/// A provider's budget (`rpc.requests_per_second`) is kept: at 4 a
/// second, no five requests arrive within one second, so a plan's limit is
/// never hit in the first place.
#[tokio::test]
async fn requests_are_paced_to_the_providers_budget() {
    let seen = catch_up(Refusal::Nothing, 4).await;
    assert!(seen.arrivals.len() > 5, "{:?}", seen.requests);
    for w in seen.arrivals.windows(5) {
        let span = w[4].0 - w[0].0;
        assert!(
            span >= Duration::from_millis(950),
            "five requests within {span:?} at 4 a second"
        );
    }
}

/// An empty `eth_getLogs` answer is checked against the block's own
/// `logsBloom`: a block whose bloom says Transfer logs may be there is not
/// taken as holding none, and no token payment is missed.
#[tokio::test]
async fn an_empty_logs_answer_the_block_bloom_contradicts_is_not_trusted() {
    catches_up_behind_a_provider_that_refuses(Refusal::EmptyLogsFirst).await;
}

/// After an outage, 50 blocks' traces in one request are more than the node
/// serves in time. The traces go in batches of their own, halved until
/// they are served, while blocks and logs keep going 50 at a time.
#[tokio::test]
async fn traces_go_in_smaller_batches_of_their_own() {
    catch_up(Refusal::SlowTraces, 0).await;
}

/// Mainnet makes a block every 12 s and paywatch polls every second, so
/// eleven polls in twelve find nothing new. An idle poll that reads whole
/// blocks (the tip, the finalized block and the block checked for
/// finality: three `eth_getBlockByNumber`, about 15 KB each of transaction
/// hashes on mainnet) costs about 160 MB an hour. It asks for the block
/// number, and for nothing else while that has not moved (the tip's header
/// again only every 3 s, for a block replaced at the same height); a new
/// block is still found on the next poll.
#[tokio::test]
async fn an_idle_poll_asks_only_for_the_block_number() {
    use paywatch_core::CanonicalStream;

    let node = AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"));
    let tip = node.mine(80).await.unwrap();
    let proxy = Proxy::start(node.url(), Refusal::Nothing).await;
    let src = EvmSource::new(
        EvmConfig {
            url: proxy.url.clone(),
            chain_id: Some(CHAIN_ID),
            ..EvmConfig::default()
        },
        Arc::new(WatchSet::new(Network::Ethereum).keyed(watch_key())),
    )
    .unwrap();
    let mut stream = CanonicalStream::new(src, Vec::new(), tip - 10, 64);
    async fn poll(stream: &mut CanonicalStream<EvmSource>) -> usize {
        let events = stream.next_batch(100).await.unwrap();
        stream.confirmed_final_height().await.unwrap();
        events.len()
    }
    assert_eq!(poll(&mut stream).await, 11, "caught up");
    poll(&mut stream).await;

    let before = proxy.seen().methods.clone();
    const POLLS: u64 = 10;
    for _ in 0..POLLS {
        assert_eq!(poll(&mut stream).await, 0);
    }
    let spent: std::collections::BTreeMap<String, u64> = proxy
        .seen()
        .methods
        .iter()
        .map(|(m, n)| (m.clone(), n - before.get(m).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(
        spent.get("eth_getBlockByNumber"),
        None,
        "no block read while nothing moved: {spent:?}"
    );
    assert!(
        spent.values().sum::<u64>() <= POLLS,
        "one call a poll: {spent:?}"
    );

    node.mine(1).await.unwrap();
    assert_eq!(poll(&mut stream).await, 1, "a new block is found at once");
}

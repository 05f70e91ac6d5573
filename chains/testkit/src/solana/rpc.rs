//! A small HTTP/1.1 JSON-RPC server (keep-alive, batches) on a raw tokio
//! listener: a full HTTP stack would add nothing a test needs, and the raw
//! one makes faults (429, 503, slowness) exact.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use base64::prelude::{Engine, BASE64_STANDARD};
use serde_json::{json, Value};
use solana_message::v0::LoadedMessage;
use solana_message::VersionedMessage;
use solana_transaction_status_client_types::option_serializer::OptionSerializer;
use solana_transaction_status_client_types::{
    EncodedConfirmedTransactionWithStatusMeta, EncodedTransaction,
    EncodedTransactionWithStatusMeta, ParsedAccount, ParsedAccountSource,
    TransactionBinaryEncoding, TransactionDetails, UiAccountsList, UiCompiledInstruction,
    UiConfirmedBlock, UiMessage, UiRawMessage, UiTransaction, UiTransactionEncoding,
    UiTransactionStatusMeta,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use super::chain::{Block, Ledger, StoredTx};
use super::SolanaFault;

/// What the server shares with the node.
#[derive(Debug, Default)]
pub(crate) struct Served {
    pub(crate) ledger: Ledger,
    pub(crate) fault: SolanaFault,
    pub(crate) requests: u64,
    /// JSON-RPC calls answered, by method (a batch counts each of its
    /// calls): public endpoints budget each method on its own.
    pub(crate) calls: BTreeMap<String, u64>,
    /// `transactionDetails` of each `getBlock` asked, in order.
    pub(crate) block_details: Vec<String>,
    /// Bytes of response bodies sent, as sent (compressed or not).
    pub(crate) bytes_sent: u64,
    /// Responses sent gzip-compressed.
    pub(crate) gzipped: u64,
    /// Calls about old slots so far, for [`SolanaFault::RestoredBackend`].
    pub(crate) round_robin: u64,
    /// See [`SolanaNode::set_unknown_failures`](super::SolanaNode::set_unknown_failures).
    pub(crate) unknown_failures: bool,
}

/// Bodies above this go gzip-compressed to a client that accepts it, as a
/// provider's front end sends them (nginx with `gzip_min_length 256`).
const GZIP_ABOVE: usize = 256;

pub(crate) type Shared = Arc<Mutex<Served>>;

/// A panic elsewhere must not take the server down with it.
pub(crate) fn lock(shared: &Shared) -> MutexGuard<'_, Served> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

type RpcErr = (i64, String);

/// What to do with one HTTP request, decided by the fault.
enum Answer {
    Normal,
    After(Duration),
    TooMany(u64),
    Unavailable,
}

fn answer(shared: &Shared) -> Answer {
    let mut s = lock(shared);
    s.requests += 1;
    match &mut s.fault {
        SolanaFault::None
        | SolanaFault::TipNotYetAvailable { .. }
        | SolanaFault::BlockBackendTrails
        | SolanaFault::RestoredBackend { .. } => Answer::Normal,
        SolanaFault::Slow(d) => Answer::After(*d),
        SolanaFault::Unavailable => Answer::Unavailable,
        SolanaFault::RateLimited {
            requests,
            retry_after_secs,
        } => {
            let retry = *retry_after_secs;
            *requests = requests.saturating_sub(1);
            if *requests == 0 {
                s.fault = SolanaFault::None;
            }
            Answer::TooMany(retry)
        }
    }
}

pub(crate) async fn serve(listener: TcpListener, shared: Shared) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let (r, mut w) = sock.into_split();
            let mut r = BufReader::new(r);
            while let Some((body, gzip_ok)) = read_request(&mut r).await {
                let (status, extra, out) = match answer(&shared) {
                    Answer::TooMany(secs) => (
                        "429 Too Many Requests",
                        format!("retry-after: {secs}\r\n"),
                        b"Too many requests".to_vec(),
                    ),
                    Answer::Unavailable => (
                        "503 Service Unavailable",
                        String::new(),
                        b"Service unavailable".to_vec(),
                    ),
                    Answer::After(d) => {
                        tokio::time::sleep(d).await;
                        ("200 OK", String::new(), respond(&shared, &body))
                    }
                    Answer::Normal => ("200 OK", String::new(), respond(&shared, &body)),
                };
                let compress = gzip_ok && out.len() > GZIP_ABOVE;
                let (out, extra) = if compress {
                    (gzip(&out), format!("{extra}content-encoding: gzip\r\n"))
                } else {
                    (out, extra)
                };
                {
                    let mut s = lock(&shared);
                    s.bytes_sent += out.len() as u64;
                    s.gzipped += u64::from(compress);
                }
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n",
                    out.len()
                );
                if w.write_all(head.as_bytes()).await.is_err() || w.write_all(&out).await.is_err() {
                    return;
                }
            }
        });
    }
}

fn gzip(body: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default()
}

/// The body of the next request on the connection, and whether the client
/// accepts gzip; `None` when it closes.
async fn read_request<R: AsyncBufReadExt + AsyncReadExt + Unpin>(
    r: &mut R,
) -> Option<(Vec<u8>, bool)> {
    let mut len = 0usize;
    let mut gzip_ok = false;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
            if k.eq_ignore_ascii_case("accept-encoding") {
                gzip_ok = v.split(',').any(|e| e.trim().starts_with("gzip"));
            }
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.ok()?;
    Some((body, gzip_ok))
}

fn respond(shared: &Shared, body: &[u8]) -> Vec<u8> {
    let mut s = lock(shared);
    let resp = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(reqs)) => {
            Value::Array(reqs.iter().map(|q| handle_served(&mut s, q)).collect())
        }
        Ok(req) => handle_served(&mut s, &req),
        Err(e) => {
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":e.to_string()}})
        }
    };
    serde_json::to_vec(&resp).unwrap_or_default()
}

/// [`handle`], after the faults that answer one method with an error.
fn handle_served(s: &mut Served, req: &Value) -> Value {
    let method = req.get("method").and_then(Value::as_str).unwrap_or("");
    *s.calls.entry(method.to_owned()).or_default() += 1;
    if req.get("method").and_then(Value::as_str) == Some("getBlock") {
        let details = req
            .pointer("/params/1/transactionDetails")
            .and_then(Value::as_str)
            .unwrap_or("full");
        s.block_details.push(details.to_owned());
    }
    if let SolanaFault::TipNotYetAvailable { requests } = &mut s.fault {
        let slot = req
            .get("params")
            .and_then(|p| p.get(0))
            .and_then(Value::as_u64);
        let tip = tip(&s.ledger, Some(&json!({"commitment": "confirmed"}))).ok();
        if req.get("method").and_then(Value::as_str) == Some("getBlock")
            && slot.is_some()
            && slot == tip
        {
            *requests = requests.saturating_sub(1);
            if *requests == 0 {
                s.fault = SolanaFault::None;
            }
            let id = req.get("id").cloned().unwrap_or(Value::Null);
            let slot = slot.unwrap_or_default();
            // agave's RpcCustomError::BlockStatusNotAvailableYet.
            return json!({"jsonrpc":"2.0","id":id,"error":{"code":-32014,
                "message":format!("Block status not yet available for slot {slot}")}});
        }
    }
    if let Some(answer) = faulted(s, req) {
        return answer;
    }
    let mut answer = handle(&s.ledger, req);
    if s.unknown_failures {
        if let Some(result) = answer.get_mut("result") {
            unknown_failures(result);
        }
    }
    answer
}

/// The answer a fault gives instead of the ledger's, if any.
fn faulted(s: &mut Served, req: &Value) -> Option<Value> {
    let method = req.get("method").and_then(Value::as_str).unwrap_or("");
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let first = req.pointer("/params/0").and_then(Value::as_u64);
    match s.fault {
        SolanaFault::BlockBackendTrails => {
            let newest = s.ledger.confirmed_slot;
            let slot = first.filter(|slot| method == "getBlock" && *slot == newest)?;
            // agave's RpcCustomError::BlockStatusNotAvailableYet.
            Some(json!({"jsonrpc":"2.0","id":id,"error":{"code":-32014,
                "message":format!("Block status not yet available for slot {slot}")}}))
        }
        SolanaFault::RestoredBackend {
            first_available,
            backends,
        } => {
            let old = match method {
                "getBlock" | "getBlocksWithLimit" => first.is_some_and(|s| s < first_available),
                "getFirstAvailableBlock" => true,
                _ => false,
            };
            if !old {
                return None;
            }
            let turn = s.round_robin;
            s.round_robin += 1;
            if !turn.is_multiple_of(backends.max(1)) {
                return None;
            }
            let whole = s.ledger.first_available;
            s.ledger.first_available = first_available.max(whole);
            let answer = handle(&s.ledger, req);
            s.ledger.first_available = whole;
            Some(answer)
        }
        _ => None,
    }
}

/// Every failed transaction in a getBlock or getTransaction `result` made
/// to fail with a variant Solana's types do not know (see
/// [`SolanaNode::set_unknown_failures`](super::SolanaNode::set_unknown_failures)).
fn unknown_failures(result: &mut Value) {
    let metas: Vec<&mut Value> = match result.get_mut("transactions") {
        Some(Value::Array(txs)) => txs.iter_mut().filter_map(|t| t.get_mut("meta")).collect(),
        _ => result.get_mut("meta").into_iter().collect(),
    };
    for (n, meta) in metas.into_iter().enumerate() {
        if meta.get("err").is_none_or(Value::is_null) {
            continue;
        }
        let index = meta
            .pointer("/err/InstructionError/0")
            .cloned()
            .unwrap_or(json!(0));
        let err = match n % 4 {
            0 => json!({"InstructionError": [index, {"FutureInstructionError": {"code": 7}}]}),
            1 => json!({"InstructionError": [index, "FutureInstructionError"]}),
            2 => json!("FutureTransactionError"),
            _ => json!({"FutureTransactionError": {"account_index": 1}}),
        };
        meta["err"] = err.clone();
        meta["status"] = json!({ "Err": err });
    }
}

fn handle(l: &Ledger, req: &Value) -> Value {
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let params = req
        .get("params")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let res = match req.get("method").and_then(Value::as_str).unwrap_or("") {
        "getSlot" => tip(l, params.first()).map(|s| json!(s)),
        "getBlockHeight" => tip(l, params.first()).map(|s| json!(l.block_height_at(s))),
        "getBlocks" => get_blocks(l, &params),
        "getBlocksWithLimit" => get_blocks_with_limit(l, &params),
        "getBlock" => get_block(l, &params),
        "getTransaction" => get_transaction(l, &params),
        "getLatestBlockhash" => Ok(json!({
            "context": {"slot": l.processed_slot},
            "value": {
                "blockhash": l.latest_blockhash,
                // Blockhashes stay valid for 150 blocks on mainnet.
                "lastValidBlockHeight": l.block_height_at(l.processed_slot) + 150,
            },
        })),
        "getHealth" => Ok(json!("ok")),
        "getFirstAvailableBlock" => Ok(json!(l.first_available)),
        "getVersion" => Ok(json!({"solana-core": "3.1.14", "feature-set": 0u32})),
        m => Err((-32601, format!("Method not found: {m}"))),
    };
    match res {
        Ok(v) => json!({"jsonrpc":"2.0","id":id,"result":v}),
        Err((code, message)) => {
            json!({"jsonrpc":"2.0","id":id,"error":{"code":code,"message":message}})
        }
    }
}

fn invalid(what: impl std::fmt::Display) -> RpcErr {
    (-32602, format!("Invalid params: {what}"))
}

/// The slot at the config's commitment; finalized by default, as agave.
fn tip(l: &Ledger, cfg: Option<&Value>) -> Result<u64, RpcErr> {
    let commitment = cfg
        .and_then(|c| c.get("commitment"))
        .and_then(Value::as_str)
        .unwrap_or("finalized");
    match commitment {
        "finalized" | "max" | "root" => Ok(l.finalized_slot),
        "confirmed" | "singleGossip" => Ok(l.confirmed_slot),
        "processed" | "recent" => Ok(l.processed_slot),
        c => Err(invalid(format!("unknown commitment {c}"))),
    }
}

/// getBlock, getBlocks and getTransaction refuse `processed`, as agave.
fn at_least_confirmed(cfg: Option<&Value>) -> Result<(), RpcErr> {
    if cfg
        .and_then(|c| c.get("commitment"))
        .and_then(Value::as_str)
        == Some("processed")
    {
        return Err(invalid(
            "Method does not support commitment below `confirmed`",
        ));
    }
    Ok(())
}

fn get_blocks(l: &Ledger, p: &[Value]) -> Result<Value, RpcErr> {
    let start = p
        .first()
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("start_slot"))?;
    // [start], [start, end|null], [start, config], [start, end|null, config]
    let (end, cfg) = match p.get(1) {
        Some(Value::Object(_)) => (None, p.get(1)),
        Some(v) => (v.as_u64(), p.get(2)),
        None => (None, None),
    };
    at_least_confirmed(cfg)?;
    let tip = tip(l, cfg)?;
    let end = end.unwrap_or(tip).min(tip);
    if end < start {
        return Ok(json!([]));
    }
    Ok(json!(l
        .blocks
        .range(start..=end)
        .map(|(s, _)| *s)
        .collect::<Vec<_>>()))
}

/// `getBlocksWithLimit(start, limit, config?)`: at most `limit` slots with a
/// block from `start` on, up to the commitment's slot; agave refuses a limit
/// above 500,000.
fn get_blocks_with_limit(l: &Ledger, p: &[Value]) -> Result<Value, RpcErr> {
    const MAX_LIMIT: u64 = 500_000;
    let start = p
        .first()
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("start_slot"))?;
    let limit = p
        .get(1)
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("limit"))?;
    if limit > MAX_LIMIT {
        return Err(invalid(format!("Limit too large; max {MAX_LIMIT}")));
    }
    let cfg = p.get(2);
    at_least_confirmed(cfg)?;
    let tip = tip(l, cfg)?;
    // A node without long-term storage lists from what it still has.
    let start = start.max(l.first_available);
    if tip < start {
        return Ok(json!([]));
    }
    Ok(json!(l
        .blocks
        .range(start..=tip)
        .map(|(s, _)| *s)
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect::<Vec<_>>()))
}

/// Encoding, rewards and max version from a getBlock/getTransaction config
/// (or the old form, a bare encoding string).
fn tx_config(cfg: Option<&Value>) -> Result<(UiTransactionEncoding, bool, Option<u64>), RpcErr> {
    let get = |k: &str| cfg.and_then(|c| c.get(k));
    let encoding = match cfg {
        Some(Value::String(e)) => serde_json::from_value(json!(e)),
        _ => serde_json::from_value(get("encoding").cloned().unwrap_or(json!("json"))),
    }
    .map_err(invalid)?;
    let rewards = get("rewards").and_then(Value::as_bool).unwrap_or(true);
    let max_version = get("maxSupportedTransactionVersion").and_then(Value::as_u64);
    Ok((encoding, rewards, max_version))
}

fn get_block(l: &Ledger, p: &[Value]) -> Result<Value, RpcErr> {
    let slot = p
        .first()
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("slot"))?;
    let cfg = p.get(1);
    let (encoding, rewards, max_version) = tx_config(cfg)?;
    let details: TransactionDetails = serde_json::from_value(
        cfg.and_then(|c| c.get("transactionDetails"))
            .cloned()
            .unwrap_or(json!("full")),
    )
    .map_err(invalid)?;
    at_least_confirmed(cfg)?;
    let tip = tip(l, cfg.filter(|c| c.is_object()))?;
    if slot > tip {
        return Err((-32004, format!("Block not available for slot {slot}")));
    }
    if slot < l.first_available {
        // agave's RpcCustomError::BlockCleanedUp.
        return Err((
            -32001,
            format!(
                "Block {slot} cleaned up, does not exist on node. First available block: {}",
                l.first_available
            ),
        ));
    }
    let Some(b) = l.blocks.get(&slot) else {
        return Err((
            -32007,
            format!("Slot {slot} was skipped, or missing due to ledger jump to recent snapshot"),
        ));
    };
    let block = encode_block(b, encoding, details, rewards, max_version)?;
    serde_json::to_value(block).map_err(|e| (-32603, e.to_string()))
}

fn get_transaction(l: &Ledger, p: &[Value]) -> Result<Value, RpcErr> {
    let sig = p
        .first()
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("signature"))?;
    let cfg = p.get(1);
    let (encoding, _, max_version) = tx_config(cfg)?;
    at_least_confirmed(cfg)?;
    let tip = tip(l, cfg.filter(|c| c.is_object()))?;
    let found = l.blocks.range(..=tip).find_map(|(_, b)| {
        b.txs
            .iter()
            .find(|t| {
                t.tx.signatures
                    .first()
                    .is_some_and(|s| s.to_string() == sig)
            })
            .map(|t| (b, t))
    });
    let Some((b, t)) = found else {
        return Ok(Value::Null);
    };
    check_version(t, max_version)?;
    let tx = EncodedConfirmedTransactionWithStatusMeta {
        slot: b.slot,
        transaction: encode_tx(t, encoding, false, max_version.is_some())?,
        block_time: Some(b.block_time),
    };
    serde_json::to_value(tx).map_err(|e| (-32603, e.to_string()))
}

fn check_version(t: &StoredTx, max_version: Option<u64>) -> Result<(), RpcErr> {
    if matches!(t.tx.message, VersionedMessage::V0(_)) && max_version.is_none() {
        return Err((
            -32015,
            "Transaction version (0) is not supported by the requesting client. Please try the \
             request again with the following configuration parameter: \
             \"maxSupportedTransactionVersion\": 0"
                .into(),
        ));
    }
    Ok(())
}

fn encode_block(
    b: &Block,
    encoding: UiTransactionEncoding,
    details: TransactionDetails,
    show_rewards: bool,
    max_version: Option<u64>,
) -> Result<UiConfirmedBlock, RpcErr> {
    for t in &b.txs {
        check_version(t, max_version)?;
    }
    let first_sig = |t: &StoredTx| {
        t.tx.signatures
            .first()
            .map(ToString::to_string)
            .unwrap_or_default()
    };
    let (transactions, signatures) = match details {
        TransactionDetails::Full => (
            Some(
                b.txs
                    .iter()
                    .map(|t| encode_tx(t, encoding, show_rewards, max_version.is_some()))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None,
        ),
        TransactionDetails::Signatures => (None, Some(b.txs.iter().map(first_sig).collect())),
        TransactionDetails::None => (None, None),
        TransactionDetails::Accounts => (
            Some(
                b.txs
                    .iter()
                    .map(|t| encode_accounts(t, show_rewards, max_version.is_some()))
                    .collect(),
            ),
            None,
        ),
    };
    Ok(UiConfirmedBlock {
        previous_blockhash: b.previous_blockhash.clone(),
        blockhash: b.blockhash.clone(),
        parent_slot: b.parent_slot,
        transactions,
        signatures,
        rewards: show_rewards.then(Vec::new),
        num_reward_partitions: None,
        block_time: Some(b.block_time),
        block_height: Some(b.block_height),
    })
}

/// A transaction as agave's `build_json_accounts` gives it for
/// `transactionDetails: "accounts"` (whatever the encoding): its signatures
/// and every account key it loads (static, then those of its lookup tables,
/// writable first) with writable, signer and source; the meta without
/// instructions, logs, loaded addresses, return data or compute units
/// (`build_simple_ui_transaction_status_meta`). Not modelled: a legacy
/// message's reserved keys (sysvars, builtins) shown read-only when asked
/// writable; such keys are not what a payment touches.
fn encode_accounts(
    t: &StoredTx,
    show_rewards: bool,
    with_version: bool,
) -> EncodedTransactionWithStatusMeta {
    let source = |static_len: usize, i: usize| {
        Some(if i < static_len {
            ParsedAccountSource::Transaction
        } else {
            ParsedAccountSource::LookupTable
        })
    };
    let account_keys: Vec<ParsedAccount> = match &t.tx.message {
        VersionedMessage::Legacy(m) => m
            .account_keys
            .iter()
            .enumerate()
            .map(|(i, key)| ParsedAccount {
                pubkey: key.to_string(),
                writable: m.is_maybe_writable(i, None),
                signer: m.is_signer(i),
                source: source(m.account_keys.len(), i),
            })
            .collect(),
        VersionedMessage::V0(m) => {
            let reserved = std::collections::HashSet::new();
            let loaded = LoadedMessage::new_borrowed(m, &t.meta.loaded_addresses, &reserved);
            loaded
                .account_keys()
                .iter()
                .enumerate()
                .map(|(i, key)| ParsedAccount {
                    pubkey: key.to_string(),
                    writable: loaded.is_writable(i),
                    signer: loaded.is_signer(i),
                    source: source(m.account_keys.len(), i),
                })
                .collect()
        }
    };
    let mut meta = UiTransactionStatusMeta::from(t.meta.clone());
    meta.inner_instructions = OptionSerializer::Skip;
    meta.log_messages = OptionSerializer::Skip;
    meta.loaded_addresses = OptionSerializer::Skip;
    meta.return_data = OptionSerializer::Skip;
    meta.compute_units_consumed = OptionSerializer::Skip;
    meta.cost_units = OptionSerializer::Skip;
    if !show_rewards {
        meta.rewards = OptionSerializer::Skip;
    }
    EncodedTransactionWithStatusMeta {
        transaction: EncodedTransaction::Accounts(UiAccountsList {
            signatures: t.tx.signatures.iter().map(ToString::to_string).collect(),
            account_keys,
        }),
        meta: Some(meta),
        version: with_version.then(|| t.tx.version()),
    }
}

fn encode_tx(
    t: &StoredTx,
    encoding: UiTransactionEncoding,
    show_rewards: bool,
    with_version: bool,
) -> Result<EncodedTransactionWithStatusMeta, RpcErr> {
    let binary = || bincode::serialize(&t.tx).map_err(|e| (-32603, e.to_string()));
    let transaction = match encoding {
        UiTransactionEncoding::Base64 => EncodedTransaction::Binary(
            BASE64_STANDARD.encode(binary()?),
            TransactionBinaryEncoding::Base64,
        ),
        UiTransactionEncoding::Base58 | UiTransactionEncoding::Binary => {
            EncodedTransaction::Binary(
                bs58::encode(binary()?).into_string(),
                TransactionBinaryEncoding::Base58,
            )
        }
        UiTransactionEncoding::Json => EncodedTransaction::Json(UiTransaction {
            signatures: t.tx.signatures.iter().map(ToString::to_string).collect(),
            message: UiMessage::Raw(UiRawMessage {
                header: *t.tx.message.header(),
                account_keys: t
                    .tx
                    .message
                    .static_account_keys()
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                recent_blockhash: t.tx.message.recent_blockhash().to_string(),
                instructions: t
                    .tx
                    .message
                    .instructions()
                    .iter()
                    .map(|ix| UiCompiledInstruction::from(ix, None))
                    .collect(),
                address_table_lookups: match &t.tx.message {
                    VersionedMessage::V0(m) => {
                        Some(m.address_table_lookups.iter().map(Into::into).collect())
                    }
                    VersionedMessage::Legacy(_) => None,
                },
            }),
        }),
        UiTransactionEncoding::JsonParsed => {
            return Err(invalid("jsonParsed is not served by the test node"))
        }
    };
    // The client-types crate's own conversion: err, status, balances,
    // loadedAddresses, ... exactly as agave serializes them.
    let mut meta = UiTransactionStatusMeta::from(t.meta.clone());
    if !show_rewards {
        meta.rewards = OptionSerializer::Skip;
    }
    Ok(EncodedTransactionWithStatusMeta {
        transaction,
        meta: Some(meta),
        version: with_version.then(|| t.tx.version()),
    })
}

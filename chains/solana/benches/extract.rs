//! Extraction time for a `getBlock` answer of 1,500 transactions (mainnet's
//! load: about 70% votes, the rest v0 and legacy user transactions with
//! logs, inner instructions, lookup-table accounts and token balances)
//! against 10^6 watched addresses, and the share of it that is JSON
//! decoding. `cargo bench -p paywatch-solana --bench extract`.
//!
//! The block is built here from real wire transactions, in the `base64`
//! encoding the watcher asks for and in the `json` one, and decoded with
//! Solana's own RPC types exactly as the watcher does; 20 of its payments go
//! to watched addresses.

use std::time::{Duration, Instant};

use base64::Engine as _;
use paywatch_core::{Network, WatchSet};
use paywatch_solana::{decode_get_block, scan_block, watch_key};
use serde_json::{json, Value};
use solana_address::Address;
use solana_message::compiled_instruction::CompiledInstruction;
use solana_message::v0::MessageAddressTableLookup;
use solana_message::{legacy, v0, MessageHeader, VersionedMessage};
use solana_signature::Signature;
use solana_transaction::versioned::VersionedTransaction;

const TRANSACTIONS: usize = 1_500;
const VOTE_SHARE_PERCENT: usize = 70;
const WATCHED: usize = 1_000_000;
const PAID: usize = 20;
const ROUNDS: usize = 60;

const VOTE_PROGRAM: &str = "Vote111111111111111111111111111111111111111";
const SYSTEM_PROGRAM: &str = "11111111111111111111111111111111";
const COMPUTE_BUDGET: &str = "ComputeBudget111111111111111111111111111111";
const TOKEN_PROGRAM: &str = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
const USDC_MINT: &str = "EPjFWrd5AufqSSqeM2qC1xg4DKmdGUF4vVBKNJ4TBJ2Xv";

/// A deterministic stream of 32-byte keys (splitmix64), base58 as RPC
/// gives them.
struct Keys(u64);

impl Keys {
    fn raw(&mut self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for chunk in out.chunks_mut(8) {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        out
    }

    fn next(&mut self) -> String {
        bs58::encode(self.raw()).into_string()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut d = Vec::with_capacity(n + 32);
        while d.len() < n {
            d.extend(self.raw());
        }
        d.truncate(n);
        d
    }

    fn data(&mut self, n: usize) -> String {
        bs58::encode(self.bytes(n)).into_string()
    }
}

fn meta(pre: &[u64], post: &[u64], logs: Vec<String>, extra: Value) -> Value {
    let mut m = json!({
        "err": null,
        "status": {"Ok": null},
        "fee": 5000,
        "preBalances": pre,
        "postBalances": post,
        "innerInstructions": [],
        "logMessages": logs,
        "preTokenBalances": [],
        "postTokenBalances": [],
        "rewards": null,
        "loadedAddresses": {"writable": [], "readonly": []},
        "computeUnitsConsumed": 2100,
    });
    if let (Some(m), Value::Object(extra)) = (m.as_object_mut(), extra) {
        m.extend(extra);
    }
    m
}

/// One transaction, encoding-neutral: what both the `json` and the `base64`
/// answers are made from.
struct Tx {
    signature: [u8; 64],
    header: MessageHeader,
    keys: Vec<[u8; 32]>,
    blockhash: [u8; 32],
    instructions: Vec<CompiledInstruction>,
    /// v0 only: (table, writable indexes, readonly indexes).
    lookup: Option<([u8; 32], Vec<u8>, Vec<u8>)>,
    meta: Value,
}

fn b58(k: &[u8]) -> String {
    bs58::encode(k).into_string()
}

impl Tx {
    /// As agave's `json` encoding lays it out.
    fn json(&self) -> Value {
        let instructions: Vec<Value> = self
            .instructions
            .iter()
            .map(|i| {
                json!({"programIdIndex": i.program_id_index, "accounts": i.accounts,
                            "data": b58(&i.data), "stackHeight": null})
            })
            .collect();
        let mut message = json!({
            "header": {"numRequiredSignatures": self.header.num_required_signatures,
                       "numReadonlySignedAccounts": self.header.num_readonly_signed_accounts,
                       "numReadonlyUnsignedAccounts": self.header.num_readonly_unsigned_accounts},
            "accountKeys": self.keys.iter().map(|k| b58(k)).collect::<Vec<_>>(),
            "recentBlockhash": b58(&self.blockhash),
            "instructions": instructions,
        });
        if let Some((table, w, r)) = &self.lookup {
            message["addressTableLookups"] =
                json!([{"accountKey": b58(table), "writableIndexes": w, "readonlyIndexes": r}]);
        }
        json!({
            "transaction": {"signatures": [b58(&self.signature)], "message": message},
            "meta": self.meta,
            "version": if self.lookup.is_some() { json!(0) } else { json!("legacy") },
        })
    }

    /// As agave's `base64` encoding gives it (what the watcher asks for):
    /// the wire transaction, bincode, then base64.
    fn base64(&self) -> Value {
        let keys: Vec<Address> = self.keys.iter().map(|k| Address::from(*k)).collect();
        let hash = solana_message::Hash::new_from_array(self.blockhash);
        let message = match &self.lookup {
            Some((table, w, r)) => VersionedMessage::V0(v0::Message {
                header: self.header,
                account_keys: keys,
                recent_blockhash: hash,
                instructions: self.instructions.clone(),
                address_table_lookups: vec![MessageAddressTableLookup {
                    account_key: Address::from(*table),
                    writable_indexes: w.clone(),
                    readonly_indexes: r.clone(),
                }],
            }),
            None => VersionedMessage::Legacy(legacy::Message {
                header: self.header,
                account_keys: keys,
                recent_blockhash: hash,
                instructions: self.instructions.clone(),
            }),
        };
        let tx = VersionedTransaction {
            signatures: vec![Signature::from(self.signature)],
            message,
        };
        let wire = bincode::serialize(&tx).expect("serializes");
        json!({
            "transaction": [base64::engine::general_purpose::STANDARD.encode(wire), "base64"],
            "meta": self.meta,
            "version": if self.lookup.is_some() { json!(0) } else { json!("legacy") },
        })
    }
}

fn header(readonly_unsigned: u8) -> MessageHeader {
    MessageHeader {
        num_required_signatures: 1,
        num_readonly_signed_accounts: 0,
        num_readonly_unsigned_accounts: readonly_unsigned,
    }
}

fn instruction(program: u8, accounts: Vec<u8>, data: Vec<u8>) -> CompiledInstruction {
    CompiledInstruction {
        program_id_index: program,
        accounts,
        data,
    }
}

fn key(text: &str) -> [u8; 32] {
    bs58::decode(text)
        .into_vec()
        .expect("base58")
        .try_into()
        .expect("32 bytes")
}

fn signature(keys: &mut Keys) -> [u8; 64] {
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&keys.raw());
    sig[32..].copy_from_slice(&keys.raw());
    sig
}

/// A validator's TowerSync vote, as most of a mainnet block is.
fn vote(keys: &mut Keys) -> Tx {
    Tx {
        signature: signature(keys),
        header: header(1),
        keys: vec![keys.raw(), keys.raw(), key(VOTE_PROGRAM)],
        blockhash: keys.raw(),
        instructions: vec![instruction(2, vec![1, 0], keys.bytes(140))],
        lookup: None,
        meta: meta(
            &[48_000_000_000, 27_000_000, 1],
            &[47_999_995_000, 27_000_000, 1],
            vec![
                format!("Program {VOTE_PROGRAM} invoke [1]"),
                format!("Program {VOTE_PROGRAM} success"),
            ],
            json!({}),
        ),
    }
}

/// A user transaction: a v0 swap-like call with lookup-table accounts,
/// inner instructions, a page of logs and USDC balances, or (every fourth)
/// a plain legacy SOL transfer. `paid` is the recipient of its lamports.
fn user(keys: &mut Keys, n: usize, paid: [u8; 32]) -> Tx {
    let payer = keys.raw();
    if n.is_multiple_of(4) {
        return Tx {
            signature: signature(keys),
            header: header(2),
            keys: vec![payer, paid, key(COMPUTE_BUDGET), key(SYSTEM_PROGRAM)],
            blockhash: keys.raw(),
            instructions: vec![
                instruction(2, vec![], vec![2, 0x40, 0x0d, 0x03, 0]),
                instruction(3, vec![0, 1], keys.bytes(12)),
            ],
            lookup: None,
            meta: meta(
                &[9_000_000_000, 1_000_000, 1, 1],
                &[8_930_992_500, 70_000_000, 1, 1],
                [COMPUTE_BUDGET, SYSTEM_PROGRAM]
                    .iter()
                    .flat_map(|p| {
                        [
                            format!("Program {p} invoke [1]"),
                            format!("Program {p} success"),
                        ]
                    })
                    .collect(),
                json!({}),
            ),
        };
    }
    let program = keys.raw();
    let program_text = b58(&program);
    let mut static_keys = vec![payer, paid];
    static_keys.extend((0..8).map(|_| keys.raw()));
    static_keys.extend([key(COMPUTE_BUDGET), key(TOKEN_PROGRAM), program]);
    let writable: Vec<String> = (0..4).map(|_| keys.next()).collect();
    let readonly: Vec<String> = (0..4).map(|_| keys.next()).collect();
    let accounts = static_keys.len() + writable.len() + readonly.len();
    let pre: Vec<u64> = (0..accounts)
        .map(|i| 2_039_280 + i as u64 * 1_000)
        .collect();
    let mut post = pre.clone();
    post[0] -= 25_000 + 3_000_000;
    post[1] += 3_000_000;
    let logs: Vec<String> = (0..24)
        .map(|i| match i % 4 {
            0 => format!("Program {program_text} invoke [1]"),
            1 => "Program log: Instruction: Route".to_owned(),
            2 => format!("Program {program_text} consumed 48213 of 1399700 compute units"),
            _ => format!("Program {program_text} success"),
        })
        .collect();
    let token = |index: u8, owner: &[u8; 32], amount: u64| {
        json!({"accountIndex": index, "mint": USDC_MINT, "owner": b58(owner),
               "programId": TOKEN_PROGRAM,
               "uiTokenAmount": {"amount": amount.to_string(), "decimals": 6,
                                 "uiAmount": amount / 1_000_000,
                                 "uiAmountString": format!("{}.{:06}", amount / 1_000_000,
                                                           amount % 1_000_000)}})
    };
    let extra = json!({
        "innerInstructions": [{"index": 1, "instructions": (0..6u8).map(|i| json!(
            {"programIdIndex": 11, "accounts": [2 + i, 3 + i, 0], "data": keys.data(9),
             "stackHeight": 2})).collect::<Vec<_>>()}],
        "loadedAddresses": {"writable": writable, "readonly": readonly},
        "preTokenBalances": [token(2, &static_keys[3], 50_000_000),
                             token(4, &static_keys[5], 1_000)],
        "postTokenBalances": [token(2, &static_keys[3], 40_000_000),
                              token(4, &static_keys[5], 10_001_000)],
    });
    Tx {
        signature: signature(keys),
        header: header(3),
        keys: static_keys,
        blockhash: keys.raw(),
        instructions: vec![
            instruction(10, vec![], vec![2, 0x40, 0x0d, 0x03, 0]),
            instruction(12, (0..16).collect(), keys.bytes(60)),
        ],
        lookup: Some((keys.raw(), vec![0, 1, 2, 3], vec![4, 5, 6, 7])),
        meta: meta(&pre, &post, logs, extra),
    }
}

fn block(keys: &mut Keys, paid: &[String]) -> Vec<Tx> {
    let votes = TRANSACTIONS * VOTE_SHARE_PERCENT / 100;
    let mut txs = Vec::with_capacity(TRANSACTIONS);
    let mut users = 0;
    for n in 0..TRANSACTIONS {
        // Votes and user transactions interleave, as a leader packs them.
        if n * votes / TRANSACTIONS == (n + 1) * votes / TRANSACTIONS
            || users >= TRANSACTIONS - votes
        {
            txs.push(vote(keys));
        } else {
            let to = paid.get(users).map_or_else(|| keys.raw(), |p| key(p));
            txs.push(user(keys, users, to));
            users += 1;
        }
    }
    txs
}

fn answer(keys: &mut Keys, txs: &[Tx], encode: fn(&Tx) -> Value) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "result": {
        "blockhash": keys.next(), "previousBlockhash": keys.next(), "parentSlot": 349_179_819u64,
        "blockTime": 1_750_884_182i64, "blockHeight": 327_000_000u64,
        "transactions": txs.iter().map(encode).collect::<Vec<_>>(),
    }});
    serde_json::to_vec(&body).expect("serializes")
}

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

/// Milliseconds with two decimals, from integers.
fn ms(d: Duration) -> String {
    let us = d.as_micros();
    format!("{}.{:02}", us / 1000, us % 1000 / 10)
}

fn main() {
    let mut keys = Keys(0x5eed);
    let t = Instant::now();
    let set = WatchSet::new(Network::Solana).keyed(watch_key());
    let watched: Vec<String> = (0..WATCHED).map(|_| keys.next()).collect();
    set.extend(watched.iter().map(String::as_str));
    let paid: Vec<String> = watched.iter().step_by(WATCHED / PAID).cloned().collect();
    println!(
        "watch set: {} addresses, built in {} ms",
        set.len(),
        t.elapsed().as_millis()
    );
    let txs = block(&mut keys, &paid);
    for (encoding, encode) in [
        (
            "base64 (what the watcher asks for)",
            Tx::base64 as fn(&Tx) -> Value,
        ),
        ("json (what extract also reads)", Tx::json),
    ] {
        let raw = answer(&mut keys, &txs, encode);
        println!(
            "\ngetBlock, {encoding}: {TRANSACTIONS} transactions \
             ({VOTE_SHARE_PERCENT}% votes), {} kB",
            raw.len() / 1000
        );
        measure(&raw, &set);
    }
}

/// The watcher's path, timed in parts: the HTTP body to Solana's types
/// (the envelope's error checked on the way), then the scan.
fn measure(raw: &[u8], set: &WatchSet) {
    let (mut decode, mut scan, mut total) = (vec![], vec![], vec![]);
    let mut found = 0;
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        let block = decode_get_block(raw).expect("a block");
        let t1 = Instant::now();
        let transfers = scan_block(&block, &set.read()).expect("scans");
        let t2 = Instant::now();
        found = transfers.len();
        decode.push(t1 - t0);
        scan.push(t2 - t1);
        total.push(t2 - t0);
    }
    assert_eq!(found, PAID, "every watched payment found, nothing else");
    let (decode, scan, total) = (median(decode), median(scan), median(total));
    println!("  {ROUNDS} rounds, medians:");
    println!("  JSON decode to Solana's types {:>7} ms", ms(decode));
    println!("  scan ({found} payments found)     {:>7} ms", ms(scan));
    println!(
        "  total                         {:>7} ms per block (aim < 20 ms; slot time 400 ms)",
        ms(total)
    );
    let per_mille = decode.as_micros() * 1000 / total.as_micros().max(1);
    println!(
        "  JSON decode share             {:>5}.{} %",
        per_mille / 10,
        per_mille % 10
    );
}

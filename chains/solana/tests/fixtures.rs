//! Recorded mainnet `getTransaction` answers (and variants of them) read
//! through `extract`, the scan path the watcher uses.

use paywatch_core::{Amount, Asset, AssetId, Network, WatchSet};
use paywatch_solana::{
    extract, parse_address, parse_block, scan_block, watch_key, AddressError, ExtractError,
    ScanError, TOKEN_INDEX,
};
use serde_json::{json, Value};

const SOL_FIXTURE: &str = include_str!("fixtures/gemwallet_transfer_sol_with_compute.json");
const USDC_FIXTURE: &str = include_str!("fixtures/gemwallet_usdc_transfer.json");
const LAMPORTS_SENT: u64 = 69_000_000;

fn load(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn file(name: &str, json: &Value) -> (String, Vec<u8>) {
    (name.to_owned(), serde_json::to_vec(json).unwrap())
}

fn keys(result: &Value) -> Vec<String> {
    result["transaction"]["message"]["accountKeys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect()
}

fn balances(result: &Value, which: &str) -> Vec<u64> {
    result["meta"][which]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect()
}

/// The account whose balance rose by exactly the amount sent, worked out
/// from the fixture rather than copied into the test.
fn sol_recipient(result: &Value) -> (usize, String) {
    let pre = balances(result, "preBalances");
    let post = balances(result, "postBalances");
    let index = (0..pre.len())
        .find(|&i| post[i].checked_sub(pre[i]) == Some(LAMPORTS_SENT))
        .unwrap();
    (index, keys(result)[index].clone())
}

#[test]
fn the_sol_transfer_pays_its_recipient_69_000_000_lamports() {
    let answer = load(SOL_FIXTURE);
    let result = &answer["result"];
    let (index, recipient) = sol_recipient(result);
    let report = extract(
        &[file("sol.json", &answer)],
        std::slice::from_ref(&recipient),
    )
    .unwrap();
    assert_eq!(report.payments.len(), 1, "{report:?}");
    let p = &report.payments[0];
    assert_eq!(p.slot, result["slot"].as_u64());
    let t = &p.transfer;
    assert_eq!(t.network, Network::Solana);
    assert_eq!(t.asset, AssetId::Known(Asset::Sol));
    assert_eq!(t.amount, Amount(u128::from(LAMPORTS_SENT)));
    assert_eq!(t.to, recipient);
    assert_eq!(t.index, u32::try_from(index).unwrap());
    assert_eq!(
        t.txid,
        result["transaction"]["signatures"][0].as_str().unwrap()
    );
    assert_eq!(t.from.as_deref(), Some(keys(result)[0].as_str()));
    assert!(t.success);

    // The bare result reads the same as the envelope.
    let bare = extract(&[file("bare.json", result)], &[recipient]).unwrap();
    assert_eq!(bare, report);
}

#[test]
fn the_fee_payers_decrease_and_unwatched_accounts_give_nothing() {
    let answer = load(SOL_FIXTURE);
    let payer = keys(&answer["result"])[0].clone();
    let report = extract(&[file("sol.json", &answer)], &[payer]).unwrap();
    assert!(report.payments.is_empty(), "{report:?}");

    let unrelated = "So11111111111111111111111111111111111111112".to_owned();
    for fixture in [SOL_FIXTURE, USDC_FIXTURE] {
        let report = extract(
            &[file("f.json", &load(fixture))],
            std::slice::from_ref(&unrelated),
        )
        .unwrap();
        assert!(report.payments.is_empty(), "{report:?}");
    }
}

#[test]
fn the_usdc_transfer_pays_the_owner_tokens_and_no_sol() {
    let answer = load(USDC_FIXTURE);
    let result = &answer["result"];
    // The recipient owner: the owner of the token account that appears
    // only after the transaction (its associated account was created).
    let post = result["meta"]["postTokenBalances"].as_array().unwrap();
    let pre = result["meta"]["preTokenBalances"].as_array().unwrap();
    let created = post
        .iter()
        .find(|p| !pre.iter().any(|q| q["accountIndex"] == p["accountIndex"]))
        .unwrap();
    let owner = created["owner"].as_str().unwrap().to_owned();
    let sender = pre[0]["owner"].as_str().unwrap();
    let report = extract(&[file("usdc.json", &answer)], std::slice::from_ref(&owner)).unwrap();
    assert_eq!(report.payments.len(), 1, "{report:?}");
    let t = &report.payments[0].transfer;
    // Circle's mint: real USDC, another method's asset (USDC on Ethereum),
    // sent to a Solana address by mistake. A person returns it; spam, by
    // any other mint, moves nothing.
    assert_eq!(t.asset, AssetId::Known(Asset::Usdc));
    let mut look_alike = answer.clone();
    for balances in ["preTokenBalances", "postTokenBalances"] {
        for b in look_alike["result"]["meta"][balances]
            .as_array_mut()
            .unwrap()
        {
            b["mint"] = json!("Fake1111111111111111111111111111111111111111");
        }
    }
    let spam = extract(
        &[file("spam.json", &look_alike)],
        std::slice::from_ref(&owner),
    )
    .unwrap();
    assert_eq!(
        spam.payments[0].transfer.asset,
        AssetId::Token {
            contract: "Fake1111111111111111111111111111111111111111".to_owned()
        },
        "a look-alike's mint is never the issuer's"
    );
    assert_eq!(t.to, owner);
    assert_eq!(t.from.as_deref(), Some(sender));
    assert_eq!(t.amount, Amount(100_000));
    let account = u32::try_from(created["accountIndex"].as_u64().unwrap()).unwrap();
    assert_eq!(t.index, TOKEN_INDEX | account);
}

#[test]
fn a_failed_transaction_pays_nothing() {
    for fixture in [SOL_FIXTURE, USDC_FIXTURE] {
        let mut answer = load(fixture);
        let err = json!({"InstructionError": [2, {"Custom": 1}]});
        answer["result"]["meta"]["err"] = err.clone();
        answer["result"]["meta"]["status"] = json!({ "Err": err });
        let result = &answer["result"];
        let everyone = keys(result);
        let report = extract(&[file("failed.json", &answer)], &everyone).unwrap();
        assert!(report.payments.is_empty(), "{report:?}");
        assert_eq!(
            report.failed_transactions,
            [result["transaction"]["signatures"][0].as_str().unwrap()]
        );
    }
}

/// The SOL fixture as a v0 transaction whose recipient comes from a lookup
/// table: the static keys lose it, and the balances list it after them.
fn v0_variant() -> (Value, String) {
    let mut answer = load(SOL_FIXTURE);
    let result = &mut answer["result"];
    let (index, recipient) = sol_recipient(result);
    let mut static_keys = keys(result);
    static_keys.remove(index);
    let reorder = |b: Vec<u64>| {
        let mut b = b;
        let moved = b.remove(index);
        b.push(moved);
        b
    };
    let pre = reorder(balances(result, "preBalances"));
    let post = reorder(balances(result, "postBalances"));
    // Instructions name accounts by index: the later static keys move up
    // one, and the recipient goes after them all.
    let loaded_at = static_keys.len();
    let moved = |i: u64| {
        let i = usize::try_from(i).unwrap();
        match i.cmp(&index) {
            std::cmp::Ordering::Less => i,
            std::cmp::Ordering::Equal => loaded_at,
            std::cmp::Ordering::Greater => i - 1,
        }
    };
    for ix in result["transaction"]["message"]["instructions"]
        .as_array_mut()
        .unwrap()
    {
        ix["programIdIndex"] = json!(moved(ix["programIdIndex"].as_u64().unwrap()));
        let accounts: Vec<usize> = ix["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| moved(a.as_u64().unwrap()))
            .collect();
        ix["accounts"] = json!(accounts);
    }
    result["transaction"]["message"]["accountKeys"] = json!(static_keys);
    result["transaction"]["message"]["addressTableLookups"] = json!([{
        "accountKey": "AddressLookupTab1e1111111111111111111111111",
        "writableIndexes": [7],
        "readonlyIndexes": []
    }]);
    result["meta"]["preBalances"] = json!(pre);
    result["meta"]["postBalances"] = json!(post);
    result["meta"]["loadedAddresses"] = json!({"writable": [recipient], "readonly": []});
    result["version"] = json!(0);
    (answer, recipient)
}

#[test]
fn a_v0_transaction_pays_an_account_from_its_lookup_table() {
    let (answer, recipient) = v0_variant();
    let accounts = keys(&answer["result"]).len();
    let report = extract(
        &[file("v0.json", &answer)],
        std::slice::from_ref(&recipient),
    )
    .unwrap();
    assert_eq!(report.payments.len(), 1, "{report:?}");
    let t = &report.payments[0].transfer;
    assert_eq!(t.to, recipient);
    assert_eq!(t.amount, Amount(u128::from(LAMPORTS_SENT)));
    // Loaded accounts come after every static key.
    assert_eq!(t.index, u32::try_from(accounts).unwrap());

    // Without its loaded addresses the balances do not line up: refused.
    let mut trimmed = answer;
    trimmed["result"]["meta"]["loadedAddresses"] = json!({"writable": [], "readonly": []});
    let e = extract(&[file("v0.json", &trimmed)], &[recipient]).unwrap_err();
    assert!(
        matches!(
            e,
            ExtractError::Scan {
                source: ScanError::BalanceCount { .. },
                ..
            }
        ),
        "{e:?}"
    );
}

fn block_of(answers: &[Value]) -> Value {
    let transactions: Vec<Value> = answers
        .iter()
        .map(|a| {
            let r = &a["result"];
            json!({"transaction": r["transaction"], "meta": r["meta"], "version": r["version"]})
        })
        .collect();
    json!({
        "blockhash": "7LPW7gdpDnb4LuqqQC5TjbWCB7kqZoHa99eswHoUQ5Bw",
        "previousBlockhash": "Dt2Kh73s1EUbQf1go8VyBqH6v91H6QG5JxBFPhpjFRqz",
        "parentSlot": 349179819,
        "blockTime": 1750884182,
        "blockHeight": 327000000,
        "transactions": transactions,
    })
}

#[test]
fn a_block_reads_like_its_transactions_and_needs_its_hashes() {
    let sol = load(SOL_FIXTURE);
    let (v0, _) = v0_variant();
    let usdc = load(USDC_FIXTURE);
    let (_, recipient) = sol_recipient(&sol["result"]);
    let owner = "3UJQqKq8Xyx4aVRmHgEwpQZiW7toYRQCTy6Bgp1RdKnK".to_owned();
    let block = block_of(&[sol.clone(), v0, usdc.clone()]);
    let envelope = json!({"jsonrpc": "2.0", "id": 1, "result": block});
    let watch = [recipient.clone(), owner];
    let report = extract(&[file("block.json", &envelope)], &watch).unwrap();
    // The v0 variant keeps the legacy one's signature, so its payment (at
    // another index) is a second one; the token payment makes three.
    assert_eq!(report.payments.len(), 3, "{report:?}");
    assert!(report
        .payments
        .iter()
        .all(|p| p.blockhash.as_deref() == block["blockhash"].as_str()));

    // The same payments from the block and from its transactions alone are
    // reported once.
    let both = extract(
        &[
            file("block.json", &envelope),
            file("sol.json", &sol),
            file("usdc.json", &usdc),
        ],
        &watch,
    )
    .unwrap();
    assert_eq!(both.payments.len(), 3, "{both:?}");

    let set = WatchSet::new(Network::Solana).keyed(watch_key());
    set.insert(&recipient);
    let parsed = parse_block(block.clone()).unwrap();
    assert_eq!(scan_block(&parsed, &set.read()).unwrap().len(), 2);

    for field in ["blockhash", "previousBlockhash"] {
        let mut broken = block.clone();
        broken.as_object_mut().unwrap().remove(field);
        assert_eq!(
            parse_block(broken).unwrap_err(),
            ScanError::MissingBlockField { field }
        );
        let mut bad = block.clone();
        bad[field] = json!("not-a-hash");
        let parsed = parse_block(bad).unwrap();
        assert!(
            matches!(
                scan_block(&parsed, &set.read()),
                Err(ScanError::BadBlockHash { .. })
            ),
            "{field}"
        );
    }

    let mut signatures_only = block;
    signatures_only
        .as_object_mut()
        .unwrap()
        .remove("transactions");
    let parsed = parse_block(signatures_only).unwrap();
    assert_eq!(
        scan_block(&parsed, &set.read()).unwrap_err(),
        ScanError::NoTransactions
    );
}

#[test]
fn inconsistent_answers_are_refused() {
    let (_, recipient) = sol_recipient(&load(SOL_FIXTURE)["result"]);
    let mut short = load(SOL_FIXTURE);
    short["result"]["meta"]["postBalances"]
        .as_array_mut()
        .unwrap()
        .pop();
    let e = extract(
        &[file("short.json", &short)],
        std::slice::from_ref(&recipient),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("postBalances has 3 entries for 4 accounts"),
        "{e}"
    );

    let mut far = load(USDC_FIXTURE);
    far["result"]["meta"]["postTokenBalances"][0]["accountIndex"] = json!(40);
    let e = extract(&[file("far.json", &far)], std::slice::from_ref(&recipient)).unwrap_err();
    assert!(
        matches!(
            e,
            ExtractError::Scan {
                source: ScanError::TokenAccountOutOfRange { index: 40, .. },
                ..
            }
        ),
        "{e:?}"
    );

    let mut floaty = load(USDC_FIXTURE);
    floaty["result"]["meta"]["postTokenBalances"][0]["uiTokenAmount"]["amount"] = json!("0.1");
    let e = extract(
        &[file("floaty.json", &floaty)],
        std::slice::from_ref(&recipient),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            ExtractError::Scan {
                source: ScanError::BadTokenAmount { .. },
                ..
            }
        ),
        "{e:?}"
    );

    let null = json!({"jsonrpc": "2.0", "id": 1, "result": null});
    let e = extract(
        &[file("null.json", &null)],
        std::slice::from_ref(&recipient),
    )
    .unwrap_err();
    assert!(e.to_string().contains("null.json"), "{e}");
    let e = extract(&[file("junk.json", &json!([1, 2]))], &[recipient]).unwrap_err();
    assert!(matches!(e, ExtractError::File { .. }), "{e:?}");
}

#[test]
fn addresses_are_parsed_strictly() {
    assert_eq!(parse_address("  ").unwrap_err(), AddressError::Empty);
    for (input, found) in [
        ("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt10", '0'),
        ("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1O", 'O'),
        ("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDtIv", 'I'),
        ("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDtlv", 'l'),
        ("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDté", 'é'),
        ("EPjFWdd5AufqSSqeM2qN1 xzybapC8G4wEGGkZwyTDt1v", ' '),
        ("0x3UJQqKq8Xyx4aVRmHgEwpQZiW7toYRQCTy6Bgp1R", '0'),
    ] {
        let e = parse_address(input).unwrap_err();
        assert_eq!(
            e,
            AddressError::Base58Character {
                input: input.to_owned(),
                found
            }
        );
        assert!(e.to_string().contains("not a base58 character"), "{e}");
    }
    for (input, length) in [
        ("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGG", 26),
        ("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1vv", 33),
        // A stray leading '1' is one more (zero) byte.
        ("1EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", 33),
        ("1BoatSLRHtKNngkdXEeobR76b53LETtpyT", 25),
        ("abc", 3),
    ] {
        let e = parse_address(input).unwrap_err();
        assert!(
            matches!(&e, AddressError::Length { length: l, .. } if *l == length),
            "{input}: {e:?}"
        );
        assert!(e.to_string().contains("expected 32"), "{e}");
    }
    // Without a checksum, not every slip is caught: dropping the last
    // character of this one still leaves 32 bytes (another key).
    assert!(parse_address("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1").is_ok());
    let long = "z".repeat(500);
    let msg = parse_address(&long).unwrap_err().to_string();
    assert!(msg.len() < 200, "{msg}");

    let e = extract(&[], &["nope0".to_owned()]).unwrap_err();
    assert!(matches!(e, ExtractError::Address(_)), "{e:?}");
    let e = extract(&[], &[]).unwrap_err();
    assert!(matches!(e, ExtractError::NothingWatched), "{e:?}");
}

fn b58(text: &str) -> Vec<u8> {
    bs58::decode(text).into_vec().unwrap()
}

/// One byte of compact-u16 length: every list here is shorter than 128.
fn short_len(out: &mut Vec<u8>, len: usize) {
    out.push(u8::try_from(len).ok().filter(|l| *l < 0x80).unwrap());
}

/// The wire form of a json-encoded transaction (the fixtures' own), legacy
/// or v0 by whether it has address table lookups.
fn wire(tx: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    let signatures = tx["signatures"].as_array().unwrap();
    short_len(&mut out, signatures.len());
    for s in signatures {
        out.extend(b58(s.as_str().unwrap()));
    }
    let message = &tx["message"];
    let lookups = message["addressTableLookups"].as_array();
    if lookups.is_some() {
        out.push(0x80);
    }
    let header = &message["header"];
    for field in [
        "numRequiredSignatures",
        "numReadonlySignedAccounts",
        "numReadonlyUnsignedAccounts",
    ] {
        out.push(u8::try_from(header[field].as_u64().unwrap()).unwrap());
    }
    let keys = message["accountKeys"].as_array().unwrap();
    short_len(&mut out, keys.len());
    for k in keys {
        out.extend(b58(k.as_str().unwrap()));
    }
    out.extend(b58(message["recentBlockhash"].as_str().unwrap()));
    let instructions = message["instructions"].as_array().unwrap();
    short_len(&mut out, instructions.len());
    for ix in instructions {
        out.push(u8::try_from(ix["programIdIndex"].as_u64().unwrap()).unwrap());
        let accounts = ix["accounts"].as_array().unwrap();
        short_len(&mut out, accounts.len());
        out.extend(
            accounts
                .iter()
                .map(|a| u8::try_from(a.as_u64().unwrap()).unwrap()),
        );
        let data = b58(ix["data"].as_str().unwrap());
        short_len(&mut out, data.len());
        out.extend(data);
    }
    if let Some(lookups) = lookups {
        short_len(&mut out, lookups.len());
        for l in lookups {
            out.extend(b58(l["accountKey"].as_str().unwrap()));
            for which in ["writableIndexes", "readonlyIndexes"] {
                let indexes = l[which].as_array().unwrap();
                short_len(&mut out, indexes.len());
                out.extend(
                    indexes
                        .iter()
                        .map(|i| u8::try_from(i.as_u64().unwrap()).unwrap()),
                );
            }
        }
    }
    out
}

/// Standard padded base64, enough for a test (the crate is not a
/// dependency of ours).
fn base64(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(DIGITS[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn base64_blocks_read_like_json_ones() {
    let sol = load(SOL_FIXTURE);
    let (v0, recipient) = v0_variant();
    let usdc = load(USDC_FIXTURE);
    let owner = "3UJQqKq8Xyx4aVRmHgEwpQZiW7toYRQCTy6Bgp1RdKnK".to_owned();
    let watch = [recipient, owner];
    let json_block = block_of(&[sol, v0, usdc]);
    let mut binary_block = json_block.clone();
    for tx in binary_block["transactions"].as_array_mut().unwrap() {
        tx["transaction"] = json!([base64(&wire(&tx["transaction"])), "base64"]);
    }
    let json_report = extract(&[file("json.json", &json_block)], &watch).unwrap();
    let binary_report = extract(&[file("base64.json", &binary_block)], &watch).unwrap();
    assert_eq!(json_report.payments.len(), 3, "{json_report:?}");
    assert_eq!(binary_report, json_report);

    let mut garbled = binary_block;
    garbled["transactions"][0]["transaction"] = json!(["AAAA", "base64"]);
    let e = extract(&[file("garbled.json", &garbled)], &watch).unwrap_err();
    assert!(
        matches!(
            e,
            ExtractError::Scan {
                source: ScanError::Undecodable { .. },
                ..
            }
        ),
        "{e:?}"
    );
}

/// base58 decodes in time quadratic in its length: a node answering a
/// getBlock with a hash or a transaction of a few hundred kilobytes held
/// the scan for minutes (50,000 characters took 1.3 s and 0.5 s through the
/// `solana_block` fuzz target; fuzz/regressions/solana_block/). Both are
/// refused unread, by what is wrong with them.
#[test]
fn base58_longer_than_any_hash_or_transaction_is_refused_unread() {
    let watch = WatchSet::new(Network::Solana).keyed(watch_key());
    let block = block_of(&[load(SOL_FIXTURE)]);
    let long = "2".repeat(200_000);

    let mut hash = block.clone();
    hash["blockhash"] = json!(long);
    let start = std::time::Instant::now();
    let e = scan_block(&parse_block(hash).unwrap(), &watch.read()).unwrap_err();
    assert!(
        matches!(
            e,
            ScanError::BadBlockHash {
                field: "blockhash",
                ..
            }
        ),
        "{e}"
    );
    assert!(
        matches!(
            parse_address(&long).unwrap_err(),
            AddressError::TooLong { chars: 200_000, .. }
        ),
        "{e}"
    );

    for encoding in [json!([long, "base58"]), json!(long)] {
        let mut tx = block.clone();
        tx["transactions"][0]["transaction"] = encoding;
        assert_eq!(
            scan_block(&parse_block(tx).unwrap(), &watch.read()).unwrap_err(),
            ScanError::Oversized {
                position: 0,
                chars: 200_000
            }
        );
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(2));

    // A real transaction in base58 still reads.
    let mut real = block;
    let wire = wire(&real["transactions"][0]["transaction"]);
    real["transactions"][0]["transaction"] = json!([bs58::encode(wire).into_string(), "base58"]);
    let (_, recipient) = sol_recipient(&load(SOL_FIXTURE)["result"]);
    watch.insert(&recipient);
    assert_eq!(
        scan_block(&parse_block(real).unwrap(), &watch.read())
            .unwrap()
            .len(),
        1
    );
}

/// Failures agave may commit into a block that this build's Solana types
/// do not name, in the shapes agave's serde gives them: a unit variant is a
/// bare string, a struct or tuple variant an object, and an instruction's
/// failure sits in `InstructionError`'s `[index, error]`. The names are
/// made up: any variant added after the crate was built reads like these.
fn unknown_failures() -> Vec<Value> {
    vec![
        json!("SomeNewTransactionError"),
        json!({"SomeNewTransactionError": {"slot": 12, "account_index": 3}}),
        json!({"SomeNewTupleError": 7}),
        json!({"InstructionError": [0, "SomeNewInstructionError"]}),
        json!({"InstructionError": [2, {"SomeNewInstructionError": {"needed": 5}}]}),
    ]
}

/// Issue 37 item 1: one failed transaction with an error variant the crate
/// does not know made the whole block unreadable, so the watcher retried it
/// forever and saw none of its payments. It is read as failed (it pays
/// nothing), and the rest of the block as it is.
#[test]
fn a_block_with_a_failure_of_an_unknown_variant_is_read_and_the_failure_pays_nothing() {
    let sol = load(SOL_FIXTURE);
    let (_, recipient) = sol_recipient(&sol["result"]);
    let mut answers = vec![sol.clone()];
    for (n, err) in unknown_failures().into_iter().enumerate() {
        let mut failed = load(SOL_FIXTURE);
        // Another transaction: its own signature.
        failed["result"]["transaction"]["signatures"][0] =
            json!(bs58::encode([n as u8 + 1; 64]).into_string());
        failed["result"]["meta"]["err"] = err.clone();
        failed["result"]["meta"]["status"] = json!({ "Err": err });
        answers.push(failed);
    }
    let block = block_of(&answers);
    let envelope = json!({"jsonrpc": "2.0", "id": 1, "result": block});

    // As the watcher reads it: the getBlock answer's body.
    let body = serde_json::to_vec(&envelope).unwrap();
    let decoded = paywatch_solana::decode_get_block(&body)
        .unwrap_or_else(|e| panic!("the block is readable: {e}"));
    let set = WatchSet::new(Network::Solana).keyed(watch_key());
    set.insert(&recipient);
    let paid = scan_block(&decoded, &set.read()).unwrap();
    assert_eq!(paid.len(), 1, "only the successful transfer pays: {paid:?}");
    assert_eq!(paid[0].amount, Amount(u128::from(LAMPORTS_SENT)));
    let txs = decoded.transactions.as_deref().unwrap();
    assert!(
        txs[1..]
            .iter()
            .all(|t| t.meta.as_ref().is_some_and(|m| m.err.is_some())),
        "every unknown failure reads as failed"
    );

    // As an operator reads it: `paywatch extract`, block and transactions.
    let report = extract(
        &[file("block.json", &envelope)],
        std::slice::from_ref(&recipient),
    )
    .unwrap();
    assert_eq!(report.payments.len(), 1, "{report:?}");
    for (n, failed) in answers[1..].iter().enumerate() {
        let everyone = keys(&failed["result"]);
        let report = extract(&[file(&format!("failed-{n}.json"), failed)], &everyone)
            .unwrap_or_else(|e| panic!("failure {n} is readable: {e}"));
        assert!(report.payments.is_empty(), "{report:?}");
        assert_eq!(report.failed_transactions.len(), 1, "{report:?}");
    }
}

/// The deprecated `status` alone saying the transaction failed is enough:
/// a node that leaves `err` out is never read as a success.
#[test]
fn a_failure_named_only_by_status_pays_nothing() {
    let mut failed = load(SOL_FIXTURE);
    let (_, recipient) = sol_recipient(&failed["result"]);
    let meta = failed["result"]["meta"].as_object_mut().unwrap();
    meta.remove("err");
    meta.insert("status".into(), json!({"Err": "SomeNewTransactionError"}));
    let report = extract(
        &[file("status.json", &failed)],
        std::slice::from_ref(&recipient),
    )
    .unwrap();
    assert!(report.payments.is_empty(), "{report:?}");
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1,
        "result": block_of(&[failed])}))
    .unwrap();
    let decoded = paywatch_solana::decode_get_block(&body).unwrap();
    let set = WatchSet::new(Network::Solana).keyed(watch_key());
    set.insert(&recipient);
    assert!(scan_block(&decoded, &set.read()).unwrap().is_empty());
}

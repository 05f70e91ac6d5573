//! Real mainnet answers (a 25 TRX TransferContract and a 41.677389 USDT
//! transfer, each with its transaction info) through `extract`, the
//! watcher's own scan. Expectations are read from the fixtures' JSON, not
//! from the code under test.

use paywatch_core::{Asset, AssetId, Method, Network};
use paywatch_tron::proto::transaction::Raw;
use paywatch_tron::{
    body_from_proto, encode_address, extract, extract_with, parse_address, txid_of, ExtractError,
    ExtractReport, Tokens, NATIVE_INDEX,
};
use prost::Message;
use serde_json::Value;

const TRX_TX: &str = "tests/fixtures/gemwallet_transaction_coin_transfer.json";
const TRX_INFO: &str = "tests/fixtures/gemwallet_transaction_coin_transfer_receipt.json";
const USDT_TX: &str = "tests/fixtures/ledgerlive_trongrid_tx_usdt_0130dfde.json";
const USDT_INFO: &str = "tests/fixtures/ledgerlive_gettransactioninfobyid_usdt_0130dfde.json";

fn read(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn file(path: &str) -> (String, Vec<u8>) {
    (path.to_owned(), std::fs::read(path).unwrap())
}

fn named(name: &str, json: &Value) -> (String, Vec<u8>) {
    (name.to_owned(), serde_json::to_vec(json).unwrap())
}

fn all_files() -> Vec<(String, Vec<u8>)> {
    [TRX_TX, TRX_INFO, USDT_TX, USDT_INFO].map(file).to_vec()
}

fn unhex(s: &str) -> Vec<u8> {
    alloy_primitives::hex::decode(s).unwrap()
}

/// The T-address of a protobuf (0x41-prefixed hex) address.
fn t_address(proto_hex: &str) -> String {
    encode_address(&body_from_proto(&unhex(proto_hex)).unwrap())
}

/// The T-address of an indexed address topic.
fn topic_address(topic: &str) -> String {
    t_address(&format!("41{}", &topic[24..]))
}

/// What the TRX fixture says it pays, from its rendered `raw_data`.
struct TrxPayment {
    txid: String,
    to: String,
    from: String,
    amount: u128,
    block: String,
}

fn trx_payment() -> TrxPayment {
    let tx = read(TRX_TX);
    let value = &tx["raw_data"]["contract"][0]["parameter"]["value"];
    assert_eq!(tx["raw_data"]["contract"][0]["type"], "TransferContract");
    TrxPayment {
        txid: tx["txID"].as_str().unwrap().to_owned(),
        to: t_address(value["to_address"].as_str().unwrap()),
        from: t_address(value["owner_address"].as_str().unwrap()),
        amount: u128::from(value["amount"].as_u64().unwrap()),
        block: read(TRX_INFO)["blockNumber"].to_string(),
    }
}

/// What the USDT fixture's Transfer log says.
struct UsdtPayment {
    txid: String,
    to: String,
    from: String,
    amount: u128,
    block: String,
    contract: String,
}

fn usdt_payment() -> UsdtPayment {
    let info = read(USDT_INFO);
    let log = &info["log"][0];
    let topics = log["topics"].as_array().unwrap();
    UsdtPayment {
        txid: info["id"].as_str().unwrap().to_owned(),
        to: topic_address(topics[2].as_str().unwrap()),
        from: topic_address(topics[1].as_str().unwrap()),
        amount: u128::from_str_radix(log["data"].as_str().unwrap(), 16).unwrap(),
        block: info["blockNumber"].to_string(),
        contract: t_address(&format!("41{}", log["address"].as_str().unwrap())),
    }
}

fn watch(addresses: &[&str]) -> Vec<String> {
    addresses.iter().map(|a| (*a).to_owned()).collect()
}

fn is_empty(report: &ExtractReport) -> bool {
    report.payments.is_empty() && report.failed.is_empty()
}

#[test]
fn the_fixtures_are_what_the_brief_says() {
    let trx = trx_payment();
    assert_eq!(trx.amount, 25_000_000);
    assert_eq!(
        parse_address(&trx.to).unwrap().as_slice(),
        &unhex("3d9324021d2d2da7805c8e599b00da23bfa2ee2d")[..]
    );
    let usdt = usdt_payment();
    assert_eq!(usdt.amount, 41_677_389);
    assert_eq!(
        parse_address(&usdt.to).unwrap().as_slice(),
        &unhex("ec20315a879c48f5e3a6a1c9826d5225f8b658b8")[..]
    );
    // The log's contract is the USDT contract paywatch configures.
    let usdt_method = Method::new(Asset::Usdt, Network::Tron).unwrap();
    assert_eq!(Some(usdt.contract.as_str()), usdt_method.default_contract());
    assert_eq!(
        t_address(read(USDT_INFO)["contract_address"].as_str().unwrap()),
        usdt.contract
    );
}

#[test]
fn watching_both_recipients_finds_exactly_those_two_payments() {
    let trx = trx_payment();
    let usdt = usdt_payment();
    let report = extract(&all_files(), &watch(&[&trx.to, &usdt.to])).unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert!(report.without_transactions.is_empty());
    assert_eq!(report.payments.len(), 2, "{:?}", report.payments);

    let p = report
        .payments
        .iter()
        .find(|p| p.transfer.txid == trx.txid)
        .expect("the TRX payment");
    let t = &p.transfer;
    assert_eq!(t.network, Network::Tron);
    assert_eq!(t.asset, AssetId::Known(Asset::Trx));
    assert_eq!(t.index, NATIVE_INDEX);
    assert_eq!(t.to, trx.to);
    assert_eq!(t.from.as_deref(), Some(trx.from.as_str()));
    assert_eq!(t.amount.0, trx.amount);
    assert!(t.success);
    assert_eq!(p.block, trx.block);

    let p = report
        .payments
        .iter()
        .find(|p| p.transfer.txid == usdt.txid)
        .expect("the USDT payment");
    let t = &p.transfer;
    assert_eq!(t.network, Network::Tron);
    assert_eq!(t.asset, AssetId::Known(Asset::Usdt));
    assert_eq!(t.index, 0);
    assert_eq!(t.to, usdt.to);
    assert_eq!(t.from.as_deref(), Some(usdt.from.as_str()));
    assert_eq!(t.amount.0, usdt.amount);
    assert!(t.success);
    assert_eq!(p.block, usdt.block);

    // Txids are lowercase hex without 0x, as the node spells them.
    for p in &report.payments {
        assert_eq!(p.transfer.txid.len(), 64);
        assert!(p
            .transfer
            .txid
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }
}

#[test]
fn each_transaction_with_its_info_alone_finds_its_own_payment() {
    let trx = trx_payment();
    let usdt = usdt_payment();
    let both = watch(&[&trx.to, &usdt.to]);
    let report = extract(&[file(TRX_TX), file(TRX_INFO)], &both).unwrap();
    assert_eq!(report.payments.len(), 1);
    assert_eq!(report.payments[0].transfer.txid, trx.txid);
    let report = extract(&[file(USDT_INFO), file(USDT_TX)], &both).unwrap();
    assert_eq!(report.payments.len(), 1);
    assert_eq!(report.payments[0].transfer.txid, usdt.txid);
}

#[test]
fn senders_contracts_and_strangers_are_paid_nothing() {
    let trx = trx_payment();
    let usdt = usdt_payment();
    let report = extract(
        &all_files(),
        &watch(&[
            &trx.from,
            &usdt.from,
            &usdt.contract,
            "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb",
        ]),
    )
    .unwrap();
    assert!(is_empty(&report), "{report:?}");
}

#[test]
fn an_ethereum_address_of_a_watched_body_matches_on_tron() {
    let trx = trx_payment();
    let usdt = usdt_payment();
    let eth = |t: &str| {
        format!(
            "0x{}",
            alloy_primitives::hex::encode(parse_address(t).unwrap())
        )
    };
    // As issued for Ethereum: lowercase, and in capitals.
    let watched = vec![
        eth(&trx.to),
        eth(&usdt.to).to_ascii_uppercase().replacen('X', "x", 1),
    ];
    let report = extract(&all_files(), &watched).unwrap();
    assert_eq!(report.payments.len(), 2, "{report:?}");
    // The transfers still name the recipient by its Tron address.
    let mut to: Vec<&str> = report
        .payments
        .iter()
        .map(|p| p.transfer.to.as_str())
        .collect();
    to.sort_unstable();
    let mut want = [trx.to.as_str(), usdt.to.as_str()];
    want.sort_unstable();
    assert_eq!(to, want);
}

#[test]
fn a_tampered_raw_data_hex_is_refused_naming_the_transaction() {
    let trx = trx_payment();
    let mut tx = read(TRX_TX);
    // Pay 26 TRX instead: the amount's varint in raw_data_hex.
    let raw = tx["raw_data_hex"].as_str().unwrap().to_owned();
    let amount_field = "18c0f0f50b";
    assert_eq!(raw.matches(amount_field).count(), 1);
    tx["raw_data_hex"] = raw.replace(amount_field, "1880f5b20c").into();
    let err = extract(
        &[named("tampered.json", &tx), file(TRX_INFO)],
        &watch(&[&trx.to]),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ExtractError::File { .. }), "{err:?}");
    assert!(msg.starts_with("tampered.json: "), "{msg}");
    assert!(msg.contains(&trx.txid) && msg.contains("sha256"), "{msg}");

    // A txID that is not the hash of the bytes is refused the same way.
    let mut tx = read(USDT_TX);
    tx["txID"] = trx.txid.clone().into();
    let err = extract(&[named("swapped.json", &tx)], &watch(&[&trx.to])).unwrap_err();
    assert!(err.to_string().contains("sha256"), "{err}");
}

#[test]
fn the_node_txid_is_the_sha256_of_the_re_encoded_raw_data() {
    // scan identifies a transaction without a txid by re-encoding its
    // raw_data; on real transactions that gives the node's id.
    for path in [TRX_TX, USDT_TX] {
        let tx = read(path);
        let raw = Raw::decode(unhex(tx["raw_data_hex"].as_str().unwrap()).as_slice()).unwrap();
        assert_eq!(
            alloy_primitives::hex::encode(txid_of(&raw)),
            tx["txID"].as_str().unwrap(),
            "{path}"
        );
    }
}

#[test]
fn a_failed_usdt_transfer_pays_nobody() {
    let usdt = usdt_payment();
    for (result, receipt) in [
        (Some("FAILED"), "REVERT"),
        (None, "REVERT"),
        (Some("FAILED"), "SUCCESS"),
        (None, "OUT_OF_ENERGY"),
    ] {
        let mut info = read(USDT_INFO);
        if let Some(r) = result {
            info["result"] = r.into();
        }
        info["receipt"]["result"] = receipt.into();
        let report = extract(
            &[file(USDT_TX), named("failed.json", &info)],
            &watch(&[&usdt.to]),
        )
        .unwrap();
        assert!(is_empty(&report), "{result:?} {receipt}: {report:?}");
    }
}

#[test]
fn a_failed_trx_transfer_is_kept_apart_and_not_paid() {
    let trx = trx_payment();
    let mut tx = read(TRX_TX);
    // ret is not part of the signed raw_data: the txID still holds.
    tx["ret"][0]["contractRet"] = "REVERT".into();
    let mut info = read(TRX_INFO);
    info["result"] = "FAILED".into();
    let report = extract(
        &[named("tx.json", &tx), named("info.json", &info)],
        &watch(&[&trx.to]),
    )
    .unwrap();
    assert!(report.payments.is_empty(), "{report:?}");
    assert_eq!(report.failed.len(), 1);
    let t = &report.failed[0].transfer;
    assert!(!t.success);
    assert_eq!(
        (t.txid.as_str(), t.amount.0),
        (trx.txid.as_str(), trx.amount)
    );

    // The info alone saying FAILED is enough to not count it.
    let report = extract(
        &[file(TRX_TX), named("info.json", &info)],
        &watch(&[&trx.to]),
    )
    .unwrap();
    assert!(report.payments.is_empty() && report.failed.len() == 1);
}

#[test]
fn another_trc20_contract_comes_out_as_that_token() {
    let usdt = usdt_payment();
    let mut info = read(USDT_INFO);
    // The same log from a contract paywatch does not accept.
    let other = parse_address("T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb").unwrap();
    info["log"][0]["address"] = alloy_primitives::hex::encode(other).into();
    let report = extract(
        &[file(USDT_TX), named("other.json", &info)],
        &watch(&[&usdt.to]),
    )
    .unwrap();
    assert_eq!(report.payments.len(), 1, "{report:?}");
    assert_eq!(
        report.payments[0].transfer.asset,
        AssetId::Token {
            contract: "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb".into()
        }
    );
    assert_eq!(report.payments[0].transfer.amount.0, usdt.amount);

    // With other contracts configured, real USDT is a foreign token too,
    // and the configured one is USDT.
    let tokens = Tokens::new([(Asset::Usdt, other)]);
    let files = [file(USDT_TX), file(USDT_INFO)];
    let report = extract_with(&files, &watch(&[&usdt.to]), &tokens).unwrap();
    assert_eq!(
        report.payments[0].transfer.asset,
        AssetId::Token {
            contract: usdt.contract.clone()
        }
    );
    let report = extract_with(
        &[file(USDT_TX), named("other.json", &info)],
        &watch(&[&usdt.to]),
        &tokens,
    )
    .unwrap();
    assert_eq!(
        report.payments[0].transfer.asset,
        AssetId::Known(Asset::Usdt)
    );
}

#[test]
fn zero_value_transfers_are_not_payments() {
    let usdt = usdt_payment();
    let mut info = read(USDT_INFO);
    info["log"][0]["data"] = "00".repeat(32).into();
    let report = extract(
        &[file(USDT_TX), named("zero.json", &info)],
        &watch(&[&usdt.to]),
    )
    .unwrap();
    assert!(is_empty(&report), "{report:?}");
}

#[test]
fn infos_alone_show_tokens_but_not_trx() {
    let trx = trx_payment();
    let usdt = usdt_payment();
    let report = extract(
        &[file(USDT_INFO), file(TRX_INFO)],
        &watch(&[&trx.to, &usdt.to]),
    )
    .unwrap();
    assert_eq!(report.payments.len(), 1, "{report:?}");
    assert_eq!(report.payments[0].transfer.txid, usdt.txid);
    assert_eq!(report.without_transactions, vec![usdt.block, trx.block]);
}

/// A getblockbynum answer holding `txs`.
fn block_json(number: u64, txs: &[Value]) -> Value {
    serde_json::json!({
        "blockID": format!("{number:016x}{}", "ab".repeat(24)),
        "block_header": {"raw_data": {"number": number, "timestamp": 1_738_601_505_000_u64}},
        "transactions": txs,
    })
}

#[test]
fn a_block_with_its_infos_is_read_like_the_watcher_reads_it() {
    let usdt = usdt_payment();
    let trx = trx_payment();
    let number: u64 = usdt.block.parse().unwrap();
    let block = block_json(number, &[read(USDT_TX)]);
    let infos = Value::Array(vec![read(USDT_INFO)]);
    let to = watch(&[&usdt.to, &trx.to]);
    let report = extract(
        &[named("block.json", &block), named("infos.json", &infos)],
        &to,
    )
    .unwrap();
    assert_eq!(report.payments.len(), 1);
    assert_eq!(report.payments[0].transfer.txid, usdt.txid);
    assert_eq!(report.payments[0].block, usdt.block);

    // Without its infos the block cannot say what succeeded.
    let err = extract(&[named("block.json", &block)], &to).unwrap_err();
    assert!(err.to_string().contains("no transaction infos"), "{err}");

    // An info of the block for a transaction it does not hold: the answers
    // do not belong together.
    let mut stray = read(TRX_INFO);
    stray["blockNumber"] = number.into();
    let infos = Value::Array(vec![read(USDT_INFO), stray]);
    let err = extract(
        &[named("block.json", &block), named("infos.json", &infos)],
        &to,
    )
    .unwrap_err();
    assert!(
        matches!(err, ExtractError::Block { .. }) && err.to_string().contains(&trx.txid),
        "{err}"
    );

    // A block id that is not the block's number is not that block.
    let mut wrong = block.clone();
    wrong["block_header"]["raw_data"]["number"] = (number + 1).into();
    let err = extract(&[named("wrong.json", &wrong)], &to).unwrap_err();
    assert!(err.to_string().contains("blockID"), "{err}");

    // An empty block pays nobody and needs no infos.
    let empty = serde_json::json!({
        "blockID": format!("{number:016x}{}", "cd".repeat(24)),
        "block_header": {"raw_data": {"number": number}},
    });
    let report = extract(&[named("empty.json", &empty)], &to).unwrap();
    assert!(is_empty(&report));
}

#[test]
fn a_transaction_without_its_info_is_refused() {
    let trx = trx_payment();
    let err = extract(&[file(TRX_TX)], &watch(&[&trx.to])).unwrap_err();
    assert!(
        matches!(&err, ExtractError::Transaction { tx, .. } if *tx == trx.txid),
        "{err:?}"
    );
    assert!(err.to_string().contains("gettransactioninfobyid"), "{err}");
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    let trx = trx_payment();
    let to = watch(&[&trx.to]);
    let err = extract(&[("x.json".into(), b"not json".to_vec())], &to).unwrap_err();
    assert!(err.to_string().starts_with("x.json: not JSON"), "{err}");
    let err = extract(&[("e.json".into(), b"{}".to_vec())], &to).unwrap_err();
    assert!(err.to_string().contains("empty answer"), "{err}");
    let err = extract(&[("n.json".into(), b"{\"foo\":1}".to_vec())], &to).unwrap_err();
    assert!(err.to_string().starts_with("n.json: neither"), "{err}");
    let err = extract(&all_files(), &[]).unwrap_err();
    assert!(matches!(err, ExtractError::NothingWatched));
    let mut typo = trx.to.clone();
    typo.replace_range(5..6, if &typo[5..6] == "z" { "y" } else { "z" });
    let err = extract(&all_files(), &[typo]).unwrap_err();
    let cause = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(err.to_string().contains("--watch"), "{err}");
    assert!(cause.contains("checksum"), "{cause}");

    let mut info = read(USDT_INFO);
    info["receipt"]["result"] = "MAYBE".into();
    let err = extract(&[named("i.json", &info)], &to).unwrap_err();
    assert!(err.to_string().contains("MAYBE"), "{err}");

    let mut tx = read(USDT_TX);
    tx.as_object_mut().unwrap().remove("raw_data_hex");
    let err = extract(&[named("t.json", &tx)], &to).unwrap_err();
    assert!(err.to_string().contains("no raw_data_hex"), "{err}");

    // Two different answers for one transaction.
    let mut other = read(USDT_INFO);
    other["fee"] = 1.into();
    let err = extract(&[file(USDT_INFO), named("o.json", &other)], &to).unwrap_err();
    assert!(err.to_string().contains("differs"), "{err}");
}

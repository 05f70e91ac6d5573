//! A real java-tron answer with internal transactions (a dice contract
//! paying its player 98.5 TRX, with four zero-value calls besides) through
//! `extract`, the watcher's own scan. Expectations are read from the
//! fixtures' JSON, not from the code under test.

use paywatch_core::{Asset, AssetId, Network};
use paywatch_tron::{body_from_proto, encode_address, extract, INTERNAL_INDEX};
use serde_json::Value;

const TX: &str = "tests/fixtures/cybavo_shasta_tx_9af66ca3.json";
const INFO: &str = "tests/fixtures/cybavo_shasta_gettransactioninfobyid_9af66ca3.json";

fn read(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn files() -> Vec<(String, Vec<u8>)> {
    [TX, INFO]
        .map(|p| (p.to_owned(), std::fs::read(p).unwrap()))
        .to_vec()
}

/// The T-address of a protobuf (0x41-prefixed hex) address.
fn t_address(proto_hex: &str) -> String {
    let bytes = alloy_primitives::hex::decode(proto_hex).unwrap();
    encode_address(&body_from_proto(&bytes).unwrap())
}

/// The fixture's internal transactions: (caller, to, TRX callValue).
fn internal() -> Vec<(String, String, u128)> {
    read(INFO)["internal_transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|it| {
            assert_eq!(it["note"], "63616c6c", "each is a \"call\"");
            let values = it["callValueInfo"].as_array().unwrap();
            assert_eq!(values.len(), 1);
            assert!(values[0].get("tokenId").is_none(), "TRX only");
            (
                t_address(it["caller_address"].as_str().unwrap()),
                t_address(it["transferTo_address"].as_str().unwrap()),
                u128::from(values[0]["callValue"].as_u64().unwrap_or(0)),
            )
        })
        .collect()
}

#[test]
fn a_recorded_contract_payout_of_trx_is_found_at_its_internal_index() {
    let info = read(INFO);
    let txid = info["id"].as_str().unwrap();
    let internal = internal();
    let (payer, player, amount) = internal[0].clone();
    assert_eq!(amount, 98_500_000);
    // The player is the one who called the contract.
    let tx = read(TX);
    let call = &tx["raw_data"]["contract"][0]["parameter"]["value"];
    assert_eq!(t_address(call["owner_address"].as_str().unwrap()), player);
    assert_eq!(t_address(call["contract_address"].as_str().unwrap()), payer);

    let report = extract(&files(), std::slice::from_ref(&player)).unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.payments.len(), 1, "{:?}", report.payments);
    let p = &report.payments[0];
    assert_eq!(p.block, info["blockNumber"].to_string());
    let t = &p.transfer;
    assert_eq!(t.network, Network::Tron);
    assert_eq!(t.asset, AssetId::Known(Asset::Trx));
    assert_eq!(t.txid, txid);
    // The first (and only) internal transaction that carries TRX.
    assert_eq!(t.index, INTERNAL_INDEX);
    assert_eq!(t.to, player);
    assert_eq!(t.from.as_deref(), Some(payer.as_str()));
    assert_eq!(t.amount.0, amount);
    assert!(t.success);
}

#[test]
fn the_info_alone_shows_the_contract_payout_too() {
    let (_, player, amount) = internal()[0].clone();
    let info = (INFO.to_owned(), std::fs::read(INFO).unwrap());
    let report = extract(&[info], &[player]).unwrap();
    assert_eq!(report.payments.len(), 1, "{:?}", report.payments);
    assert_eq!(report.payments[0].transfer.amount.0, amount);
    assert_eq!(report.payments[0].transfer.index, INTERNAL_INDEX);
}

#[test]
fn zero_value_calls_and_the_contracts_are_paid_nothing() {
    let internal = internal();
    let mut nobody: Vec<String> = internal[1..].iter().map(|(_, to, _)| to.clone()).collect();
    // The callers: the dice contract (which the player's call_value paid,
    // at the top level, not by an internal transaction) and the contract
    // it called.
    nobody.extend(internal.iter().map(|(from, _, _)| from.clone()));
    nobody.sort();
    nobody.dedup();
    assert!(internal[1..].iter().all(|(_, _, v)| *v == 0));
    let report = extract(&files(), &nobody).unwrap();
    assert!(report.payments.is_empty(), "{:?}", report.payments);
    assert!(report.failed.is_empty(), "{:?}", report.failed);
}

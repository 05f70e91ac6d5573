//! The scan's rules on hand-built protobuf answers, the form the watcher's
//! gRPC source hands it: how transactions pair with infos, which logs and
//! contracts are payments, and what `may_pay` lets the source skip.

use std::slice::from_ref;

use paywatch_core::{Asset, AssetId, Network, Transfer, WatchSet};
use paywatch_tron::proto::transaction::contract::ContractType;
use paywatch_tron::proto::transaction::result::ContractResult;
use paywatch_tron::proto::transaction::{self, Contract, Raw};
use paywatch_tron::proto::transaction_info::{Code, Log};
use paywatch_tron::proto::{
    block_header, BlockExtention, BlockHeader, ResourceReceipt, Transaction, TransactionExtention,
    TransactionInfo, TransferContract,
};
use paywatch_tron::{
    encode_address, may_pay, parse_address, scan, scan_answers, txid_of, watch_key, BlockAnswers,
    ScanError, Tokens, NATIVE_INDEX, TRANSFER_TOPIC,
};
use prost::Message;

const BLOCK: u64 = 70_000_000;
const USDT: &str = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t";

fn body(n: u8) -> [u8; 20] {
    [n; 20]
}

fn proto_address(b: [u8; 20]) -> Vec<u8> {
    let mut out = vec![0x41];
    out.extend_from_slice(&b);
    out
}

fn usdt() -> [u8; 20] {
    parse_address(USDT).unwrap()
}

fn contract(kind: ContractType, type_url: &str, value: Vec<u8>) -> Contract {
    let mut c = Contract {
        r#type: kind as i32,
        parameter: Some(Default::default()),
        ..Contract::default()
    };
    let p = c.parameter.as_mut().unwrap();
    p.type_url = type_url.to_owned();
    p.value = value;
    c
}

fn trx_contract(from: [u8; 20], to: [u8; 20], amount: i64) -> Contract {
    let value = TransferContract {
        owner_address: proto_address(from),
        to_address: proto_address(to),
        amount,
    }
    .encode_to_vec();
    contract(
        ContractType::TransferContract,
        "type.googleapis.com/protocol.TransferContract",
        value,
    )
}

fn trigger_contract() -> Contract {
    contract(
        ContractType::TriggerSmartContract,
        "type.googleapis.com/protocol.TriggerSmartContract",
        vec![0x0a, 0x00],
    )
}

/// A transaction made unique by `nonce`, with the node's txid.
fn tx(nonce: i64, contracts: Vec<Contract>, ret: Option<ContractResult>) -> TransactionExtention {
    let raw = Raw {
        timestamp: 1_700_000_000_000 + nonce,
        contract: contracts,
        ..Raw::default()
    };
    TransactionExtention {
        txid: txid_of(&raw).to_vec(),
        transaction: Some(Transaction {
            raw_data: Some(raw),
            ret: ret
                .map(|r| transaction::Result {
                    contract_ret: r as i32,
                    ..transaction::Result::default()
                })
                .into_iter()
                .collect(),
            ..Transaction::default()
        }),
        ..TransactionExtention::default()
    }
}

fn info(
    tx: &TransactionExtention,
    result: Code,
    receipt: ContractResult,
    log: Vec<Log>,
) -> TransactionInfo {
    TransactionInfo {
        id: tx.txid.clone(),
        block_number: i64::try_from(BLOCK).unwrap(),
        result: result as i32,
        receipt: Some(ResourceReceipt {
            result: receipt as i32,
            ..ResourceReceipt::default()
        }),
        log,
        ..TransactionInfo::default()
    }
}

fn ok_info(tx: &TransactionExtention, log: Vec<Log>) -> TransactionInfo {
    info(tx, Code::Sucess, ContractResult::Success, log)
}

fn topic(b: [u8; 20]) -> Vec<u8> {
    let mut t = vec![0; 12];
    t.extend_from_slice(&b);
    t
}

fn value(v: u128) -> Vec<u8> {
    let mut d = vec![0; 16];
    d.extend_from_slice(&v.to_be_bytes());
    d
}

fn transfer_log(contract: [u8; 20], from: [u8; 20], to: [u8; 20], data: Vec<u8>) -> Log {
    Log {
        address: contract.to_vec(),
        topics: vec![TRANSFER_TOPIC.to_vec(), topic(from), topic(to)],
        data,
    }
}

fn watching(addresses: &[String]) -> WatchSet {
    let set = WatchSet::new(Network::Tron).keyed(watch_key());
    set.extend(addresses.iter().map(String::as_str));
    set
}

fn run(
    transactions: Option<&[TransactionExtention]>,
    infos: &[TransactionInfo],
    set: &WatchSet,
) -> Result<Vec<Transfer>, ScanError> {
    let block = BlockAnswers {
        number: BLOCK,
        transactions,
        infos,
    };
    scan_answers(&block, &Tokens::mainnet(), &set.read())
}

fn hex(b: &[u8]) -> String {
    alloy_primitives::hex::encode(b)
}

#[test]
fn trx_and_usdt_to_watched_addresses_are_found_with_their_keys() {
    let (alice, bob, carol) = (body(1), body(2), body(3));
    let pay = tx(
        1,
        vec![trx_contract(carol, alice, 5_000_000)],
        Some(ContractResult::Success),
    );
    let token = tx(2, vec![trigger_contract()], Some(ContractResult::Success));
    let logs = vec![
        transfer_log(usdt(), carol, bob, value(7)),
        transfer_log(usdt(), carol, body(9), value(8)),
        transfer_log(usdt(), carol, alice, value(1_000_000)),
    ];
    let txs = [pay.clone(), token.clone()];
    // The infos in another order than the transactions.
    let infos = [ok_info(&token, logs), ok_info(&pay, vec![])];
    let set = watching(&[encode_address(&alice), encode_address(&bob)]);
    let found = run(Some(&txs), &infos, &set).unwrap();
    let keys: Vec<(String, u32, AssetId, String, u128)> = found
        .iter()
        .map(|t| {
            (
                t.txid.clone(),
                t.index,
                t.asset.clone(),
                t.to.clone(),
                t.amount.0,
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            (
                hex(&pay.txid),
                NATIVE_INDEX,
                AssetId::Known(Asset::Trx),
                encode_address(&alice),
                5_000_000
            ),
            (
                hex(&token.txid),
                0,
                AssetId::Known(Asset::Usdt),
                encode_address(&bob),
                7
            ),
            (
                hex(&token.txid),
                2,
                AssetId::Known(Asset::Usdt),
                encode_address(&alice),
                1_000_000
            ),
        ]
    );
    assert!(found
        .iter()
        .all(|t| t.success && t.network == Network::Tron));
    assert!(found
        .iter()
        .all(|t| t.from.as_deref() == Some(encode_address(&carol).as_str())));
}

#[test]
fn a_transaction_without_txid_is_identified_by_its_raw_data() {
    let alice = body(1);
    let mut pay = tx(
        1,
        vec![trx_contract(body(3), alice, 1)],
        Some(ContractResult::Success),
    );
    let info = ok_info(&pay, vec![]);
    pay.txid.clear();
    let found = run(
        Some(&[pay]),
        from_ref(&info),
        &watching(&[encode_address(&alice)]),
    )
    .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].txid, hex(&info.id));
}

#[test]
fn answers_that_do_not_pair_up_are_errors() {
    let a = tx(1, vec![trigger_contract()], Some(ContractResult::Success));
    let b = tx(2, vec![trigger_contract()], Some(ContractResult::Success));
    let set = watching(&[encode_address(&body(1))]);

    let e = run(Some(&[a.clone(), b.clone()]), &[ok_info(&a, vec![])], &set).unwrap_err();
    assert_eq!(
        e,
        ScanError::MissingInfo {
            block: BLOCK,
            tx: hex(&b.txid)
        }
    );

    let e = run(
        Some(from_ref(&a)),
        &[ok_info(&a, vec![]), ok_info(&b, vec![])],
        &set,
    )
    .unwrap_err();
    assert_eq!(
        e,
        ScanError::InfoWithoutTransaction {
            block: BLOCK,
            tx: hex(&b.txid)
        }
    );
    assert!(e.to_string().contains("not in block"), "{e}");

    let e = run(
        Some(from_ref(&a)),
        &[ok_info(&a, vec![]), ok_info(&a, vec![])],
        &set,
    )
    .unwrap_err();
    assert_eq!(
        e,
        ScanError::DuplicateInfo {
            block: BLOCK,
            tx: hex(&a.txid)
        }
    );
    let e = run(None, &[ok_info(&a, vec![]), ok_info(&a, vec![])], &set).unwrap_err();
    assert!(matches!(e, ScanError::DuplicateInfo { .. }), "{e:?}");

    let e = run(Some(&[a.clone(), a.clone()]), &[ok_info(&a, vec![])], &set).unwrap_err();
    assert!(matches!(e, ScanError::DuplicateTransaction { .. }), "{e:?}");

    let mut elsewhere = ok_info(&a, vec![]);
    elsewhere.block_number += 1;
    for txs in [Some(from_ref(&a)), None] {
        let e = run(txs, from_ref(&elsewhere), &set).unwrap_err();
        assert!(
            matches!(e, ScanError::ForeignInfo { ours: BLOCK, .. }),
            "{e:?}"
        );
    }

    let mut short = a.clone();
    short.txid.truncate(31);
    let e = run(Some(&[short]), &[ok_info(&a, vec![])], &set).unwrap_err();
    assert!(matches!(e, ScanError::BadTxid { length: 31, .. }), "{e:?}");

    let e = run(Some(&[TransactionExtention::default()]), &[], &set).unwrap_err();
    assert_eq!(
        e,
        ScanError::MissingRawData {
            block: BLOCK,
            position: 0
        }
    );
    // With the node's txid but no transaction: as broken.
    let bare = TransactionExtention {
        txid: b.txid.clone(),
        ..TransactionExtention::default()
    };
    let e = run(
        Some(&[a.clone(), bare]),
        &[ok_info(&a, vec![]), ok_info(&b, vec![])],
        &set,
    )
    .unwrap_err();
    assert_eq!(
        e,
        ScanError::MissingRawData {
            block: BLOCK,
            position: 1
        }
    );
}

#[test]
fn failed_trx_is_recorded_unsuccessful_and_failed_logs_are_not_believed() {
    let alice = body(1);
    let set = watching(&[encode_address(&alice)]);
    for (ret, result) in [
        (Some(ContractResult::Revert), Code::Sucess),
        (Some(ContractResult::Success), Code::Failed),
        (None, Code::Sucess),
    ] {
        let pay = tx(1, vec![trx_contract(body(3), alice, 9)], ret);
        let found = run(
            Some(from_ref(&pay)),
            &[info(&pay, result, ContractResult::Default, vec![])],
            &set,
        )
        .unwrap();
        assert_eq!(found.len(), 1, "{ret:?} {result:?}");
        assert!(!found[0].success, "{ret:?} {result:?}");
    }
    let token = tx(2, vec![trigger_contract()], Some(ContractResult::Revert));
    let log = transfer_log(usdt(), body(3), alice, value(5));
    for (result, receipt) in [
        (Code::Failed, ContractResult::Revert),
        (Code::Sucess, ContractResult::Revert),
        (Code::Failed, ContractResult::Success),
        (Code::Sucess, ContractResult::Default),
    ] {
        let i = info(&token, result, receipt, vec![log.clone()]);
        let found = run(Some(from_ref(&token)), from_ref(&i), &set).unwrap();
        assert!(found.is_empty(), "{result:?} {receipt:?}: {found:?}");
        assert!(run(None, &[i], &set).unwrap().is_empty());
    }
}

#[test]
fn only_three_topic_transfers_with_value_and_clean_topics_count() {
    let alice = body(1);
    let set = watching(&[encode_address(&alice)]);
    let t = tx(1, vec![trigger_contract()], Some(ContractResult::Success));
    let good = transfer_log(usdt(), body(3), alice, value(5));
    let mut nft = good.clone();
    nft.topics.push(topic(body(4)));
    let mut other_event = good.clone();
    other_event.topics[0][0] ^= 1;
    let zero = transfer_log(usdt(), body(3), alice, value(0));
    let mut dirty = good.clone();
    dirty.topics[2][0] = 1;
    let mut short_data = good.clone();
    short_data.data.pop();
    let logs = vec![nft, other_event, zero, dirty, short_data, good];
    let found = run(Some(from_ref(&t)), &[ok_info(&t, logs)], &set).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].index, found[0].amount.0), (5, 5));
}

#[test]
fn contracts_are_read_from_the_log_address_and_amounts_saturate() {
    let alice = body(1);
    let set = watching(&[encode_address(&alice)]);
    let t = tx(1, vec![trigger_contract()], Some(ContractResult::Success));
    let mut prefixed = transfer_log(usdt(), body(3), alice, value(5));
    prefixed.address = proto_address(usdt());
    let spam = transfer_log(body(7), body(3), alice, vec![0xff; 32]);
    let found = run(
        Some(from_ref(&t)),
        &[ok_info(&t, vec![prefixed, spam])],
        &set,
    )
    .unwrap();
    assert_eq!(found[0].asset, AssetId::Known(Asset::Usdt));
    assert_eq!(
        found[1].asset,
        AssetId::Token {
            contract: encode_address(&body(7))
        }
    );
    assert_eq!(found[1].amount.0, u128::MAX);

    let mut broken = transfer_log(usdt(), body(3), alice, value(5));
    broken.address.truncate(19);
    let e = run(Some(from_ref(&t)), &[ok_info(&t, vec![broken])], &set).unwrap_err();
    assert!(matches!(e, ScanError::BadLog { index: 0, .. }), "{e:?}");
}

#[test]
fn a_transfer_contract_that_does_not_decode_is_an_error_only_when_it_matters() {
    let alice = body(1);
    let set = watching(&[encode_address(&alice)]);
    let mut c = trx_contract(body(3), alice, 5);
    c.parameter.as_mut().unwrap().type_url =
        "type.googleapis.com/protocol.TriggerSmartContract".into();
    let t = tx(1, vec![c], Some(ContractResult::Success));
    let e = run(Some(from_ref(&t)), &[ok_info(&t, vec![])], &set).unwrap_err();
    assert!(matches!(e, ScanError::BadTransferContract { .. }), "{e:?}");

    // Zero TRX and unwatched recipients are no payments.
    let zero = tx(
        2,
        vec![trx_contract(body(3), alice, 0)],
        Some(ContractResult::Success),
    );
    let other = tx(
        3,
        vec![trx_contract(body(3), body(4), 5)],
        Some(ContractResult::Success),
    );
    let txs = [zero.clone(), other.clone()];
    let found = run(
        Some(&txs),
        &[ok_info(&zero, vec![]), ok_info(&other, vec![])],
        &set,
    )
    .unwrap();
    assert!(found.is_empty(), "{found:?}");
}

/// java-tron checks a contract's `type_url` as protobuf's `Any.is` does:
/// the part after the last `/` names the type, whatever comes before. A
/// non-canonical prefix is valid on chain, so it is a payment here too.
#[test]
fn a_transfer_contract_with_a_non_canonical_type_url_prefix_is_still_a_payment() {
    let alice = body(1);
    let set = watching(&[encode_address(&alice)]);
    for url in [
        "evil.example/protocol.TransferContract",
        "/protocol.TransferContract",
        "a/b/c/protocol.TransferContract",
    ] {
        let mut c = trx_contract(body(3), alice, 5);
        c.parameter.as_mut().unwrap().type_url = url.into();
        let t = tx(1, vec![c], Some(ContractResult::Success));
        let found = run(Some(from_ref(&t)), &[ok_info(&t, vec![])], &set)
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(found.len(), 1, "{url}");
        assert_eq!(found[0].amount.0, 5);
    }
}

/// A contract paywatch cannot read stops the watcher only when it may pay a
/// watched address: anyone could otherwise halt every Tron watcher with one
/// cheap transaction.
#[test]
fn an_unreadable_transfer_contract_to_nobody_watched_is_skipped() {
    let alice = body(1);
    let set = watching(&[encode_address(&alice)]);
    let mut bad_url = trx_contract(body(3), body(4), 5);
    bad_url.parameter.as_mut().unwrap().type_url = "protocol.TransferContract".into();
    let mut garbage = trx_contract(body(3), body(4), 5);
    garbage.parameter.as_mut().unwrap().value = vec![0xff, 0xff, 0xff];
    let paying = tx(
        9,
        vec![trx_contract(body(3), alice, 7)],
        Some(ContractResult::Success),
    );
    let txs = [
        tx(1, vec![bad_url], Some(ContractResult::Success)),
        tx(2, vec![garbage], Some(ContractResult::Success)),
        paying.clone(),
    ];
    let infos: Vec<TransactionInfo> = txs.iter().map(|t| ok_info(t, vec![])).collect();
    let found = run(Some(&txs), &infos, &set).unwrap();
    assert_eq!(
        found.len(),
        1,
        "the readable payment is still found: {found:?}"
    );
    assert_eq!(found[0].amount.0, 7);

    // The same unreadable contract naming a watched address is an error:
    // money to us that cannot be read is never skipped.
    let mut to_alice = trx_contract(body(3), alice, 5);
    to_alice.parameter.as_mut().unwrap().type_url = "protocol.TransferContract".into();
    let t = tx(3, vec![to_alice], Some(ContractResult::Success));
    let e = run(Some(from_ref(&t)), &[ok_info(&t, vec![])], &set).unwrap_err();
    assert!(matches!(e, ScanError::BadTransferContract { .. }), "{e:?}");
}

#[test]
fn an_ethereum_address_keys_the_same_tron_body() {
    let alice = body(0xab);
    let eth = format!("0x{}", hex(&alice).to_ascii_uppercase());
    let set = watching(&[eth]);
    let pay = tx(
        1,
        vec![trx_contract(body(3), alice, 5)],
        Some(ContractResult::Success),
    );
    let found = run(Some(from_ref(&pay)), &[ok_info(&pay, vec![])], &set).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].to, encode_address(&alice));
}

#[test]
fn may_pay_lets_the_source_skip_blocks_without_contracts_or_watched_trx() {
    let alice = body(1);
    let set = watching(&[encode_address(&alice)]);
    let read = set.read();
    assert!(!may_pay(&[], &read));
    let stranger = tx(1, vec![trx_contract(body(3), body(4), 5)], None);
    let freeze = tx(
        2,
        vec![contract(
            ContractType::FreezeBalanceV2Contract,
            "type.googleapis.com/protocol.FreezeBalanceV2Contract",
            vec![],
        )],
        None,
    );
    assert!(!may_pay(&[stranger.clone(), freeze.clone()], &read));
    let pay = tx(3, vec![trx_contract(body(3), alice, 5)], None);
    assert!(may_pay(&[stranger.clone(), pay], &read));
    let call = tx(4, vec![trigger_contract()], None);
    assert!(may_pay(&[freeze, call], &read));
}

#[test]
fn the_watchers_entry_takes_the_block_and_its_infos() {
    let alice = body(1);
    let set = watching(&[encode_address(&alice)]);
    let pay = tx(
        1,
        vec![trx_contract(body(3), alice, 5)],
        Some(ContractResult::Success),
    );
    let mut block = BlockExtention {
        transactions: vec![pay.clone()],
        block_header: Some(BlockHeader {
            raw_data: Some(block_header::Raw {
                number: i64::try_from(BLOCK).unwrap(),
                ..block_header::Raw::default()
            }),
            ..BlockHeader::default()
        }),
        ..BlockExtention::default()
    };
    let infos = vec![ok_info(&pay, vec![])];
    let found = scan(&block, &infos, &Tokens::default(), &set.read()).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].txid, hex(&pay.txid));

    // The number pairs infos with the block: another block's are refused.
    block
        .block_header
        .as_mut()
        .unwrap()
        .raw_data
        .as_mut()
        .unwrap()
        .number += 1;
    let e = scan(&block, &infos, &Tokens::default(), &set.read()).unwrap_err();
    assert!(matches!(e, ScanError::ForeignInfo { .. }), "{e:?}");
    block.block_header = None;
    let e = scan(&block, &infos, &Tokens::default(), &set.read()).unwrap_err();
    assert_eq!(e, ScanError::MissingHeader);
}

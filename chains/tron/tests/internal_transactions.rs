//! TRX sent by contracts: the internal transactions java-tron keeps in a
//! transaction's info (with `vm.saveInternalTx = true`), read as the node
//! writes them (java-tron's TransactionUtil.buildInternalTransaction and
//! Program's call, create and suicide).

use paywatch_core::{Asset, AssetId, Network, Transfer, WatchSet};
use paywatch_tron::proto::internal_transaction::CallValueInfo;
use paywatch_tron::proto::transaction::contract::ContractType;
use paywatch_tron::proto::transaction::result::ContractResult;
use paywatch_tron::proto::transaction::{self, Contract, Raw};
use paywatch_tron::proto::transaction_info::{Code, Log};
use paywatch_tron::proto::{
    InternalTransaction, ResourceReceipt, Transaction, TransactionExtention, TransactionInfo,
};
use paywatch_tron::{
    encode_address, parse_address, scan_answers, txid_of, watch_key, BlockAnswers, ScanError,
    Tokens, INTERNAL_INDEX, NATIVE_INDEX, TRANSFER_TOPIC,
};

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

/// A call of a contract (whose parameter the scan does not read).
fn call_tx(nonce: i64, ret: ContractResult) -> TransactionExtention {
    let mut contract = Contract {
        r#type: ContractType::TriggerSmartContract as i32,
        parameter: Some(Default::default()),
        ..Contract::default()
    };
    let p = contract.parameter.as_mut().unwrap();
    p.type_url = "type.googleapis.com/protocol.TriggerSmartContract".to_owned();
    p.value = vec![0x0a, 0x00];
    let raw = Raw {
        timestamp: 1_700_000_000_000 + nonce,
        contract: vec![contract],
        ..Raw::default()
    };
    TransactionExtention {
        txid: txid_of(&raw).to_vec(),
        transaction: Some(Transaction {
            raw_data: Some(raw),
            ret: vec![transaction::Result {
                contract_ret: ret as i32,
                ..transaction::Result::default()
            }],
            ..Transaction::default()
        }),
        ..TransactionExtention::default()
    }
}

fn info_of(
    tx: &TransactionExtention,
    succeeded: bool,
    log: Vec<Log>,
    internal: Vec<InternalTransaction>,
) -> TransactionInfo {
    let (result, receipt) = if succeeded {
        (Code::Sucess, ContractResult::Success)
    } else {
        (Code::Failed, ContractResult::Revert)
    };
    TransactionInfo {
        id: tx.txid.clone(),
        block_number: i64::try_from(BLOCK).unwrap(),
        result: result as i32,
        receipt: Some(ResourceReceipt {
            result: receipt as i32,
            ..ResourceReceipt::default()
        }),
        log,
        internal_transactions: internal,
        ..TransactionInfo::default()
    }
}

/// An internal transaction as java-tron writes it: the TRX value first
/// (without a token id, 0 included), then one entry per TRC-10 token.
fn internal(
    note: &str,
    from: [u8; 20],
    to: [u8; 20],
    sun: i64,
    tokens: &[(&str, i64)],
) -> InternalTransaction {
    let mut values = vec![CallValueInfo {
        call_value: sun,
        token_id: String::new(),
    }];
    values.extend(tokens.iter().map(|(id, amount)| CallValueInfo {
        call_value: *amount,
        token_id: (*id).to_owned(),
    }));
    InternalTransaction {
        hash: vec![7; 32],
        caller_address: proto_address(from),
        transfer_to_address: proto_address(to),
        call_value_info: values,
        note: note.as_bytes().to_vec(),
        rejected: false,
        extra: String::new(),
    }
}

fn call(from: [u8; 20], to: [u8; 20], sun: i64) -> InternalTransaction {
    internal("call", from, to, sun, &[])
}

fn rejected(mut it: InternalTransaction) -> InternalTransaction {
    it.rejected = true;
    it
}

fn usdt_log(from: [u8; 20], to: [u8; 20], amount: u8) -> Log {
    let word = |b: [u8; 20]| {
        let mut t = vec![0; 12];
        t.extend_from_slice(&b);
        t
    };
    let mut data = vec![0; 31];
    data.push(amount);
    Log {
        address: parse_address(USDT).unwrap().to_vec(),
        topics: vec![TRANSFER_TOPIC.to_vec(), word(from), word(to)],
        data,
    }
}

fn watching(bodies: &[[u8; 20]]) -> WatchSet {
    let set = WatchSet::new(Network::Tron).keyed(watch_key());
    let addresses: Vec<String> = bodies.iter().map(encode_address).collect();
    set.extend(addresses.iter().map(String::as_str));
    set
}

fn scan_pair(
    tx: &TransactionExtention,
    info: &TransactionInfo,
    watch: &[[u8; 20]],
) -> Result<Vec<Transfer>, ScanError> {
    let set = watching(watch);
    let txs = [tx.clone()];
    let infos = [info.clone()];
    let block = BlockAnswers {
        number: BLOCK,
        transactions: Some(&txs),
        infos: &infos,
    };
    let found = scan_answers(&block, &Tokens::mainnet(), &set.read());
    found
}

/// (index, to, amount, success) of each transfer found.
fn keys(found: &[Transfer]) -> Vec<(u32, [u8; 20], u128, bool)> {
    found
        .iter()
        .map(|t| {
            (
                t.index,
                parse_address(&t.to).unwrap(),
                t.amount.0,
                t.success,
            )
        })
        .collect()
}

#[test]
fn trx_sent_by_a_contract_pays_the_watched_address() {
    let (payer, alice, bob) = (body(0xc0), body(1), body(2));
    let tx = call_tx(1, ContractResult::Success);
    // A payout contract: USDT to bob, then 5 TRX to alice.
    let info = info_of(
        &tx,
        true,
        vec![usdt_log(payer, bob, 9)],
        vec![call(payer, alice, 5_000_000)],
    );
    let found = scan_pair(&tx, &info, &[alice, bob]).unwrap();
    assert_eq!(
        keys(&found),
        vec![(0, bob, 9, true), (INTERNAL_INDEX, alice, 5_000_000, true)]
    );
    let trx = &found[1];
    assert_eq!(trx.asset, AssetId::Known(Asset::Trx));
    assert_eq!(trx.network, Network::Tron);
    assert_eq!(trx.from.as_deref(), Some(encode_address(&payer).as_str()));
    assert_eq!(trx.txid, alloy_primitives::hex::encode(&tx.txid));
    // Above every TransferContract key a real transaction can have.
    assert_eq!(INTERNAL_INDEX - NATIVE_INDEX, 1 << 30);
}

#[test]
fn the_infos_alone_show_trx_sent_by_a_contract() {
    let (payer, alice) = (body(0xc0), body(1));
    let tx = call_tx(1, ContractResult::Success);
    let info = info_of(&tx, true, vec![], vec![call(payer, alice, 5_000_000)]);
    let set = watching(&[alice]);
    let infos = [info];
    let block = BlockAnswers {
        number: BLOCK,
        transactions: None,
        infos: &infos,
    };
    let found = scan_answers(&block, &Tokens::mainnet(), &set.read()).unwrap();
    assert_eq!(keys(&found), vec![(INTERNAL_INDEX, alice, 5_000_000, true)]);
}

#[test]
fn only_internal_transactions_that_carry_trx_are_numbered_so_every_node_keys_alike() {
    let (payer, helper, alice, bob) = (body(0xc0), body(0xc1), body(1), body(2));
    let tx = call_tx(1, ContractResult::Success);
    let all = vec![
        // A call without value (a token's transfer, a view): moves nothing.
        call(payer, alice, 0),
        // Shown only by a node with vm.saveFeaturedInternalTx: the contract
        // froze TRX for alice's energy; alice's balance does not change.
        internal("freezeBalanceV2", payer, alice, 7_000_000, &[]),
        // TRC-10 tokens, not TRX: the TRX entry says 0.
        internal("call", payer, alice, 0, &[("1002000", 40)]),
        call(payer, bob, 3_000_000),
        // A delegatecall with value: the contract's own context; no TRX
        // leaves it.
        call(helper, helper, 9_000_000),
        internal("delegateResource", payer, alice, 1_000_000, &[]),
        call(payer, alice, 2_000_000),
    ];
    let featured = info_of(&tx, true, vec![], all.clone());
    // A node without vm.saveFeaturedInternalTx keeps only call, create and
    // suicide.
    let plain: Vec<InternalTransaction> = all
        .into_iter()
        .filter(|it| [&b"call"[..], b"create", b"suicide"].contains(&it.note.as_slice()))
        .collect();
    let plain = info_of(&tx, true, vec![], plain);
    let want = vec![
        (INTERNAL_INDEX, bob, 3_000_000, true),
        (INTERNAL_INDEX + 1, alice, 2_000_000, true),
    ];
    for info in [featured, plain] {
        let found = scan_pair(&tx, &info, &[alice, bob, helper]).unwrap();
        assert_eq!(keys(&found), want);
    }
}

#[test]
fn a_rejected_internal_transaction_moved_nothing_and_keeps_its_place() {
    let (payer, alice) = (body(0xc0), body(1));
    let tx = call_tx(1, ContractResult::Success);
    // The first payout's call reverted (caught by the contract); the
    // second went through.
    let info = info_of(
        &tx,
        true,
        vec![],
        vec![
            rejected(call(payer, alice, 4_000_000)),
            call(payer, alice, 1_000_000),
        ],
    );
    let found = scan_pair(&tx, &info, &[alice]).unwrap();
    assert_eq!(
        keys(&found),
        vec![
            (INTERNAL_INDEX, alice, 4_000_000, false),
            (INTERNAL_INDEX + 1, alice, 1_000_000, true),
        ]
    );
}

#[test]
fn a_reverted_transaction_moved_nothing_by_its_internal_transactions() {
    let (payer, alice) = (body(0xc0), body(1));
    let tx = call_tx(1, ContractResult::Revert);
    // java-tron marks them rejected; a node that did not must not be
    // believed either.
    let info = info_of(&tx, false, vec![], vec![call(payer, alice, 4_000_000)]);
    let found = scan_pair(&tx, &info, &[alice]).unwrap();
    assert_eq!(
        keys(&found),
        vec![(INTERNAL_INDEX, alice, 4_000_000, false)]
    );
    // The info says SUCCESS but the receipt REVERT: still nothing moved.
    let mut info = info;
    info.result = Code::Sucess as i32;
    let found = scan_pair(&tx, &info, &[alice]).unwrap();
    assert!(found.iter().all(|t| !t.success), "{found:?}");
}

#[test]
fn trc10_sent_by_a_contract_is_not_trx() {
    let (payer, alice) = (body(0xc0), body(1));
    let tx = call_tx(1, ContractResult::Success);
    let info = info_of(
        &tx,
        true,
        vec![],
        vec![internal("call", payer, alice, 0, &[("1002000", 5_000_000)])],
    );
    assert_eq!(scan_pair(&tx, &info, &[alice]).unwrap(), vec![]);
}

#[test]
fn a_created_contract_and_a_selfdestruct_heir_get_their_trx_not_the_tokens() {
    let (payer, child, heir) = (body(0xc0), body(0xc2), body(3));
    let tx = call_tx(1, ContractResult::Success);
    let info = info_of(
        &tx,
        true,
        vec![],
        vec![
            internal("create", payer, child, 1_500_000, &[]),
            internal("suicide", child, heir, 6_000_000, &[("1002000", 9)]),
        ],
    );
    let found = scan_pair(&tx, &info, &[child, heir]).unwrap();
    assert_eq!(
        keys(&found),
        vec![
            (INTERNAL_INDEX, child, 1_500_000, true),
            (INTERNAL_INDEX + 1, heir, 6_000_000, true),
        ]
    );
    assert!(found.iter().all(|t| t.asset == AssetId::Known(Asset::Trx)));
}

#[test]
fn a_negative_value_is_an_error_only_when_it_names_a_watched_address() {
    let (payer, alice, stranger) = (body(0xc0), body(1), body(9));
    let tx = call_tx(1, ContractResult::Success);
    let info = info_of(&tx, true, vec![], vec![call(payer, stranger, -5)]);
    assert_eq!(scan_pair(&tx, &info, &[alice]).unwrap(), vec![]);
    let info = info_of(&tx, true, vec![], vec![call(payer, alice, -5)]);
    assert!(matches!(
        scan_pair(&tx, &info, &[alice]),
        Err(ScanError::BadInternalTransaction { position: 0, .. })
    ));
}

#[test]
fn a_recipient_given_without_the_0x41_prefix_is_still_read() {
    let (payer, alice) = (body(0xc0), body(1));
    let tx = call_tx(1, ContractResult::Success);
    let mut it = call(payer, alice, 8);
    it.transfer_to_address = alice.to_vec();
    let info = info_of(&tx, true, vec![], vec![it]);
    let found = scan_pair(&tx, &info, &[alice]).unwrap();
    assert_eq!(keys(&found), vec![(INTERNAL_INDEX, alice, 8, true)]);
}

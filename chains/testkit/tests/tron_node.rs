//! The Tron test node through the gRPC clients generated from Tron's protos,
//! over its real sockets: what a watcher sees.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bitcoin::secp256k1::{ecdsa, Message as SecpMessage, Secp256k1};
use paywatch_testkit::tron::{
    recover_signer, sha256, tron_address, Fault, InternalTx, InternalTxSaving, Trc20Log,
    TronAccount, TronNode, TronNodeError, TronNodeOptions, TxId, BLOCK_INTERVAL_MS,
    DEFAULT_SOLIDITY_LAG, TRANSFER_TOPIC,
};
use prost::Message;
use tonic::transport::Channel;
use tonic::Code;
use tron_grpc as pb;
use tron_grpc::transaction::result::ContractResult;
use tron_grpc::wallet_client::WalletClient;
use tron_grpc::wallet_solidity_client::WalletSolidityClient;

type Wallet = WalletClient<Channel>;
type Solidity = WalletSolidityClient<Channel>;

/// 100 blocks of 300 transactions are ~12 MB, over tonic's 4 MB default.
const MAX_MESSAGE: usize = 64 << 20;

async fn wallet(node: &TronNode) -> Wallet {
    WalletClient::connect(node.url())
        .await
        .expect("connect to Wallet")
        .max_decoding_message_size(MAX_MESSAGE)
}

async fn solidity(node: &TronNode) -> Solidity {
    WalletSolidityClient::connect(node.solidity_url())
        .await
        .expect("connect to WalletSolidity")
        .max_decoding_message_size(MAX_MESSAGE)
}

async fn block(w: &mut Wallet, num: u64) -> pb::BlockExtention {
    w.get_block_by_num2(pb::NumberMessage { num: num as i64 })
        .await
        .expect("GetBlockByNum2")
        .into_inner()
}

async fn infos(w: &mut Wallet, num: u64) -> Vec<pb::TransactionInfo> {
    w.get_transaction_info_by_block_num(pb::NumberMessage { num: num as i64 })
        .await
        .expect("GetTransactionInfoByBlockNum")
        .into_inner()
        .transaction_info
}

async fn info_by_id(w: &mut Wallet, id: &TxId) -> pb::TransactionInfo {
    w.get_transaction_info_by_id(pb::BytesMessage {
        value: id.0.to_vec(),
    })
    .await
    .expect("GetTransactionInfoById")
    .into_inner()
}

fn raw_header(b: &pb::BlockExtention) -> &pb::block_header::Raw {
    b.block_header
        .as_ref()
        .and_then(|h| h.raw_data.as_ref())
        .expect("a block header")
}

fn number(b: &pb::BlockExtention) -> u64 {
    raw_header(b).number as u64
}

fn txids(b: &pb::BlockExtention) -> Vec<Vec<u8>> {
    b.transactions.iter().map(|t| t.txid.clone()).collect()
}

fn start_options() -> TronNodeOptions {
    TronNodeOptions {
        genesis_timestamp_ms: Some(1_700_000_001_000 - 1_700_000_001_000 % BLOCK_INTERVAL_MS),
        ..TronNodeOptions::default()
    }
}

async fn start() -> TronNode {
    TronNode::start(start_options())
        .await
        .expect("start the node")
}

fn word(body: &[u8; 21]) -> Vec<u8> {
    let mut w = vec![0u8; 12];
    w.extend_from_slice(&body[1..]);
    w
}

fn amount_word(v: u128) -> Vec<u8> {
    let mut w = vec![0u8; 16];
    w.extend_from_slice(&v.to_be_bytes());
    w
}

/// java-tron's transaction Merkle root, computed independently.
fn tx_trie_root(b: &pb::BlockExtention) -> Vec<u8> {
    let mut level: Vec<[u8; 32]> = b
        .transactions
        .iter()
        .map(|t| {
            sha256(
                &t.transaction
                    .as_ref()
                    .expect("a transaction")
                    .encode_to_vec(),
            )
        })
        .collect();
    if level.is_empty() {
        return vec![0u8; 32];
    }
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| {
                if p.len() == 2 {
                    sha256(&[p[0], p[1]].concat())
                } else {
                    p[0]
                }
            })
            .collect();
    }
    level[0].to_vec()
}

/// The sender of a transaction's (only) contract, and the contract.
fn owner_of(tx: &pb::Transaction) -> (Vec<u8>, &pb::transaction::Contract) {
    let raw = tx.raw_data.as_ref().expect("raw_data");
    assert_eq!(raw.contract.len(), 1);
    let contract = &raw.contract[0];
    let any = contract.parameter.as_ref().expect("a parameter");
    let owner = match any.type_url.as_str() {
        "type.googleapis.com/protocol.TransferContract" => {
            assert_eq!(contract.r#type, 1);
            pb::TransferContract::decode(any.value.as_slice())
                .unwrap()
                .owner_address
        }
        "type.googleapis.com/protocol.TriggerSmartContract" => {
            assert_eq!(contract.r#type, 31);
            pb::TriggerSmartContract::decode(any.value.as_slice())
                .unwrap()
                .owner_address
        }
        other => panic!("unexpected contract {other}"),
    };
    (owner, contract)
}

fn trigger_of(tx: &pb::Transaction) -> pb::TriggerSmartContract {
    let (_, contract) = owner_of(tx);
    let any = contract.parameter.as_ref().unwrap();
    pb::TriggerSmartContract::decode(any.value.as_slice()).unwrap()
}

fn contract_ret(tx: &pb::Transaction) -> i32 {
    tx.ret.first().expect("a ret").contract_ret
}

/// Checks everything a block says about itself and its parent: the id
/// encodes the number and hashes the header, the parent hash links, the
/// time is 3 s on, the witness signed it, the trie root and every txid and
/// signature are right.
fn check_block(b: &pb::BlockExtention, parent: Option<&pb::BlockExtention>) {
    let raw = raw_header(b);
    let n = raw.number as u64;
    assert_eq!(b.blockid.len(), 32);
    assert_eq!(
        b.blockid[..8],
        n.to_be_bytes(),
        "block id encodes the number"
    );
    let hash = sha256(&raw.encode_to_vec());
    assert_eq!(b.blockid[8..], hash[8..], "block id hashes the raw header");
    if let Some(p) = parent {
        assert_eq!(raw.parent_hash, p.blockid, "block {n} links to its parent");
        assert_eq!(raw.timestamp, raw_header(p).timestamp + BLOCK_INTERVAL_MS);
    }
    assert_eq!(raw.witness_address.len(), 21);
    assert_eq!(raw.witness_address[0], 0x41);
    let sig = &b.block_header.as_ref().unwrap().witness_signature;
    assert_eq!(
        recover_signer(&hash, sig).unwrap().to_vec(),
        raw.witness_address
    );
    assert_eq!(raw.tx_trie_root, tx_trie_root(b));
    for t in &b.transactions {
        let tx = t.transaction.as_ref().unwrap();
        let raw_tx = tx.raw_data.as_ref().unwrap();
        let id = sha256(&raw_tx.encode_to_vec());
        assert_eq!(t.txid, id, "txid is sha256 of raw_data");
        let ret = t.result.as_ref().expect("a result");
        assert!(ret.result);
        assert_eq!(tx.signature.len(), 1);
        assert_eq!(tx.signature[0].len(), 65);
        let (owner, _) = owner_of(tx);
        assert_eq!(
            recover_signer(&id, &tx.signature[0]).unwrap().to_vec(),
            owner
        );
        assert!(raw_tx.timestamp < raw.timestamp, "made before its block");
        assert_eq!(raw_tx.expiration, raw_tx.timestamp + 60_000);
        assert_eq!(raw_tx.ref_block_bytes.len(), 2);
        assert_eq!(raw_tx.ref_block_hash.len(), 8);
    }
}

/// Checks a block's infos against its transactions.
fn check_infos(b: &pb::BlockExtention, infos: &[pb::TransactionInfo]) {
    let raw = raw_header(b);
    assert_eq!(infos.len(), b.transactions.len());
    for (t, info) in b.transactions.iter().zip(infos) {
        assert_eq!(info.id, t.txid);
        assert_eq!(info.block_number, raw.number);
        assert_eq!(info.block_time_stamp, raw.timestamp);
        let tx = t.transaction.as_ref().unwrap();
        let receipt = info.receipt.as_ref().expect("a receipt");
        match contract_ret(tx) {
            r if r == ContractResult::Success as i32 => {
                assert_eq!(info.result, pb::transaction_info::Code::Sucess as i32);
            }
            r if r == ContractResult::Revert as i32 => {
                assert_eq!(info.result, pb::transaction_info::Code::Failed as i32);
                assert_eq!(receipt.result, ContractResult::Revert as i32);
                assert!(info.log.is_empty(), "a reverted call logs nothing");
            }
            other => panic!("contractRet {other}"),
        }
        let (_, contract) = owner_of(tx);
        if contract.r#type == 1 {
            assert!(info.log.is_empty());
            assert!(info.contract_address.is_empty());
            assert_eq!(info.fee, 0);
        } else {
            let call = trigger_of(tx);
            assert_eq!(info.contract_address, call.contract_address);
            assert!(info.fee > 0);
            assert_eq!(
                info.fee,
                receipt.energy_fee + receipt.net_fee,
                "fee = energy + bandwidth burnt"
            );
            for log in &info.log {
                assert_eq!(log.address.len(), 20);
                assert_eq!(log.topics.len(), 3);
                assert_eq!(log.topics[0], TRANSFER_TOPIC);
                assert_eq!(log.data.len(), 32);
            }
        }
    }
}

#[tokio::test]
async fn blocks_link_and_transactions_verify() {
    let node = start().await;
    let mut w = wallet(&node).await;
    let alice = TronAccount::dev(1);
    let bob = TronAccount::dev(2);
    let carol = TronAccount::dev(3);
    let usdt = node
        .deploy_trc20_at("USDT", "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t")
        .unwrap();
    let exchange = node.deploy_contract("exchange");
    node.mine(2).unwrap();

    let trx = node.send_trx(&alice, bob.address(), 1_500_000).unwrap();
    let token = node
        .trc20_transfer(&usdt, &alice, bob.address(), 25_000_000)
        .unwrap();
    let failed = node
        .trc20_transfer_failing(&usdt, &alice, bob.address(), 7_000_000)
        .unwrap();
    let payout = node
        .contract_trc20_transfer(&carol, &exchange, &usdt, bob.address(), 3_000_000)
        .unwrap();
    let batch = node
        .trigger(
            &carol,
            &exchange,
            &[0xde, 0xad, 0xbe, 0xef],
            &[
                Trc20Log {
                    token: usdt.address().to_owned(),
                    from: exchange.address().to_owned(),
                    to: alice.address().to_owned(),
                    amount: 1,
                },
                Trc20Log {
                    token: usdt.address().to_owned(),
                    from: exchange.address().to_owned(),
                    to: bob.address().to_owned(),
                    amount: 2,
                },
            ],
        )
        .unwrap();
    // The same transfer twice is two transactions, as from a real wallet.
    let trx_again = node.send_trx(&alice, bob.address(), 1_500_000).unwrap();
    assert_ne!(trx, trx_again);
    assert_eq!(node.pending_len(), 6);
    assert_eq!(node.mine(0).unwrap(), 2, "mining nothing keeps the queue");
    assert_eq!(node.pending_len(), 6);
    assert_eq!(node.mine(2).unwrap(), 4);
    assert_eq!(node.pending_len(), 0);
    assert_eq!(node.tx_height(&token), Some(3));

    // The chain links from genesis to the tip.
    let tip = w
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(number(&tip), 4);
    let mut blocks = Vec::new();
    for n in 0..=4 {
        let b = block(&mut w, n).await;
        assert_eq!(number(&b), n);
        assert_eq!(node.block_id(n).unwrap().to_vec(), b.blockid);
        check_block(&b, blocks.last());
        let i = infos(&mut w, n).await;
        check_infos(&b, &i);
        blocks.push(b);
    }
    assert_eq!(tip, blocks[4]);

    // Block 3 holds the six transactions, in queue order.
    let b3 = &blocks[3];
    let ids: Vec<Vec<u8>> = [trx, token, failed, payout, batch, trx_again]
        .iter()
        .map(|t| t.0.to_vec())
        .collect();
    assert_eq!(txids(b3), ids);
    assert!(blocks[4].transactions.is_empty());
    assert_eq!(raw_header(&blocks[4]).tx_trie_root, vec![0u8; 32]);
    let i3 = infos(&mut w, 3).await;
    let secp = Secp256k1::verification_only();

    // Transactions reference the tip they were made on (block 2).
    for t in &b3.transactions {
        let raw = t.transaction.as_ref().unwrap().raw_data.as_ref().unwrap();
        assert_eq!(raw.ref_block_bytes, 2u64.to_be_bytes()[6..8]);
        assert_eq!(raw.ref_block_hash, blocks[2].blockid[8..16]);
    }

    // TRX: a TransferContract signed by alice; an info without logs.
    let tx = b3.transactions[0].transaction.as_ref().unwrap();
    let any = tx.raw_data.as_ref().unwrap().contract[0]
        .parameter
        .as_ref()
        .unwrap();
    let transfer = pb::TransferContract::decode(any.value.as_slice()).unwrap();
    assert_eq!(transfer.owner_address, alice.body());
    assert_eq!(transfer.to_address, bob.body());
    assert_eq!(transfer.amount, 1_500_000);
    assert_eq!(contract_ret(tx), ContractResult::Success as i32);
    let sig = ecdsa::Signature::from_compact(&tx.signature[0][..64]).unwrap();
    secp.verify_ecdsa(&SecpMessage::from_digest(trx.0), &sig, &alice.public_key())
        .expect("alice's signature verifies");
    assert_eq!(tx.raw_data.as_ref().unwrap().fee_limit, 0);
    assert!(i3[0].log.is_empty());
    assert_eq!(i3[0].receipt.as_ref().unwrap().net_usage, 268);

    // TRC-20: transfer(bob, 25) on USDT, with its Transfer log.
    let tx = b3.transactions[1].transaction.as_ref().unwrap();
    let call = trigger_of(tx);
    assert_eq!(call.contract_address, usdt.body());
    assert_eq!(call.data[..4], [0xa9, 0x05, 0x9c, 0xbb]);
    assert_eq!(call.data[4..36], word(&bob.body())[..]);
    assert_eq!(call.data[36..], amount_word(25_000_000)[..]);
    assert!(tx.raw_data.as_ref().unwrap().fee_limit > 0);
    let info = &i3[1];
    assert_eq!(info.contract_address, usdt.body());
    assert_eq!(
        info.receipt.as_ref().unwrap().result,
        ContractResult::Success as i32
    );
    assert_eq!(info.contract_result, vec![amount_word(1)]);
    assert_eq!(info.log.len(), 1);
    let log = &info.log[0];
    assert_eq!(log.address, usdt.body()[1..]);
    assert_eq!(log.topics[1], word(&alice.body()));
    assert_eq!(log.topics[2], word(&bob.body()));
    assert_eq!(log.data, amount_word(25_000_000));

    // The reverted transfer: REVERT / FAILED, no log, the calldata alone
    // names bob.
    let tx = b3.transactions[2].transaction.as_ref().unwrap();
    assert_eq!(contract_ret(tx), ContractResult::Revert as i32);
    assert_eq!(trigger_of(tx).data[4..36], word(&bob.body())[..]);
    let info = &i3[2];
    assert_eq!(info.result, pb::transaction_info::Code::Failed as i32);
    assert_eq!(
        info.receipt.as_ref().unwrap().result,
        ContractResult::Revert as i32
    );
    assert!(info.log.is_empty());
    assert_eq!(info.res_message, b"REVERT opcode executed");

    // The contract-made payment: carol calls the exchange; only the log
    // names bob, as sent by the exchange.
    let tx = b3.transactions[3].transaction.as_ref().unwrap();
    let call = trigger_of(tx);
    assert_eq!(call.owner_address, carol.body());
    assert_eq!(call.contract_address, exchange.body());
    assert!(!call.data.windows(20).any(|win| win == &bob.body()[1..]));
    assert!(!call.data.windows(20).any(|win| win == &usdt.body()[1..]));
    let info = &i3[3];
    assert_eq!(info.contract_address, exchange.body());
    assert_eq!(info.log.len(), 1);
    assert_eq!(info.log[0].address, usdt.body()[1..]);
    assert_eq!(info.log[0].topics[1], word(&exchange.body()));
    assert_eq!(info.log[0].topics[2], word(&bob.body()));
    assert_eq!(info.log[0].data, amount_word(3_000_000));

    // The batch call: both logs, in order.
    let info = &i3[4];
    assert_eq!(
        trigger_of(b3.transactions[4].transaction.as_ref().unwrap()).data,
        [0xde, 0xad, 0xbe, 0xef]
    );
    assert_eq!(info.log.len(), 2);
    assert_eq!(info.log[0].topics[2], word(&alice.body()));
    assert_eq!(info.log[1].topics[2], word(&bob.body()));
    assert_eq!(info.log[1].data, amount_word(2));

    // By id: the same transaction and info as in the block.
    for (k, id) in ids.iter().enumerate() {
        let tx = w
            .get_transaction_by_id(pb::BytesMessage { value: id.clone() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(Some(&tx), b3.transactions[k].transaction.as_ref());
        let info = w
            .get_transaction_info_by_id(pb::BytesMessage { value: id.clone() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(info, i3[k]);
    }

    // What does not exist is an empty message, as java-tron answers.
    let none = w
        .get_transaction_by_id(pb::BytesMessage { value: vec![7; 32] })
        .await
        .unwrap()
        .into_inner();
    assert!(none.raw_data.is_none());
    assert_eq!(
        info_by_id(&mut w, &TxId([7; 32])).await,
        pb::TransactionInfo::default()
    );
    let future = block(&mut w, 5).await;
    assert!(future.block_header.is_none());
    assert!(future.blockid.is_empty());
    assert!(infos(&mut w, 5).await.is_empty());
    let negative = w
        .get_block_by_num2(pb::NumberMessage { num: -1 })
        .await
        .unwrap()
        .into_inner();
    assert!(negative.block_header.is_none());
}

#[tokio::test]
async fn addresses_are_tron_addresses() {
    let alice = TronAccount::dev(1);
    assert!(alice.address().starts_with('T'));
    assert_eq!(alice.address().len(), 34);
    assert_eq!(tron_address(&alice.body()), alice.address());
    assert_eq!(
        paywatch_testkit::tron::tron_body(alice.address()).unwrap(),
        alice.body()
    );
    assert_eq!(
        paywatch_testkit::tron::body_of_public_key(&alice.public_key()),
        alice.body()
    );
    // The same index is the same account; another index another.
    assert_eq!(TronAccount::dev(1).address(), alice.address());
    assert_ne!(TronAccount::dev(2).address(), alice.address());
    let node = start().await;
    assert!(matches!(
        node.send_trx(&alice, "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", 1),
        Err(TronNodeError::InvalidInput { .. })
    ));
    assert!(matches!(
        node.send_trx(&alice, TronAccount::dev(2).address(), u64::MAX),
        Err(TronNodeError::InvalidInput { .. })
    ));
    assert_eq!(node.pending_len(), 0);
}

#[tokio::test]
async fn range_fetch_respects_the_limit() {
    let node = start().await;
    let mut w = wallet(&node).await;
    assert_eq!(node.mine(150).unwrap(), 150);
    let range = |start: i64, end: i64| pb::BlockLimit {
        start_num: start,
        end_num: end,
    };
    let list = w
        .get_block_by_limit_next2(range(10, 110))
        .await
        .unwrap()
        .into_inner()
        .block;
    assert_eq!(list.len(), 100);
    for (k, b) in list.iter().enumerate() {
        assert_eq!(number(b), 10 + k as u64);
        if k > 0 {
            check_block(b, Some(&list[k - 1]));
        }
        assert_eq!(*b, block(&mut w, 10 + k as u64).await);
    }
    // More than 100, empty or backwards ranges: an empty list.
    for (start, end) in [(0, 101), (5, 5), (9, 3), (-5, 0), (i64::MIN, 50)] {
        let list = w
            .get_block_by_limit_next2(range(start, end))
            .await
            .unwrap()
            .into_inner()
            .block;
        assert!(
            list.is_empty(),
            "[{start}, {end}) gave {} blocks",
            list.len()
        );
    }
    // Past the tip: the blocks there are.
    let list = w
        .get_block_by_limit_next2(range(140, 200))
        .await
        .unwrap()
        .into_inner()
        .block;
    let numbers: Vec<u64> = list.iter().map(number).collect();
    assert_eq!(numbers, (140..=150).collect::<Vec<_>>());
}

#[tokio::test]
async fn solidity_lags_the_tip() {
    let node = start().await;
    let mut w = wallet(&node).await;
    let mut s = solidity(&node).await;
    assert_ne!(node.url(), node.solidity_url());
    let alice = TronAccount::dev(1);
    node.mine(29).unwrap();
    let paid = node
        .send_trx(&alice, TronAccount::dev(4).address(), 5)
        .unwrap();
    assert_eq!(node.mine(1).unwrap(), 30);
    assert_eq!(node.solidified(), 30 - DEFAULT_SOLIDITY_LAG);

    let now = s
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(number(&now), 11);
    assert_eq!(now, block(&mut w, 11).await);
    let solid = |n: i64| pb::NumberMessage { num: n };
    let b11 = s.get_block_by_num2(solid(11)).await.unwrap().into_inner();
    assert_eq!(b11, now);
    let b12 = s.get_block_by_num2(solid(12)).await.unwrap().into_inner();
    assert!(b12.block_header.is_none(), "not solidified yet");
    // The payment is in block 30: on the full node, not on the solidity one.
    assert_eq!(infos(&mut w, 30).await.len(), 1);
    let unsolid = s
        .get_transaction_info_by_block_num(solid(30))
        .await
        .unwrap()
        .into_inner();
    assert!(unsolid.transaction_info.is_empty());
    let by_id = s
        .get_transaction_info_by_id(pb::BytesMessage {
            value: paid.0.to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_id, pb::TransactionInfo::default());

    // 19 blocks later it is solidified.
    node.mine(19).unwrap();
    let solid_infos = s
        .get_transaction_info_by_block_num(solid(30))
        .await
        .unwrap()
        .into_inner()
        .transaction_info;
    assert_eq!(solid_infos, infos(&mut w, 30).await);
    let by_id = s
        .get_transaction_info_by_id(pb::BytesMessage {
            value: paid.0.to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_id.block_number, 30);

    node.set_solidity_lag(0);
    let now = s
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(number(&now), 49);
    node.set_solidity_lag(1_000);
    let now = s
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(number(&now), 0, "never below genesis");
}

#[tokio::test]
async fn reorg_replaces_the_blocks_above_the_fork() {
    let node = start().await;
    let mut w = wallet(&node).await;
    let alice = TronAccount::dev(1);
    let shop = TronAccount::dev(5);
    let usdt = node.deploy_trc20("USDT");
    node.mine(10).unwrap();
    let moved = node
        .trc20_transfer(&usdt, &alice, shop.address(), 100)
        .unwrap();
    node.mine(1).unwrap(); // block 11
    let dropped = node.send_trx(&alice, shop.address(), 200).unwrap();
    let kept_elsewhere = node.send_trx(&alice, shop.address(), 300).unwrap();
    node.mine(1).unwrap(); // block 12
    assert_eq!(node.mine(2).unwrap(), 14);
    let before: Vec<pb::BlockExtention> = {
        let mut v = Vec::new();
        for n in 0..=14 {
            v.push(block(&mut w, n).await);
        }
        v
    };

    // A name that is neither orphaned nor queued: refused, nothing changes.
    let err = node.reorg(4, &[vec![TxId([9; 32])]]).unwrap_err();
    assert!(matches!(err, TronNodeError::UnknownTransaction(_)), "{err}");
    assert!(matches!(
        node.reorg(15, &[]),
        Err(TronNodeError::InvalidInput { .. })
    ));
    assert!(matches!(
        node.reorg(4, &[vec![moved], vec![moved]]),
        Err(TronNodeError::InvalidInput { .. })
    ));
    assert_eq!(block(&mut w, 14).await, before[14]);

    // Fork at 10: blocks 11..=14 go; the new branch has 5 blocks: the
    // USDT payment moves from 11 to 13, one TRX payment moves to 15 with a
    // new one beside it, the other is dropped.
    let fresh = node.send_trx(&alice, shop.address(), 400).unwrap();
    let tip = node
        .reorg(
            4,
            &[
                vec![],
                vec![],
                vec![moved],
                vec![],
                vec![kept_elsewhere, fresh],
            ],
        )
        .unwrap();
    assert_eq!(tip, 15);
    assert_eq!(node.pending_len(), 0);

    let mut after = Vec::new();
    for n in 0..=15 {
        let b = block(&mut w, n).await;
        check_block(&b, after.last());
        check_infos(&b, &infos(&mut w, n).await);
        after.push(b);
    }
    for n in 0..=10 {
        assert_eq!(after[n], before[n], "block {n} is below the fork");
    }
    for n in 11..=14 {
        assert_ne!(
            after[n].blockid, before[n].blockid,
            "block {n} was replaced"
        );
        assert_eq!(after[n].blockid[..8], before[n].blockid[..8]);
        assert_ne!(
            raw_header(&after[n]).witness_address,
            raw_header(&before[n]).witness_address
        );
    }
    assert_eq!(txids(&after[13]), vec![moved.0.to_vec()]);
    assert_eq!(
        txids(&after[15]),
        vec![kept_elsewhere.0.to_vec(), fresh.0.to_vec()]
    );
    assert!(after[11].transactions.is_empty() && after[12].transactions.is_empty());

    // The moved transaction is the same signed transaction, now at 13.
    let old_tx = &before[11].transactions[0];
    assert_eq!(after[13].transactions[0].transaction, old_tx.transaction);
    assert_eq!(node.tx_height(&moved), Some(13));
    let info = info_by_id(&mut w, &moved).await;
    assert_eq!(info.block_number, 13);
    assert_eq!(info.log.len(), 1);
    // The dropped one is gone.
    assert_eq!(node.tx_height(&dropped), None);
    assert_eq!(
        info_by_id(&mut w, &dropped).await,
        pb::TransactionInfo::default()
    );

    // A reorg that keeps the same contents still changes the id.
    let id15 = node.block_id(15).unwrap();
    node.reorg(1, &[vec![kept_elsewhere, fresh]]).unwrap();
    assert_ne!(node.block_id(15).unwrap(), id15);
    assert_eq!(node.tx_height(&fresh), Some(15));
    // And a shorter branch lowers the tip.
    assert_eq!(node.reorg(3, &[vec![]]).unwrap(), 13);
    assert_eq!(node.tx_height(&moved), None);
    assert!(block(&mut w, 14).await.block_header.is_none());
}

#[tokio::test]
async fn faults_fail_delay_or_disconnect() {
    let node = start().await;
    let mut w = wallet(&node).await;
    let mut s = solidity(&node).await;
    let alice = TronAccount::dev(1);
    node.mine(20).unwrap();
    node.send_trx(&alice, TronAccount::dev(6).address(), 1)
        .unwrap();
    node.mine(1).unwrap(); // 21
    node.send_trx(&alice, TronAccount::dev(6).address(), 2)
        .unwrap();
    node.send_trx(&alice, TronAccount::dev(6).address(), 3)
        .unwrap();
    node.mine(1).unwrap(); // 22
    let b21 = block(&mut w, 21).await;
    let b22 = block(&mut w, 22).await;

    node.set_fault(Fault::Unavailable);
    let err = w
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    let err = w
        .get_transaction_info_by_block_num(pb::NumberMessage { num: 21 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    let err = s
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);

    node.set_fault(Fault::Slow(Duration::from_millis(300)));
    let started = Instant::now();
    assert_eq!(block(&mut w, 22).await, b22);
    assert!(started.elapsed() >= Duration::from_millis(300));

    node.set_fault(Fault::Disconnected);
    let bad = block(&mut w, 22).await;
    assert_eq!(number(&bad), 22);
    assert_eq!(bad.blockid[..8], 22u64.to_be_bytes());
    assert_ne!(raw_header(&bad).parent_hash, b21.blockid, "does not link");
    assert_ne!(bad.blockid, b22.blockid);
    assert_eq!(txids(&bad), txids(&b22));
    let tip = w
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap()
        .into_inner();
    assert_ne!(raw_header(&tip).parent_hash, b21.blockid);
    let list = w
        .get_block_by_limit_next2(pb::BlockLimit {
            start_num: 20,
            end_num: 23,
        })
        .await
        .unwrap()
        .into_inner()
        .block;
    assert_eq!(list.len(), 3);
    assert_ne!(raw_header(&list[2]).parent_hash, list[1].blockid);
    // Block 22's infos are block 21's.
    let wrong = infos(&mut w, 22).await;
    assert_eq!(wrong.len(), 1);
    assert_eq!(wrong[0].id, b21.transactions[0].txid);
    assert_eq!(wrong[0].block_number, 21);
    assert_ne!(wrong.len(), b22.transactions.len());

    node.set_fault(Fault::None);
    assert_eq!(block(&mut w, 22).await, b22);
    check_infos(&b22, &infos(&mut w, 22).await);
}

#[tokio::test]
async fn restart_keeps_the_chain_and_port() {
    let mut node = start().await;
    let url = node.url();
    let solidity_url = node.solidity_url();
    let alice = TronAccount::dev(1);
    let paid = node
        .send_trx(&alice, TronAccount::dev(7).address(), 9)
        .unwrap();
    node.mine(25).unwrap();
    let mut w = wallet(&node).await;
    let b1 = block(&mut w, 1).await;
    let tip = block(&mut w, 25).await;

    node.stop().await.unwrap();
    assert!(!node.is_running());
    let err = w
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(WalletClient::connect(url.clone()).await.is_err());

    // The chain can grow while the node is down.
    node.mine(1).unwrap();
    node.start_again().await.unwrap();
    assert!(node.is_running());
    assert_eq!(node.url(), url);
    assert_eq!(node.solidity_url(), solidity_url);
    // The old client reconnects by itself.
    assert_eq!(block(&mut w, 1).await, b1);
    assert_eq!(block(&mut w, 25).await, tip);
    let b26 = block(&mut w, 26).await;
    check_block(&b26, Some(&tip));
    assert_eq!(info_by_id(&mut w, &paid).await.block_number, 1);

    node.restart().await.unwrap();
    let mut s = solidity(&node).await;
    let now = s
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(number(&now), 26 - DEFAULT_SOLIDITY_LAG);
}

#[tokio::test]
async fn other_rpcs_are_unimplemented() {
    let node = start().await;
    let mut w = wallet(&node).await;
    let mut s = solidity(&node).await;
    // GetAccount answers now (the balance backstop reads it); an account
    // without an address is refused.
    let err = w.get_account(pb::Account::default()).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = w
        .broadcast_transaction(pb::Transaction::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    let err = s
        .get_block_by_num(pb::NumberMessage { num: 0 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    // Wallet is not served on the solidity port, nor the other way round.
    let mut crossed = WalletClient::connect(node.solidity_url()).await.unwrap();
    let err = crossed
        .get_now_block2(pb::EmptyMessage::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
}

#[tokio::test]
async fn same_options_and_steps_give_the_same_chain() {
    let options = TronNodeOptions {
        genesis_number: 70_000_000,
        ..start_options()
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let node = TronNode::start(options.clone()).await.unwrap();
        let usdt = node.deploy_trc20("USDT");
        node.send_trx(&TronAccount::dev(1), TronAccount::dev(2).address(), 1)
            .unwrap();
        node.trc20_transfer(
            &usdt,
            &TronAccount::dev(1),
            TronAccount::dev(2).address(),
            2,
        )
        .unwrap();
        assert_eq!(node.mine(3).unwrap(), 70_000_003);
        node.fill_blocks(2, 10).unwrap();
        let mut w = wallet(&node).await;
        assert!(block(&mut w, 69_999_999).await.block_header.is_none());
        let genesis = block(&mut w, 70_000_000).await;
        assert_eq!(
            raw_header(&genesis).timestamp,
            options.genesis_timestamp_ms.unwrap()
        );
        let mut chain = Vec::new();
        for n in 70_000_000..=70_000_005 {
            let b = block(&mut w, n).await;
            check_block(&b, chain.last());
            chain.push(b);
        }
        ids.push(chain.iter().map(|b| b.blockid.clone()).collect::<Vec<_>>());
    }
    assert_eq!(ids[0], ids[1]);
}

#[tokio::test]
async fn fill_blocks_are_mixed_and_valid() {
    let node = start().await;
    let mut w = wallet(&node).await;
    let usdt = node.deploy_trc20("USDT");
    let queued = node
        .send_trx(&TronAccount::dev(1), TronAccount::dev(2).address(), 5)
        .unwrap();
    assert_eq!(node.fill_blocks(4, 50).unwrap(), 4);
    let mut seen = HashSet::new();
    let mut parent = block(&mut w, 0).await;
    let (mut trx, mut ok, mut reverted, mut logs) = (0, 0, 0, 0);
    for n in 1..=4 {
        let b = block(&mut w, n).await;
        check_block(&b, Some(&parent));
        let i = infos(&mut w, n).await;
        check_infos(&b, &i);
        assert_eq!(b.transactions.len(), if n == 1 { 51 } else { 50 });
        for (t, info) in b.transactions.iter().zip(&i) {
            assert!(seen.insert(t.txid.clone()), "txids are unique");
            let tx = t.transaction.as_ref().unwrap();
            if owner_of(tx).1.r#type == 1 {
                trx += 1;
            } else if contract_ret(tx) == ContractResult::Revert as i32 {
                reverted += 1;
            } else {
                ok += 1;
                assert_eq!(info.log.len(), 1);
                assert_eq!(info.log[0].address, usdt.body()[1..]);
                logs += 1;
            }
        }
        parent = b;
    }
    assert_eq!(node.tx_height(&queued), Some(1));
    assert_eq!(trx, 1 + 80);
    assert_eq!(ok, 100);
    assert_eq!(logs, 100);
    assert_eq!(reverted, 20);
    // The range answer for full blocks.
    let list = w
        .get_block_by_limit_next2(pb::BlockLimit {
            start_num: 1,
            end_num: 5,
        })
        .await
        .unwrap()
        .into_inner()
        .block;
    assert_eq!(
        list.iter().map(|b| b.transactions.len()).sum::<usize>(),
        201
    );
}

/// How long 10 000 blocks of 300 transactions take to build. Run it with
/// `cargo test -p paywatch-testkit --release --test tron_node -- --ignored
/// --nocapture fill_10k`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: ~10 s in a release build, slow in a debug one; ~1.7 GB of memory"]
async fn fill_10k_blocks_of_300() {
    let node = start().await;
    node.deploy_trc20("USDT");
    let started = Instant::now();
    let tip = node.fill_blocks(10_000, 300).unwrap();
    let built = started.elapsed();
    assert_eq!(tip, 10_000);
    println!(
        "fill_blocks(10_000, 300): {built:?} ({:?} a block)",
        built / 10_000
    );
    let mut w = wallet(&node).await;
    let started = Instant::now();
    let mut fetched = 0;
    for start in (1..=1_000).step_by(100) {
        let list = w
            .get_block_by_limit_next2(pb::BlockLimit {
                start_num: start,
                end_num: start + 100,
            })
            .await
            .unwrap()
            .into_inner()
            .block;
        fetched += list.len();
    }
    assert_eq!(fetched, 1_000);
    println!(
        "GetBlockByLimitNext2 of 1 000 such blocks: {:?}",
        started.elapsed()
    );
}

/// An internal transaction's (caller, to, TRX sun, tokens, note, rejected).
type Internal = (Vec<u8>, Vec<u8>, i64, Vec<(String, i64)>, String, bool);

fn internal_of(info: &pb::TransactionInfo) -> Vec<Internal> {
    info.internal_transactions
        .iter()
        .map(|it| {
            // java-tron writes the TRX value first, without a token id.
            let (trx, tokens) = it.call_value_info.split_first().expect("a TRX value");
            assert!(trx.token_id.is_empty());
            assert_eq!(it.hash.len(), 32);
            (
                it.caller_address.clone(),
                it.transfer_to_address.clone(),
                trx.call_value,
                tokens
                    .iter()
                    .map(|t| (t.token_id.clone(), t.call_value))
                    .collect(),
                String::from_utf8(it.note.clone()).unwrap(),
                it.rejected,
            )
        })
        .collect()
}

fn saving(internal_tx: InternalTxSaving) -> TronNodeOptions {
    TronNodeOptions {
        internal_tx,
        ..start_options()
    }
}

#[tokio::test]
async fn a_contract_trx_payout_shows_only_as_an_internal_transaction_of_a_node_that_saves_them() {
    let node = TronNode::start(saving(InternalTxSaving::On)).await.unwrap();
    let payer = node.deploy_contract("payroll");
    let to = TronAccount::dev(7);
    let id = node
        .contract_trx_payout(&TronAccount::dev(1), &payer, to.address(), 12_345_678)
        .unwrap();
    let tip = node.mine(1).unwrap();
    let mut w = wallet(&node).await;
    let b = block(&mut w, tip).await;
    check_block(&b, None);
    let by_block = infos(&mut w, tip).await;
    check_infos(&b, &by_block);
    assert_eq!(by_block[0], info_by_id(&mut w, &id).await);
    let info = &by_block[0];
    assert_eq!(
        internal_of(info),
        vec![(
            payer.body().to_vec(),
            to.body().to_vec(),
            12_345_678,
            vec![],
            "call".to_owned(),
            false
        )]
    );
    // Neither the call nor a log names the recipient or the amount.
    let call = trigger_of(b.transactions[0].transaction.as_ref().unwrap());
    assert_eq!(call.contract_address, payer.body().to_vec());
    assert_eq!(call.call_value, 0);
    let body20 = &to.body()[1..];
    assert!(!call.data.windows(20).any(|w| w == body20));
    assert!(info.log.is_empty());
    assert_eq!(
        info.receipt.as_ref().unwrap().result,
        ContractResult::Success as i32
    );
}

#[tokio::test]
async fn a_node_without_save_internal_tx_omits_them_and_keeps_what_it_made() {
    // java-tron's default: vm.saveInternalTx = false.
    let node = start().await;
    let payer = node.deploy_contract("payroll");
    let to = TronAccount::dev(7);
    let before = node
        .contract_trx_payout(&TronAccount::dev(1), &payer, to.address(), 5)
        .unwrap();
    let first = node.mine(1).unwrap();
    // Restarted with the setting on: only blocks made from then on keep them.
    node.set_internal_tx_saving(InternalTxSaving::On);
    let after = node
        .contract_trx_payout(&TronAccount::dev(1), &payer, to.address(), 6)
        .unwrap();
    let second = node.mine(1).unwrap();
    let mut w = wallet(&node).await;
    let old = info_by_id(&mut w, &before).await;
    assert!(old.internal_transactions.is_empty(), "{old:?}");
    assert_eq!(infos(&mut w, first).await[0], old);
    let new = info_by_id(&mut w, &after).await;
    assert_eq!(internal_of(&new).len(), 1);
    assert_eq!(infos(&mut w, second).await[0], new);
    let mut s = solidity(&node).await;
    node.set_solidity_lag(0);
    let solid = s
        .get_transaction_info_by_id(pb::BytesMessage {
            value: after.0.to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(solid, new);
}

#[tokio::test]
async fn featured_internal_transactions_only_with_save_featured_and_reverts_reject_all() {
    let made = |payer: &str, to: &str| {
        vec![
            InternalTx {
                note: "freezeBalanceV2".to_owned(),
                ..InternalTx::call(payer, to, 3_000_000)
            },
            InternalTx {
                tokens: vec![("1002000".to_owned(), 40)],
                ..InternalTx::call(payer, to, 0)
            },
            InternalTx {
                rejected: true,
                ..InternalTx::call(payer, to, 2)
            },
            InternalTx::call(payer, to, 1_000_000),
        ]
    };
    let notes = |info: &pb::TransactionInfo| -> Vec<(String, i64, bool)> {
        internal_of(info)
            .into_iter()
            .map(|(_, _, sun, _, note, rejected)| (note, sun, rejected))
            .collect()
    };
    for (mode, want) in [
        (
            InternalTxSaving::On,
            vec![
                ("call".to_owned(), 0, false),
                ("call".to_owned(), 2, true),
                ("call".to_owned(), 1_000_000, false),
            ],
        ),
        (
            InternalTxSaving::WithFeatured,
            vec![
                ("freezeBalanceV2".to_owned(), 3_000_000, false),
                ("call".to_owned(), 0, false),
                ("call".to_owned(), 2, true),
                ("call".to_owned(), 1_000_000, false),
            ],
        ),
    ] {
        let node = TronNode::start(saving(mode)).await.unwrap();
        let payer = node.deploy_contract("batcher");
        let to = TronAccount::dev(7);
        let list = made(payer.address(), to.address());
        let ok = node
            .trigger_internal(&TronAccount::dev(1), &payer, b"batch", 9, &list, true)
            .unwrap();
        let reverted = node
            .trigger_internal(&TronAccount::dev(2), &payer, b"batch", 9, &list, false)
            .unwrap();
        let tip = node.mine(1).unwrap();
        let mut w = wallet(&node).await;
        let b = block(&mut w, tip).await;
        check_infos(&b, &infos(&mut w, tip).await);
        let info = info_by_id(&mut w, &ok).await;
        assert_eq!(notes(&info), want, "{mode:?}");
        let tokens = &internal_of(&info)[usize::from(mode == InternalTxSaving::WithFeatured)].3;
        assert_eq!(tokens, &vec![("1002000".to_owned(), 40)]);
        let failed = info_by_id(&mut w, &reverted).await;
        assert_eq!(failed.result, pb::transaction_info::Code::Failed as i32);
        assert_eq!(
            failed.receipt.as_ref().unwrap().result,
            ContractResult::Revert as i32
        );
        let all_rejected: Vec<_> = want.iter().map(|(n, s, _)| (n.clone(), *s, true)).collect();
        assert_eq!(notes(&failed), all_rejected);
        let call = trigger_of(b.transactions[0].transaction.as_ref().unwrap());
        assert_eq!(call.call_value, 9);
    }
}

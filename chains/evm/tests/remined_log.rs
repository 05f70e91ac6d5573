//! A token payment keeps its key when its transaction is mined again in
//! another block at another block-wide log index: the key is the log's
//! position among its own transaction's Transfer logs.

use std::collections::HashMap;

use alloy_primitives::{b256, Address, Bytes, B256, U256, U64};
use paywatch_core::{Network, WatchSet};
use paywatch_evm::types::RpcLog;
use paywatch_evm::{scan, watch_key, BlockAnswers, Tokens, TRANSFER_TOPIC};

const PAYER: &str = "0x1111111111111111111111111111111111111111";
const SHOP: &str = "0x2222222222222222222222222222222222222222";
const USDT: &str = "0xdac17f958d2ee523a2206206994597c13d831ec7";

fn topic(address: &str) -> B256 {
    let a: Address = address.parse().unwrap();
    let mut t = [0u8; 32];
    t[12..].copy_from_slice(a.as_slice());
    B256::from(t)
}

fn transfer_log(block: B256, tx: B256, log_index: u64, to: &str, amount: u64) -> RpcLog {
    RpcLog {
        address: USDT.parse().unwrap(),
        topics: vec![TRANSFER_TOPIC, topic(PAYER), topic(to)],
        data: Bytes::from(U256::from(amount).to_be_bytes::<32>().to_vec()),
        block_hash: Some(block),
        transaction_hash: Some(tx),
        log_index: Some(U64::from(log_index)),
        removed: false,
    }
}

fn keys_in(block: B256, logs: &[RpcLog]) -> Vec<(String, u32, u128)> {
    let watch = WatchSet::new(Network::Ethereum).keyed(watch_key());
    watch.insert(SHOP);
    let tokens = Tokens::new([(paywatch_core::Asset::Usdt, USDT.parse().unwrap())]);
    let succeeded = HashMap::new();
    let answers = BlockAnswers {
        hash: block,
        transactions: None,
        logs,
        succeeded: &succeeded,
        traces: None,
    };
    let read = watch.read();
    scan(&answers, &tokens, &read)
        .unwrap()
        .into_iter()
        .map(|t| (t.txid, t.index, t.amount.0))
        .collect()
}

#[test]
fn a_token_payment_mined_again_at_another_log_index_keeps_its_key() {
    let tx = b256!("aaaa000000000000000000000000000000000000000000000000000000000001");
    let other = b256!("bbbb000000000000000000000000000000000000000000000000000000000002");
    let first = b256!("0100000000000000000000000000000000000000000000000000000000000000");
    let second = b256!("0200000000000000000000000000000000000000000000000000000000000000");
    // First mined after another transaction's three logs; the payment is
    // the second Transfer of its transaction (a fee to the payer first).
    let in_first = [
        transfer_log(first, other, 0, PAYER, 1),
        transfer_log(first, other, 1, PAYER, 1),
        transfer_log(first, other, 2, PAYER, 1),
        transfer_log(first, tx, 3, PAYER, 5),
        transfer_log(first, tx, 4, SHOP, 100_000_000),
    ];
    // Mined again, first in its block.
    let in_second = [
        transfer_log(second, tx, 0, PAYER, 5),
        transfer_log(second, tx, 1, SHOP, 100_000_000),
    ];
    let a = keys_in(first, &in_first);
    let b = keys_in(second, &in_second);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a, b, "the same payment, whichever block holds it");
    assert_eq!(a[0].1, 1, "the second Transfer log of its transaction");
}

#[test]
fn two_payments_in_one_transaction_keep_two_keys() {
    let tx = b256!("cccc000000000000000000000000000000000000000000000000000000000003");
    let block = b256!("0300000000000000000000000000000000000000000000000000000000000000");
    let logs = [
        transfer_log(block, tx, 7, SHOP, 10),
        transfer_log(block, tx, 9, SHOP, 10),
    ];
    let keys = keys_in(block, &logs);
    assert_eq!(keys.iter().map(|k| k.1).collect::<Vec<_>>(), [0, 1]);
}

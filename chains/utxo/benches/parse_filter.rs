//! Parse-and-filter time for Bitcoin mainnet block 702861 (2,500 txs,
//! 1.38 MB) against 10^6 watched scripts. `cargo bench -p paywatch-utxo`.

use std::time::{Duration, Instant};

use bitcoin::hashes::{sha256, Hash};
use bitcoin::{PubkeyHash, ScriptBuf};
use paywatch_core::{Network, WatchSet};
use paywatch_utxo::{address_for_script, scan_block, watch_key, Chain, Params, RawBlock};

const BLOCK: &[u8] = include_bytes!(
    "../tests/fixtures/mainnet_block_000000000000000000000c835b2adcaedc20fdf6ee440009c249452c726dafae.raw"
);
const WATCHED: u32 = 1_000_000;
const ROUNDS: usize = 300;

fn main() {
    let params = Params::new(Network::Bitcoin, Chain::Main).unwrap();
    let t = Instant::now();
    let set = WatchSet::new(Network::Bitcoin).keyed(watch_key(Network::Bitcoin));
    // 10^6 P2WPKH addresses nobody pays, plus six the block does pay.
    let addresses: Vec<String> = (0..WATCHED)
        .map(|i| {
            let h = sha256::Hash::hash(&i.to_le_bytes());
            let pkh = PubkeyHash::from_slice(&h[..20]).unwrap();
            address_for_script(
                &params,
                &ScriptBuf::new_p2wpkh(&bitcoin::WPubkeyHash::from_byte_array(pkh.to_byte_array())),
            )
            .unwrap()
        })
        .chain(
            [
                "bc1qx9t2l3pyny2spqpqlye8svce70nppwtaxwdrp4",
                "bc1qmexsnhyukr729eclj6mesu0unyf3p0qvn6app6fu5j2xjmavay4qrx02ge",
                "bc1qxp53jp0p75cfgrryt4m8qylex8xf0j9mum8gpl",
                "3BFwifA3YAiv8TeCYMkeYnVWPcJFzsBXE3",
                "1Hf16aUW3yjzi3STTUBwA9VGgWUpDvXC1T",
                "3JKMCNPXvfewye4Uxk6sJZGxK74tSmL9ty",
            ]
            .map(String::from),
        )
        .collect();
    set.extend(addresses.iter().map(String::as_str));
    println!(
        "watch set: {} scripts, built in {} ms",
        set.len(),
        t.elapsed().as_millis()
    );

    let mut parse_filter = Vec::with_capacity(ROUNDS);
    let mut with_verify = Vec::with_capacity(ROUNDS);
    let mut found = 0;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let block = RawBlock::parse(BLOCK).unwrap();
        let transfers = scan_block(&block, &params, &set.read());
        parse_filter.push(t.elapsed());
        found = transfers.len();

        let t = Instant::now();
        let block = RawBlock::parse(BLOCK).unwrap();
        block.verify(None).unwrap();
        let transfers = scan_block(&block, &params, &set.read());
        with_verify.push(t.elapsed());
        assert_eq!(transfers.len(), found);
    }
    let show = |name: &str, mut v: Vec<Duration>| {
        v.sort_unstable();
        println!(
            "{name}: median {} µs, p90 {} µs, min {} µs ({ROUNDS} rounds)",
            v[ROUNDS / 2].as_micros(),
            v[ROUNDS * 9 / 10].as_micros(),
            v[0].as_micros()
        );
    };
    println!(
        "block 702861: 2500 txs, {} bytes, {found} payments to watched scripts",
        BLOCK.len()
    );
    show("parse + filter", parse_filter);
    show(
        "parse + verify merkle root + filter (what the watcher does)",
        with_verify,
    );
}

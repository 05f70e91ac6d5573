//! Raw Bitcoin and Litecoin blocks (`getblock HASH 0`, hex or binary), and
//! loose transactions (`getrawtransaction`, Electrum's `transaction.get`).

use std::sync::{Arc, OnceLock};

use paywatch_core::{Network, WatchSet};
use paywatch_utxo::{
    address_for_script, from_hex, scan_block, scan_outputs, transaction_id, transaction_outputs,
    watch_key, Chain, Params, RawBlock,
};

/// Payees of the seed blocks, so the scan finds payments and reaches the
/// code that writes them.
const BITCOIN_WATCHED: [&str; 4] = [
    "bc1qx9t2l3pyny2spqpqlye8svce70nppwtaxwdrp4",
    "1AcFDzS6kF7zzFcjieVSDNfwreRyj8D4R5",
    "3BFwifA3YAiv8TeCYMkeYnVWPcJFzsBXE3",
    "bc1qmexsnhyukr729eclj6mesu0unyf3p0qvn6app6fu5j2xjmavay4qrx02ge",
];
const LITECOIN_WATCHED: [&str; 4] = [
    "LQ5X1r32bU3v2TgVxE9osb2YnCZNFY6ikm",
    "MW44Zj2phDHuThDfChhfT3AobxVT5GtujH",
    "ltc1qckus8nvghxwm8645ylryfuvrm60nragltssa8a",
    "ltc1qljz9mslwpy86gzyekgn2hu4jt2h6vjjzrk22cs",
];

struct Watched {
    params: Params,
    watch: Arc<WatchSet>,
}

fn networks() -> &'static [Watched; 2] {
    static NETWORKS: OnceLock<[Watched; 2]> = OnceLock::new();
    NETWORKS.get_or_init(|| {
        let make = |network, watched: &[&str]| {
            let set = WatchSet::new(network).keyed(watch_key(network));
            set.extend(watched.iter().copied());
            Watched {
                params: Params::new(network, Chain::Main).expect("served network"),
                watch: Arc::new(set),
            }
        };
        [
            make(Network::Bitcoin, &BITCOIN_WATCHED),
            make(Network::Litecoin, &LITECOIN_WATCHED),
        ]
    })
}

/// A block as the node source reads it: parsed, checked against its header,
/// and scanned, with Bitcoin's and with Litecoin's addresses. The scan runs
/// whether or not the merkle check passed: the check would keep almost every
/// mutated block away from the output reader, which must hold on any block
/// that parses.
pub fn utxo_block(data: &[u8]) -> Option<usize> {
    let decoded;
    let bytes = if looks_like_hex(data) {
        let Ok(text) = std::str::from_utf8(data) else {
            return None;
        };
        match from_hex(text) {
            Ok(b) => {
                decoded = b;
                &decoded[..]
            }
            Err(_) => return None,
        }
    } else {
        data
    };
    // A loose transaction, as the mempool and Electrum sources read one.
    let loose = match (transaction_id(bytes), transaction_outputs(bytes)) {
        (Ok(txid), Ok(outputs)) => Some(networks().iter().fold(0, |found, n| {
            found + scan_outputs(&txid.to_string(), &outputs, &n.params, &n.watch.read()).len()
        })),
        _ => None,
    };

    let Ok(block) = RawBlock::parse(bytes) else {
        return loose;
    };
    let verified = block.verify(None).is_ok() && block.verify(Some(block.hash())).is_ok();
    let mut found = 0;
    for n in networks() {
        found += scan_block(&block, &n.params, &n.watch.read()).len();
        // What the scan does for a watched output, done for every output.
        for tx in 0..block.tx_count() {
            let _ = block.txid(tx);
            for out in block.outputs(tx) {
                let _ = address_for_script(&n.params, out.script);
            }
        }
    }
    if verified {
        Some(found)
    } else {
        loose
    }
}

fn looks_like_hex(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw
            .iter()
            .all(|b| b.is_ascii_hexdigit() || b.is_ascii_whitespace())
}

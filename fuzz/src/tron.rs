//! Tron gRPC answers for one block, as protobuf bytes: a `BlockExtention`
//! (`GetBlockByNum2`) and its `TransactionInfoList`
//! (`GetTransactionInfoByBlockNum`). An input is the block's length as four
//! little-endian bytes, the block, then the infos; a length past the end
//! takes the rest.

use std::sync::OnceLock;

use paywatch_core::{Network, WatchSet};
use paywatch_tron::fuzzing::translate_answers;
use paywatch_tron::{watch_key, Tokens};

/// Payees in the seeds: the mainnet TRX and USDT transfers' recipients.
const WATCHED: [&str; 2] = [
    "TFanVGmnjKqFRd8dVQAccZE2t42Vu4rv51",
    "TXVj38D1XR3TPgSHTCZGC8wkLDAGqF1oqx",
];

struct Setup {
    tokens: Tokens,
    watch: WatchSet,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let watch = WatchSet::new(Network::Tron).keyed(watch_key());
        watch.extend(WATCHED);
        Setup {
            tokens: Tokens::mainnet(),
            watch,
        }
    })
}

pub fn tron_block(data: &[u8]) -> Option<usize> {
    let (len, rest) = data.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).map_or(rest.len(), |n| n.min(rest.len()));
    let (block, infos) = rest.split_at(len);
    let s = setup();
    translate_answers(block, infos, &s.tokens, &s.watch.read())
        .ok()
        .map(|block| block.map_or(0, |b| b.transfers.len()))
}

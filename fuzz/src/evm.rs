//! Ethereum JSON-RPC answers for one block. An input is one JSON object
//! holding each method's result under its own key, each decoded on its own
//! from its text as the client decodes it:
//!
//! ```json
//! {"block": <eth_getBlockByNumber(n, true)>, "logs": <eth_getLogs>,
//!  "receipts": [<eth_getTransactionReceipt>, …],
//!  "traces": <debug_traceBlockByHash>, "blockReceipts": <eth_getBlockReceipts>}
//! ```
//!
//! `traces` and `blockReceipts` may be left out; so may the rest, which the
//! node then answered with `null`.

use std::sync::OnceLock;

use paywatch_core::{Asset, Method, Network, WatchSet};
use paywatch_evm::fuzzing::{translate_answers, Answers};
use paywatch_evm::{parse_address, watch_key, Tokens};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Payees in the seeds: USDT and USDC recipients of mainnet block
/// 21925176, and a hand-made ETH recipient.
const WATCHED: [&str; 3] = [
    "0x627846f6131a4631ddf6bb53bd682ccf51f623b3",
    "0x1f2f10d1c40777ae1da742455c65828ff36df387",
    "0x00000000000000000000000000000000000000e7",
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Input<'a> {
    #[serde(borrow)]
    block: Option<&'a RawValue>,
    #[serde(borrow)]
    logs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    receipts: Vec<&'a RawValue>,
    #[serde(borrow)]
    traces: Option<&'a RawValue>,
    #[serde(borrow)]
    block_receipts: Option<&'a RawValue>,
}

struct Setup {
    tokens: Tokens,
    watch: WatchSet,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let tokens = Tokens::new([Asset::Usdt, Asset::Usdc].into_iter().filter_map(|asset| {
            let contract = Method::new(asset, Network::Ethereum)
                .ok()?
                .default_contract()?;
            Some((asset, parse_address(contract).ok()?))
        }));
        let watch = WatchSet::new(Network::Ethereum).keyed(watch_key());
        watch.extend(WATCHED);
        Setup { tokens, watch }
    })
}

pub fn evm_answers(data: &[u8]) -> Option<usize> {
    let Ok(input) = serde_json::from_slice::<Input<'_>>(data) else {
        return None;
    };
    let receipts: Vec<&str> = input.receipts.iter().map(|r| r.get()).collect();
    let answers = Answers {
        block: text(input.block),
        logs: text(input.logs),
        receipts: &receipts,
        traces: input.traces.map(RawValue::get),
        block_receipts: input.block_receipts.map(RawValue::get),
    };
    let s = setup();
    translate_answers(&answers, &s.tokens, &s.watch.read())
        .ok()
        .map(|block| block.map_or(0, |b| b.transfers.len()))
}

/// A result left out is the node answering `null`.
fn text(value: Option<&RawValue>) -> &str {
    value.map_or("null", RawValue::get)
}

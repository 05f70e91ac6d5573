//! Solana `getBlock` answers, whole JSON-RPC bodies, in any form the scan
//! reads: transactionDetails "accounts" (what the source asks for) or
//! "full", with json, base64 or base58 transactions.

use std::sync::OnceLock;

use paywatch_core::{Network, WatchSet};
use paywatch_solana::{block_ref, decode_get_block, scan_block, watch_key};

/// Payees of the seed transactions: a SOL recipient and a USDC owner.
const WATCHED: [&str; 2] = [
    "7nVDzZUjrBA3gHs3gNcHidhmR96CH7KpKsU8pyBZGHUr",
    "3UJQqKq8Xyx4aVRmHgEwpQZiW7toYRQCTy6Bgp1RdKnK",
];

fn watch() -> &'static WatchSet {
    static WATCH: OnceLock<WatchSet> = OnceLock::new();
    WATCH.get_or_init(|| {
        let set = WatchSet::new(Network::Solana).keyed(watch_key());
        set.extend(WATCHED);
        set
    })
}

/// A body as the source's fetch and translate read it: decoded in one pass,
/// placed by its hashes, scanned.
pub fn solana_block(data: &[u8]) -> Option<usize> {
    let block = decode_get_block(data).ok()?;
    let placed = block_ref(block.parent_slot.saturating_add(1), &block);
    let found = scan_block(&block, &watch().read()).ok()?;
    placed.ok().map(|_| found.len())
}

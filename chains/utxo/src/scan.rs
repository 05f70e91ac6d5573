//! Raw block → the transfers it makes to watched addresses. The watcher and
//! `paywatch extract` both go through here, so an operator reading a block
//! file sees exactly what the watcher saw.

use std::sync::Arc;

use paywatch_core::{Amount, Asset, AssetId, Network, Transfer, WatchKeyFn, WatchRead};

use crate::address::{address_for_script, script_for_address};
use crate::block::{Output, RawBlock};
use crate::params::Params;

/// How a watch set keys Bitcoin and Litecoin addresses: by scriptPubKey,
/// so every output is tested by its bytes, without an address encoding.
pub fn watch_key(network: Network) -> WatchKeyFn {
    Arc::new(move |address: &str| {
        script_for_address(network, address)
            .ok()
            .map(|(_, script)| script.into_bytes())
    })
}

/// The asset a network's outputs carry.
pub fn native_asset(network: Network) -> AssetId {
    AssetId::Known(match network {
        Network::Litecoin => Asset::Ltc,
        _ => Asset::Btc,
    })
}

/// Every output of `block` that pays a watched script, in block order.
pub fn scan_block(block: &RawBlock<'_>, params: &Params, watch: &WatchRead<'_>) -> Vec<Transfer> {
    let mut found = Vec::new();
    for tx in 0..block.tx_count() {
        let mut txid = None;
        for out in block.outputs(tx) {
            if watch.contains_key(out.script.as_bytes()) {
                let txid = txid.get_or_insert_with(|| block.txid(tx).to_string());
                found.push(transfer(params, txid, &out));
            }
        }
    }
    found
}

/// Confirmations a coinbase output needs before it can be spent: an
/// orphaned coinbase never comes back, so its money is not final before.
pub const COINBASE_MATURITY: u64 = 100;

/// Marks the outputs of `block`'s coinbase among `transfers` (what
/// [`scan_block`] found in it, at `height`) with the final height from
/// which they count final: where the block has [`COINBASE_MATURITY`]
/// confirmations, or the network's `confirmations` if more.
pub fn mature_coinbase(
    block: &RawBlock<'_>,
    transfers: &mut [Transfer],
    height: u64,
    confirmations: u32,
) {
    if block.tx_count() == 0 {
        return;
    }
    let coinbase = block.txid(0).to_string();
    for t in transfers.iter_mut().filter(|t| t.txid == coinbase) {
        t.matures_at = Some(coinbase_matures_at(height, confirmations));
    }
}

/// The final height at which a coinbase mined at `height` has
/// [`COINBASE_MATURITY`] confirmations, where a block is final at
/// `confirmations`.
pub(crate) fn coinbase_matures_at(height: u64, confirmations: u32) -> u64 {
    height.saturating_add(COINBASE_MATURITY.saturating_sub(u64::from(confirmations.max(1))))
}

/// The outputs of one loose transaction that pay watched scripts.
pub fn scan_outputs(
    txid: &str,
    outputs: &[Output<'_>],
    params: &Params,
    watch: &WatchRead<'_>,
) -> Vec<Transfer> {
    outputs
        .iter()
        .filter(|o| watch.contains_key(o.script.as_bytes()))
        .map(|o| transfer(params, txid, o))
        .collect()
}

fn transfer(params: &Params, txid: &str, out: &Output<'_>) -> Transfer {
    Transfer {
        network: params.network,
        asset: native_asset(params.network),
        txid: txid.to_owned(),
        index: out.index,
        // A watched script always came from an address, so it has one.
        to: address_for_script(params, out.script)
            .unwrap_or_else(|| format!("script:{}", out.script.to_hex_string())),
        from: None,
        amount: Amount(u128::from(out.value)),
        success: true,
        matures_at: None,
    }
}

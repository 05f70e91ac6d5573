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
    }
}

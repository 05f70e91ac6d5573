//! Bitcoin and Litecoin for paywatch: fetch and translate, nothing else.
//! Reorgs are the core's canonical stream's business, not this crate's.

mod block;
mod electrum;
mod extract;
mod node;
mod p2p;
mod params;
mod rpc;
mod scan;
mod wallet_mempool;

pub use block::{from_hex, transaction_id, transaction_outputs, BlockError, Output, RawBlock};
pub use electrum::{ElectrumConfig, ElectrumError, ElectrumSource};
pub use extract::{extract, ExtractError, FoundPayment};
pub use node::{NodeConfig, NodeSource};
pub use params::{Chain, Params, UnknownChain};
pub use rpc::{NodeRpc, RpcAuth, RpcError};
pub use scan::{
    mature_coinbase, native_asset, scan_block, scan_outputs, watch_key, COINBASE_MATURITY,
};
mod address;
mod derive;
pub use address::{
    address_for_script, canonical_address, script_for_address, AddressError, AddressProblem,
};
pub use derive::{AccountKey, DeriveError};

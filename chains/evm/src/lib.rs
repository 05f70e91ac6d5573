//! Ethereum for paywatch: fetches blocks, Transfer logs, receipts and call
//! traces over JSON-RPC and translates them into transfers to watched
//! addresses. It has no reorg logic; the core's canonical stream decides.

mod address;
mod balance;
mod batch_size;
mod derive;

pub use address::{checksummed, parse_address, storage_form, AddressError};
pub use alloy_primitives::Address;
pub use derive::{AccountKey, Bip44Coin, DeriveError, ETHEREUM};
mod extract;
/// The source's decoding and translation without a node, for `fuzz/`.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod heads;
mod paced_http;
mod rpc;
mod scan;
mod source;
mod tip_cache;
mod traces;
pub mod types;
mod untraced;

pub use extract::{extract, ExtractError, ExtractReport, FoundPayment};
pub use rpc::CallError;
pub use scan::{
    paying_transactions, scan, watch_key, BlockAnswers, ScanError, Tokens, NATIVE_INDEX,
    TRANSFER_TOPIC,
};
pub use source::{EvmConfig, EvmSetupError, EvmSource, Finality};
pub use untraced::{GivenUp, TraceBacklog};

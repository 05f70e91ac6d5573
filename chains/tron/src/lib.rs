//! Tron for paywatch: fetch blocks and transaction infos over java-tron's
//! gRPC and translate them into transfers. No reorg logic lives here.

mod address;
mod balance;
mod derive;
mod extract;
/// The source's decoding and translation without a node, for `fuzz/`.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod internal;
mod json;
mod scan;
mod source;
mod transport;

pub use address::{body_from_proto, encode_address, parse_address, watch_key, AddressError};
pub use derive::{AccountKey, DeriveError, TRON};
pub use extract::{extract, extract_with, ExtractError, ExtractReport, FoundPayment};
pub use scan::{
    may_pay, scan, scan_answers, txid_of, unreadable_contracts_skipped, BlockAnswers, ScanError,
    Tokens, INTERNAL_INDEX, NATIVE_INDEX, TRANSFER_TOPIC,
};

pub use source::{TronConfig, TronSetupError, TronSource, MAX_BLOCKS_PER_REQUEST};

/// The protobuf messages and gRPC clients generated from Tron's own protos.
pub use tron_grpc as proto;

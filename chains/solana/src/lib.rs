//! Solana for paywatch: translate `getBlock` and `getTransaction` answers
//! into transfers to watched addresses, and a JSON-RPC node as a
//! [`BlockSource`](paywatch_core::BlockSource) ([`SolanaSource`]). No reorg
//! logic lives here.

mod address;
mod answer;
mod extract;
mod failure;
mod gap;
mod scan;
mod signature;
mod source;

pub use address::{encode_address, parse_address, watch_key, AddressError, KEY_LEN};
pub use answer::{decode_get_block, AnswerError};
pub use extract::{extract, ExtractError, ExtractReport, FoundPayment};
pub use gap::GapConfirmation;
pub use scan::{block_ref, parse_block, scan_block, scan_transaction, ScanError, TOKEN_INDEX};
pub use signature::{parse_signature, SignatureError, SIGNATURE_LEN};
pub use source::{
    skipped_hash, SolanaConfig, SolanaSetupError, SolanaSource, MAX_BLOCKS_PER_REQUEST,
};

/// The RPC answer types scans read, so callers deserialize the same ones.
pub use solana_transaction_status_client_types as rpc_types;

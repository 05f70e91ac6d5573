//! Solana for paywatch: translate `getBlock` and `getTransaction` answers
//! into transfers to watched addresses. No reorg logic lives here, and (for
//! now) no RPC client: the source comes with the test node.

mod address;
mod extract;
mod scan;

pub use address::{encode_address, parse_address, watch_key, AddressError, KEY_LEN};
pub use extract::{extract, ExtractError, ExtractReport, FoundPayment};
pub use scan::{block_ref, parse_block, scan_block, scan_transaction, ScanError, TOKEN_INDEX};

/// The RPC answer types scans read, so callers deserialize the same ones.
pub use solana_transaction_status_client_types as rpc_types;

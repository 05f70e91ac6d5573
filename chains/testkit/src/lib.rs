//! Dev-only chains for tests and the local devnet. Nothing here is used by a
//! production watcher.

mod scripted;

pub use scripted::{ScriptedChain, ScriptedSource};

pub mod anvil;
pub mod electrumx;
pub mod http_request;
pub mod litecoind;
pub mod rpc_proxy;
#[cfg(feature = "solana")]
pub mod solana;
pub mod trace_proxy;
pub mod tron;

pub use anvil::{AnvilError, AnvilNode, AnvilOptions};
pub use electrumx::{ElectrumSession, ElectrumX, ElectrumXOptions};
pub use litecoind::{Auth, HarnessError, LitecoinNode, NodeOptions};
pub use rpc_proxy::{Alternate, RpcProxy};
#[cfg(feature = "solana")]
pub use solana::{SolanaFault, SolanaNode, SolanaNodeError, SolanaNodeOptions};
pub use tron::{Fault, TronAccount, TronContract, TronNode, TronNodeError, TronNodeOptions, TxId};

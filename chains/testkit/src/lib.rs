//! Dev-only chains for tests and the local devnet. Nothing here is used by a
//! production watcher.

mod scripted;

pub use scripted::{ScriptedChain, ScriptedSource};

pub mod electrumx;
pub mod litecoind;

pub use electrumx::{ElectrumX, ElectrumXOptions};
pub use litecoind::{Auth, HarnessError, LitecoinNode, NodeOptions};

//! Dev-only chains for tests and the local devnet. Nothing here is used by a
//! production watcher.

mod scripted;

pub use scripted::{ScriptedChain, ScriptedSource};

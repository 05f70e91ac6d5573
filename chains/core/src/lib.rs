//! Chain-agnostic types shared by every watcher, and the one reorg-aware
//! canonical stream that turns a [`BlockSource`] into [`ChainEvent`]s.
//!
//! Chain crates only fetch and translate: they implement [`BlockSource`] and
//! never decide about reorgs. Those that fetch blocks in ranges read ahead
//! with [`ReadAhead`]. Everything about intents lives above this crate.

mod amount;
mod block;
mod method;
mod network;
mod pacing;
mod read_ahead;
mod shown_url;
mod source;
mod stream;
mod watch;

pub use amount::{Amount, AmountError, AmountProblem};
pub use block::{AssetId, BlockRef, ChainEvent, SourceBlock, Transfer};
pub use method::{recognised_tokens, Asset, Method, MethodError};
pub use network::{Network, UnknownNetwork};
pub use pacing::{retry_after, Pacer};
pub use read_ahead::{AtHeight, FetchRange, ReadAhead};
pub use shown_url::shown_url;
pub use source::{
    Activity, BalanceReads, BlockSource, NativeBalance, Probe, SourceError, Unconfirmed,
    UnreadBlocks,
};
pub use stream::{CanonicalStream, StreamError};
pub use watch::{Listing, WatchKeyFn, WatchRead, WatchSet};

//! What the API refused to protect its other clients, counted for the
//! metrics listener by why. The client it was is in the log line beside
//! each (the address behind a trusted proxy, never the proxy's): a label
//! per client would grow the series with every address that ever called.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a request or a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A client past `api.auth_failures_per_minute`, refused for a minute.
    TooManyFailures,
    /// A live status stream past a page's, a client's or a share's places.
    TooManyStreams,
    /// A connection past `api.max_connections_per_client`, closed at once.
    ConnectionsPerClient,
    /// An idle connection closed to make room for a waiting one.
    IdleClosed,
}

impl Refusal {
    pub(crate) const ALL: [Refusal; 4] = [
        Refusal::TooManyFailures,
        Refusal::TooManyStreams,
        Refusal::ConnectionsPerClient,
        Refusal::IdleClosed,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::TooManyFailures => "too_many_failures",
            Refusal::TooManyStreams => "too_many_streams",
            Refusal::ConnectionsPerClient => "connections_per_client",
            Refusal::IdleClosed => "idle_connection_closed",
        }
    }
}

/// Process-wide, like the listener: one API per process.
static COUNTS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

pub(crate) fn refused(why: Refusal) {
    COUNTS[why as usize].fetch_add(1, Ordering::Relaxed);
}

/// Each reason with its count so far.
pub(crate) fn counts() -> impl Iterator<Item = (&'static str, u64)> {
    Refusal::ALL
        .into_iter()
        .map(|why| (why.as_str(), COUNTS[why as usize].load(Ordering::Relaxed)))
}

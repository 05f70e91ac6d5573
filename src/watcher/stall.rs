//! A watcher that polls without error but never gets a new block is as
//! blind as one that is down, and quieter: its node may be stuck, syncing
//! or cut off from its peers. After about six block times without a new
//! block it says so: state `stalled` (in `paywatch status`, /v1/watchers,
//! the console and `paywatch_watcher_state`) and one `alert = "stalled"`
//! log event, until a block arrives.

use paywatch_core::Network;
use tracing::{info, warn};

/// How long without a new block counts as stalled: about six block times,
/// and never less than a minute (fast chains skip slots and have quiet
/// spells).
fn stall_after_ms(network: Network) -> i64 {
    const MINUTE: i64 = 60_000;
    match network {
        Network::Bitcoin => 60 * MINUTE,
        Network::Litecoin => 15 * MINUTE,
        Network::Ethereum => 2 * MINUTE,
        Network::Tron | Network::Solana => MINUTE,
        _ => 60 * MINUTE,
    }
}

#[derive(Debug)]
pub(crate) struct StallWatch {
    network: Network,
    cursor: Option<u64>,
    moved_at_ms: i64,
    reported: bool,
}

impl StallWatch {
    pub(crate) fn new(network: Network, now_ms: i64) -> StallWatch {
        StallWatch {
            network,
            cursor: None,
            moved_at_ms: now_ms,
            reported: false,
        }
    }

    /// After a successful poll, with the cursor's height: why the watcher
    /// is stalled, or `None` while blocks keep coming.
    pub(crate) fn observe(&mut self, cursor: u64, now_ms: i64) -> Option<String> {
        if self.cursor != Some(cursor) {
            if self.reported {
                info!(cursor, "new blocks again; the watcher is no longer stalled");
            }
            self.cursor = Some(cursor);
            self.moved_at_ms = now_ms;
            self.reported = false;
            return None;
        }
        let idle_secs = (now_ms - self.moved_at_ms) / 1000;
        if now_ms - self.moved_at_ms < stall_after_ms(self.network) {
            return None;
        }
        let why = format!(
            "no new block for {idle_secs} s, about six {} block times: is the node stuck, \
             syncing or cut off from its peers?",
            self.network
        );
        if !self.reported {
            warn!(alert = "stalled", cursor, idle_secs, "{why}");
            self.reported = true;
        }
        Some(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalled_after_six_block_times_until_a_block_arrives() {
        let t0 = 1_700_000_000_000;
        let mut w = StallWatch::new(Network::Litecoin, t0);
        assert_eq!(w.observe(100, t0), None);
        assert_eq!(w.observe(100, t0 + 14 * 60_000), None);
        let why = w.observe(100, t0 + 15 * 60_000).expect("stalled");
        assert!(why.contains("900 s") && why.contains("litecoin"), "{why}");
        assert!(w.observe(100, t0 + 16 * 60_000).is_some(), "still stalled");
        assert_eq!(w.observe(101, t0 + 17 * 60_000), None, "a block ends it");
        assert_eq!(w.observe(101, t0 + 18 * 60_000), None);
    }
}

//! A node's word that it no longer has a slot the watcher needs, taken as a
//! gap only once it is confirmed.
//!
//! agave answers a slot older than its ledger keeps with `-32001 … cleaned
//! up` and lists produced slots only from its first available block. Behind
//! a load balancer, a backend just restored from a snapshot says so while
//! the others still hold the slot; halting on its one answer, and advising
//! `accept-gap`, would have an operator give up payments that are there.
//! So a claim counts only once several answers over some time agree, and a
//! block served at or above the claimed slot dismisses it.

use std::time::Duration;

use tokio::time::Instant;

/// How many answers, over how long, make a gap confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapConfirmation {
    /// Answers saying the slot is gone, at least (the first included).
    pub answers: u32,
    /// Time from the first such answer to the one that confirms, at least.
    pub over: Duration,
}

impl Default for GapConfirmation {
    /// The watcher asks again after 0.25 s, doubling: five answers come
    /// within 4 s, and 30 s leaves a restored backend's neighbours eight
    /// chances to serve the slot.
    fn default() -> Self {
        GapConfirmation {
            answers: 5,
            over: Duration::from_secs(30),
        }
    }
}

/// What a claim amounts to so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not yet a gap: ask again.
    Unconfirmed {
        answers: u32,
        needed: u32,
        wait: Duration,
    },
    /// Every answer agreed, long enough: the node has no such slot. The
    /// lowest slot claimed, and the node's first available block when an
    /// answer named it (the latest such).
    Confirmed {
        slot: u64,
        first_available: Option<u64>,
    },
}

#[derive(Debug)]
struct Claim {
    slot: u64,
    answers: u32,
    since: Instant,
    first_available: Option<u64>,
}

/// The claims since the last block served at or above the claimed slot.
#[derive(Debug, Default)]
pub(crate) struct GapClaims {
    claim: Option<Claim>,
}

impl GapClaims {
    /// One more answer saying `slot` is gone (its first available block,
    /// when the answer names it). Claims of several slots count together:
    /// a node's ledger is cleaned up from the bottom, and windows read
    /// ahead ask for several slots at once.
    pub(crate) fn claim(
        &mut self,
        slot: u64,
        first_available: Option<u64>,
        rule: GapConfirmation,
    ) -> Verdict {
        let now = Instant::now();
        let c = self.claim.get_or_insert(Claim {
            slot,
            answers: 0,
            since: now,
            first_available: None,
        });
        c.slot = c.slot.min(slot);
        c.answers = c.answers.saturating_add(1);
        c.first_available = first_available.or(c.first_available);
        let waited = now.saturating_duration_since(c.since);
        if c.answers >= rule.answers && waited >= rule.over {
            return Verdict::Confirmed {
                slot: c.slot,
                first_available: c.first_available,
            };
        }
        Verdict::Unconfirmed {
            answers: c.answers,
            needed: rule.answers,
            wait: rule.over.saturating_sub(waited),
        }
    }

    /// A block at `height` was served: a claim at or below it was wrong,
    /// or is about a slot the watcher is past.
    pub(crate) fn served(&mut self, height: u64) {
        if self.claim.as_ref().is_some_and(|c| height >= c.slot) {
            self.claim = None;
        }
    }
}

/// The first available block an agave `-32001` message names ("Block N
/// cleaned up, does not exist on node. First available block: M").
pub(crate) fn first_available_in(message: &str) -> Option<u64> {
    let (_, rest) = message.rsplit_once("First available block:")?;
    rest.trim().trim_end_matches('.').parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: GapConfirmation = GapConfirmation {
        answers: 3,
        over: Duration::from_secs(10),
    };

    #[tokio::test(start_paused = true)]
    async fn a_gap_needs_every_answer_and_the_time() {
        let mut g = GapClaims::default();
        assert!(matches!(
            g.claim(100, None, RULE),
            Verdict::Unconfirmed { answers: 1, .. }
        ));
        assert!(matches!(
            g.claim(108, Some(150), RULE),
            Verdict::Unconfirmed { answers: 2, .. }
        ));
        // Enough answers, too soon.
        assert!(matches!(
            g.claim(100, None, RULE),
            Verdict::Unconfirmed { answers: 3, .. }
        ));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            g.claim(100, None, RULE),
            Verdict::Confirmed {
                slot: 100,
                first_available: Some(150)
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_served_block_dismisses_the_claim() {
        let mut g = GapClaims::default();
        g.claim(100, None, RULE);
        g.claim(100, None, RULE);
        tokio::time::advance(Duration::from_secs(10)).await;
        g.served(99);
        assert!(matches!(
            g.claim(100, None, RULE),
            Verdict::Confirmed { .. }
        ));
        g.served(100);
        assert!(matches!(
            g.claim(100, None, RULE),
            Verdict::Unconfirmed { answers: 1, .. }
        ));
    }

    #[test]
    fn agaves_message_names_the_first_available_block() {
        assert_eq!(
            first_available_in(
                "Block 12 cleaned up, does not exist on node. First available block: 345"
            ),
            Some(345)
        );
        assert_eq!(first_available_in("cleaned up"), None);
    }
}

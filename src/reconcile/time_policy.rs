//! When a payment counts as made in time, and by when money seen in time
//! must be final: the one place that reads clocks for money decisions.
//!
//! Three clocks speak about a payment:
//! - paywatch's own, `first_seen`: when it first recorded the payment, in
//!   the mempool or in any block (an orphaned one included). It is the
//!   database's clock, so every instance agrees, and it cannot run early:
//!   a payment seen before the expiry was made before it.
//! - the time of the payment's block, set by whoever made it. A miner's
//!   clock may lag: Bitcoin and Litecoin accept any time above the median
//!   of the last 11 blocks, about an hour (Bitcoin) or a quarter of an hour
//!   (Litecoin) behind real time. So a block's own time proves "in time"
//!   only when it lies more than that lag before the expiry.
//! - the time of the block that followed it on the chain, made by whoever
//!   won the next block: the payment's block was made before it. One
//!   miner's lagging clock cannot lower the next miner's stamp, so a next
//!   block stamped before the expiry proves the payment in time.
//!
//! Block times are evidence only when paywatch saw the payment late (it was
//! down or catching up). A missing time (0, as Solana and Tron may give)
//! proves nothing. So: a payment made in time does not turn late because
//! paywatch was down or a reorg mined it again (its first sighting and its
//! blocks carry over), unless nothing but its own block, stamped within
//! the lag of the expiry, speaks for it: then a person decides (it goes to
//! review as `paid_late`). And a payment made late never turns timely
//! because a miner's clock lags.

use paywatch_core::Network;

/// How far a block's time may lag the real time its block was made, per
/// network: twice the usual lag of the median-time-past rule on Bitcoin and
/// Litecoin; slot-bound times on Ethereum (12 s slots), Tron (3 s slots)
/// and Solana (a stake-weighted estimate) get a few minutes.
pub fn max_block_time_lag_ms(network: Network) -> i64 {
    const MINUTE: i64 = 60_000;
    match network {
        Network::Bitcoin => 120 * MINUTE,
        Network::Litecoin => 30 * MINUTE,
        Network::Ethereum | Network::Tron => 2 * MINUTE,
        Network::Solana => 5 * MINUTE,
        _ => 120 * MINUTE,
    }
}

/// How long after the expiry money seen in time may take to become final
/// and still settle without a person, by default: long enough for an honest
/// low-fee payment, short enough that the payer does not hold an option on
/// the rate for days.
pub fn default_confirm_window_secs(network: Network) -> i64 {
    const HOUR: i64 = 3600;
    match network {
        Network::Bitcoin => 24 * HOUR,
        Network::Litecoin => 6 * HOUR,
        Network::Ethereum | Network::Tron | Network::Solana => HOUR,
        _ => 24 * HOUR,
    }
}

/// What the chain says of when a payment was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sighting {
    /// The earliest sighting of the payment (any block, the mempool,
    /// orphaned rows included).
    pub first_seen_ms: i64,
    /// Its block's time; 0 or less when the chain gave none.
    pub block_time_ms: i64,
    /// The time of the block after it on the chain; 0 or less when there is
    /// none yet or it has no time.
    pub next_block_time_ms: i64,
}

/// Whether a payment was made in time for an intent expiring at `expires_at_ms`.
pub fn made_in_time(network: Network, s: Sighting, expires_at_ms: i64) -> bool {
    s.first_seen_ms <= expires_at_ms
        || (s.next_block_time_ms > 0 && s.next_block_time_ms <= expires_at_ms)
        || (s.block_time_ms > 0
            && s.block_time_ms
                .saturating_add(max_block_time_lag_ms(network))
                <= expires_at_ms)
}

/// Whether money seen in time was final by the intent's confirm-by
/// deadline. `final_at_ms` is when paywatch first counted its block final;
/// `None` for money just found final in this pass, which is final now.
pub fn final_by_deadline(final_at_ms: Option<i64>, now_ms: i64, confirm_by_ms: i64) -> bool {
    final_at_ms.unwrap_or(now_ms) <= confirm_by_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPIRY: i64 = 1_700_000_000_000;

    fn seen(first_seen_ms: i64, block_time_ms: i64, next_block_time_ms: i64) -> Sighting {
        Sighting {
            first_seen_ms,
            block_time_ms,
            next_block_time_ms,
        }
    }

    #[test]
    fn seen_before_the_expiry_is_in_time_whatever_the_blocks_say() {
        assert!(made_in_time(
            Network::Bitcoin,
            seen(EXPIRY, EXPIRY + 3_600_000, 0),
            EXPIRY
        ));
        assert!(made_in_time(
            Network::Solana,
            seen(EXPIRY - 1, 0, 0),
            EXPIRY
        ));
    }

    #[test]
    fn seen_late_its_own_block_proves_in_time_only_beyond_the_lag() {
        let lag = max_block_time_lag_ms(Network::Litecoin);
        let late = EXPIRY + 1;
        assert!(made_in_time(
            Network::Litecoin,
            seen(late, EXPIRY - lag, 0),
            EXPIRY
        ));
        assert!(!made_in_time(
            Network::Litecoin,
            seen(late, EXPIRY - lag + 1, 0),
            EXPIRY
        ));
        assert!(!made_in_time(
            Network::Litecoin,
            seen(late, EXPIRY - 600_000, 0),
            EXPIRY
        ));
    }

    #[test]
    fn seen_late_a_next_block_stamped_before_the_expiry_proves_in_time() {
        let late = EXPIRY + 1;
        assert!(made_in_time(
            Network::Bitcoin,
            seen(late, EXPIRY - 60_000, EXPIRY),
            EXPIRY
        ));
        assert!(!made_in_time(
            Network::Bitcoin,
            seen(late, EXPIRY - 60_000, EXPIRY + 1),
            EXPIRY
        ));
        // A lagging miner stamped the payment's block early; the next miner
        // stamped the real time, after the expiry: late.
        assert!(!made_in_time(
            Network::Bitcoin,
            seen(late, EXPIRY - 3_000_000, EXPIRY + 60_000),
            EXPIRY
        ));
    }

    #[test]
    fn a_missing_block_time_is_never_in_time() {
        for network in Network::ALL {
            assert!(
                !made_in_time(network, seen(EXPIRY + 1, 0, 0), EXPIRY),
                "{network}"
            );
            assert!(
                !made_in_time(network, seen(EXPIRY + 1, -5, -5), EXPIRY),
                "{network}"
            );
        }
    }

    #[test]
    fn the_deadline_reads_when_money_became_final() {
        assert!(final_by_deadline(Some(10), 100, 10));
        assert!(!final_by_deadline(Some(11), 100, 10));
        assert!(final_by_deadline(None, 10, 10));
        assert!(!final_by_deadline(None, 11, 10));
    }
}

//! When a failed delivery is tried again.

/// Milliseconds before the next attempt after the `failures`-th failure in
/// a row: `base_ms` doubling per failure, capped at `max_ms`, less up to a
/// fifth drawn from `seed`, so rows that failed together (a receiver down)
/// do not all come back in the same instant. Integers only.
pub(crate) fn retry_delay_ms(failures: i64, base_ms: u64, max_ms: u64, seed: u64) -> u64 {
    let doublings = u32::try_from(failures.saturating_sub(1).clamp(0, 63)).unwrap_or(63);
    let delay = base_ms.saturating_mul(1u64 << doublings).min(max_ms).max(1);
    let jitter = mix(seed) % (delay / 5 + 1);
    (delay - jitter).max(1)
}

/// splitmix64's finaliser: neighbouring seeds (consecutive ids, clock
/// milliseconds) land far apart.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_base_up_to_the_cap_less_at_most_a_fifth() {
        for seed in 0..200u64 {
            for (failures, full) in [
                (1, 1_000),
                (2, 2_000),
                (3, 4_000),
                (9, 256_000),
                (10, 300_000),
                (1_000_000, 300_000),
            ] {
                let d = retry_delay_ms(failures, 1_000, 300_000, seed);
                assert!(d <= full && d >= full - full / 5, "{failures}: {d}");
            }
            // Nothing overflows, and a retry is never "now".
            assert!(retry_delay_ms(i64::MAX, u64::MAX, u64::MAX, seed) > 0);
            assert_eq!(retry_delay_ms(0, 0, 0, seed), 1);
        }
        let spread: std::collections::HashSet<u64> = (0..50)
            .map(|s| retry_delay_ms(5, 1_000, 300_000, s))
            .collect();
        assert!(spread.len() > 10, "jitter spreads retries: {spread:?}");
    }
}

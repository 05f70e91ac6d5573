//! Pacing of requests to one node or provider: at most `per_second` requests start in
//! any second (a token bucket holding one token), and a pause the node asked
//! for (HTTP 429 with `Retry-After`) holds back every request until it ends.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
pub struct Pacer {
    /// Zero when unlimited.
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the next request may start.
    next: Instant,
    /// No request starts before this (the node's `Retry-After`).
    paused_until: Instant,
}

impl Pacer {
    /// `per_second` zero means no limit of our own.
    pub fn new(per_second: u32) -> Pacer {
        let interval = match per_second {
            0 => Duration::ZERO,
            n => Duration::from_secs(1) / n,
        };
        let now = Instant::now();
        Pacer {
            interval,
            state: Mutex::new(State {
                next: now,
                paused_until: now,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for this request's turn.
    pub async fn acquire(&self) {
        let mut at = {
            let mut s = self.state();
            let at = s.next.max(Instant::now()).max(s.paused_until);
            s.next = at + self.interval;
            at
        };
        loop {
            tokio::time::sleep_until(at).await;
            // A pause that began while this request waited holds it too.
            let paused = self.state().paused_until;
            if paused <= at {
                return;
            }
            at = paused;
        }
    }

    /// Nothing starts for `wait` from now.
    pub fn pause(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut s = self.state();
        if s.paused_until < until {
            s.paused_until = until;
        }
    }
}

/// A `Retry-After` header's value in seconds (the form providers use; an
/// HTTP date is not read, and the caller's own backoff applies), at most
/// `max`.
pub fn retry_after(value: &str, max: Duration) -> Option<Duration> {
    let secs = value.trim().parse::<u64>().ok()?;
    Some(Duration::from_secs(secs).min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_are_spaced_and_pauses_hold_them() {
        let pacer = Pacer::new(4);
        let start = Instant::now();
        for _ in 0..5 {
            pacer.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        pacer.pause(Duration::from_secs(3));
        pacer.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_secs(4));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_is_unlimited() {
        let pacer = Pacer::new(0);
        let start = Instant::now();
        for _ in 0..100 {
            pacer.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}

//! How many items go in the next batched request: halved when the node
//! refuses a batch or cannot serve it in time, grown back by a quarter
//! after each batch served whole, never past the configured size.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub(crate) struct BatchSize {
    now: AtomicUsize,
    max: usize,
}

impl BatchSize {
    pub(crate) fn new(max: usize) -> BatchSize {
        let max = max.max(1);
        BatchSize {
            now: AtomicUsize::new(max),
            max,
        }
    }

    pub(crate) fn get(&self) -> usize {
        self.now.load(Ordering::Relaxed).max(1)
    }

    /// A batch of `count` was refused: the next holds half as many.
    pub(crate) fn refused(&self, count: usize) -> usize {
        let smaller = (count / 2).max(1);
        self.now.store(smaller, Ordering::Relaxed);
        smaller
    }

    /// A batch of `count` was served: grow back toward the configured size.
    pub(crate) fn accepted(&self, count: usize) {
        let now = self.now.load(Ordering::Relaxed);
        if count >= now && now < self.max {
            self.now
                .store((now + now.div_ceil(4)).min(self.max), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_on_refusal_and_grows_back_to_the_configured_size() {
        let b = BatchSize::new(8);
        assert_eq!(b.refused(8), 4);
        assert_eq!(b.refused(1), 1);
        for _ in 0..20 {
            b.accepted(b.get());
        }
        assert_eq!(b.get(), 8);
        b.accepted(3);
        assert_eq!(b.get(), 8, "a smaller batch served says nothing");
    }
}

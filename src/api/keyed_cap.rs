//! At most so many places held at once under each key (a client address, a
//! view token), each given back when dropped: what the per-client
//! connection cap and the live-stream budgets count with.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

type Open<K> = Arc<Mutex<HashMap<K, usize>>>;

#[derive(Debug)]
pub(crate) struct KeyedCap<K: Hash + Eq> {
    max: usize,
    open: Open<K>,
}

/// One place held under its key.
#[derive(Debug)]
pub(crate) struct Place<K: Hash + Eq> {
    open: Open<K>,
    key: K,
}

impl<K: Hash + Eq + Clone> KeyedCap<K> {
    /// At most `max` (1 at the least) under each key.
    pub(crate) fn new(max: usize) -> KeyedCap<K> {
        KeyedCap {
            max: max.max(1),
            open: Arc::default(),
        }
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A place under `key`, unless it holds `max` already.
    pub(crate) fn enter(&self, key: K) -> Option<Place<K>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key.clone()).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Place {
            open: Arc::clone(&self.open),
            key,
        })
    }

    #[cfg(test)]
    pub(crate) fn held(&self, key: &K) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(key).copied().unwrap_or(0)
    }
}

impl<K: Hash + Eq> Drop for Place<K> {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

//! Which served connection is idle, and for how long (issue 38, found 8).
//! The per-client cap stops one address; a few dozen addresses, each under
//! it, can still hold every one of `api.max_connections` with connections
//! that send nothing, and open a new one for each the header-read timeout
//! closes. A health check or a storefront call then waits in the kernel's
//! queue behind them for seconds.
//!
//! So when every slot is taken and another connection is waiting, the
//! connection idle the longest makes room for it. Idle means no request in
//! flight: none received yet, or between keep-alive requests; a response
//! still being written (a live status stream) is busy. A connection that
//! sends nothing is always the oldest idle one by the time the next is
//! waiting, and a client that asks is answered in the time shedding one
//! takes, not in a header-read timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// Every served connection's activity.
#[derive(Debug)]
pub(crate) struct IdleConnections {
    started: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Activity>>>,
}

/// One connection's requests in flight, and when it was last busy.
#[derive(Debug)]
pub(crate) struct Activity {
    busy: AtomicUsize,
    /// Milliseconds after the table started.
    last_active_ms: AtomicU64,
    /// Asked to close; cleared when it could not (a request had begun).
    asked_to_close: AtomicBool,
    close: Notify,
    started: Instant,
}

/// A connection's place in the table, for as long as it is open.
pub(crate) struct Tracked {
    id: u64,
    table: Arc<IdleConnections>,
    pub(crate) activity: Arc<Activity>,
}

/// A request in flight on its connection: the connection is busy until
/// this is dropped, with the response's last byte.
pub(crate) struct Busy(Arc<Activity>);

impl IdleConnections {
    pub(crate) fn new() -> Arc<IdleConnections> {
        Arc::new(IdleConnections {
            started: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::default(),
        })
    }

    pub(crate) fn track(self: &Arc<Self>) -> Tracked {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity {
            busy: AtomicUsize::new(0),
            last_active_ms: AtomicU64::new(self.now_ms()),
            asked_to_close: AtomicBool::new(false),
            close: Notify::new(),
            started: self.started,
        });
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::clone(&activity));
        Tracked {
            id,
            table: Arc::clone(self),
            activity,
        }
    }

    /// Asks the connection idle the longest to close; false when every
    /// connection is busy (or already asked).
    pub(crate) fn close_longest_idle(&self) -> bool {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        // Idle as long (within a millisecond): the one opened first.
        let longest = open
            .iter()
            .filter(|(_, a)| a.busy.load(Ordering::Acquire) == 0)
            .filter(|(_, a)| !a.asked_to_close.load(Ordering::Acquire))
            .min_by_key(|(id, a)| (a.last_active_ms.load(Ordering::Relaxed), **id));
        match longest {
            Some((_, a)) => {
                a.asked_to_close.store(true, Ordering::Release);
                a.close.notify_one();
                true
            }
            None => false,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl Activity {
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    /// Waits until this connection is asked to close.
    pub(crate) async fn close_asked(&self) {
        self.close.notified().await;
    }

    /// Whether it may close now: no request in flight. Called on the
    /// connection's own task, between polls of the connection, so no
    /// request can begin between this answer and the close.
    pub(crate) fn may_close(&self) -> bool {
        let idle = self.busy.load(Ordering::Acquire) == 0;
        if !idle {
            self.asked_to_close.store(false, Ordering::Release);
        }
        idle
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_active_ms.store(ms, Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.table
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_idle_connection_is_asked_first_and_a_busy_one_never() {
        let table = IdleConnections::new();
        let oldest = table.track();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let streaming = table.track();
        let newest = table.track();
        // The oldest is serving a request (a live stream): not idle.
        let busy = oldest.activity.begin();
        assert!(table.close_longest_idle());
        assert!(streaming.activity.asked_to_close.load(Ordering::Acquire));
        assert!(!oldest.activity.asked_to_close.load(Ordering::Acquire));
        assert!(table.close_longest_idle());
        assert!(newest.activity.asked_to_close.load(Ordering::Acquire));
        assert!(!table.close_longest_idle(), "only a busy one is left");
        drop(busy);
        assert!(table.close_longest_idle(), "idle again once answered");
        drop((streaming, newest));
        assert_eq!(table.open.lock().unwrap().len(), 1, "closed ones leave");
    }

    #[test]
    fn a_connection_whose_request_began_is_not_closed() {
        let table = IdleConnections::new();
        let c = table.track();
        assert!(table.close_longest_idle());
        let _busy = c.activity.begin();
        assert!(!c.activity.may_close());
        assert!(
            !c.activity.asked_to_close.load(Ordering::Acquire),
            "it may be asked again once idle"
        );
    }
}

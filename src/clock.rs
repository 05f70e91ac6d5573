use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};

/// Where "now" comes from, so tests can move time past an expiry.
pub trait Clock: Send + Sync + Debug {
    /// Unix milliseconds.
    fn now_ms(&self) -> i64;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::store::now_ms()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(now_ms: i64) -> ManualClock {
        ManualClock(AtomicI64::new(now_ms))
    }

    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    pub fn advance_secs(&self, secs: i64) {
        self.0.fetch_add(secs * 1000, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The database's clock, as the system clock plus an offset measured
/// against the database. Every instance sharing the database then agrees on
/// "now" (expiries, first sightings, when money became final), as the
/// watcher leases already do with the database's time, without a query per
/// reading. The offset is measured at start and every
/// [`DatabaseClock::RESYNC`] after; in between it follows the system
/// clock's pace, which drifts by far less than a second in that time.
#[derive(Debug, Default)]
pub struct DatabaseClock {
    offset_ms: AtomicI64,
}

impl DatabaseClock {
    pub const RESYNC: std::time::Duration = std::time::Duration::from_secs(30);

    /// Measures the offset now, then keeps it fresh in the background for
    /// as long as the clock is in use.
    pub async fn start(
        store: crate::store::Store,
    ) -> Result<std::sync::Arc<DatabaseClock>, crate::store::StoreError> {
        let clock = std::sync::Arc::new(DatabaseClock::default());
        clock.sync(&store).await?;
        let weak = std::sync::Arc::downgrade(&clock);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Self::RESYNC).await;
                let Some(clock) = weak.upgrade() else { return };
                if let Err(e) = clock.sync(&store).await {
                    tracing::warn!(error = %e, "could not read the database's clock; keeping the last offset");
                }
            }
        });
        Ok(clock)
    }

    /// Reads the database's time and keeps its offset from the system
    /// clock, taken at the middle of the round trip. Returns the offset.
    pub async fn sync(&self, store: &crate::store::Store) -> Result<i64, crate::store::StoreError> {
        let before = crate::store::now_ms();
        let database = store.database_now_ms().await?;
        let after = crate::store::now_ms();
        let offset = database - (before + (after - before) / 2);
        self.offset_ms.store(offset, Ordering::SeqCst);
        Ok(offset)
    }

    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }
}

impl Clock for DatabaseClock {
    fn now_ms(&self) -> i64 {
        crate::store::now_ms().saturating_add(self.offset_ms())
    }
}

//! A database transaction that, once committed, rings the feed's bell if
//! it wrote feed events: the live status tail and the webhook sender in
//! this process read them at once, not at their next look. Rung after the
//! commit, never before: a reader woken earlier would find nothing yet and
//! wait for its next look.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sqlx::AnyConnection;
use sqlx::Transaction;
use tokio::sync::watch;

/// Rung once per committed transaction that wrote feed events. A watch
/// channel, so a listener busy when it rings still finds it rung.
#[derive(Debug)]
pub(crate) struct FeedBell {
    rung: watch::Sender<u64>,
}

impl Default for FeedBell {
    fn default() -> FeedBell {
        FeedBell {
            rung: watch::channel(0).0,
        }
    }
}

impl FeedBell {
    fn ring(&self) {
        self.rung.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes each time a transaction that wrote feed events commits in
    /// this process (another process's are heard through PostgreSQL's
    /// NOTIFY, or at the listener's next look).
    pub(crate) fn listen(&self) -> watch::Receiver<u64> {
        self.rung.subscribe()
    }
}

pub(crate) struct Tx {
    inner: Transaction<'static, sqlx::Any>,
    /// Set when the transaction wrote feed events.
    rings: Option<Arc<FeedBell>>,
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx")
            .field("writes_feed", &self.rings.is_some())
            .finish_non_exhaustive()
    }
}

impl Tx {
    pub(super) fn new(inner: Transaction<'static, sqlx::Any>) -> Tx {
        Tx { inner, rings: None }
    }

    /// `bell` rings when this transaction commits.
    pub(super) fn ring_on_commit(&mut self, bell: &Arc<FeedBell>) {
        self.rings = Some(bell.clone());
    }

    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.inner.commit().await?;
        if let Some(bell) = self.rings {
            bell.ring();
        }
        Ok(())
    }

    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.inner.rollback().await
    }
}

impl Deref for Tx {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        &self.inner
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.inner
    }
}

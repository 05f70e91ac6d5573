//! Waiting for feed events: a commit of this process that wrote some (the
//! store's bell), or PostgreSQL's NOTIFY on `paywatch_outbox` (any
//! instance's commit) or `paywatch_webhooks` (a redelivery), ends a wait at
//! once. A timeout bounds it everywhere, since retries come due by the
//! clock alone, a notification can be missed while the listener
//! reconnects, and another process writing to the same SQLite file rings
//! no bell here.

use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::watch;
use tracing::{debug, warn};

use super::{Dialect, Store, FEED_CHANNEL, WEBHOOK_CHANNEL};

#[derive(Debug)]
pub(crate) struct FeedWake {
    bell: watch::Receiver<u64>,
    listener: Option<PgListener>,
}

impl FeedWake {
    /// Listens to this process's commits and, on PostgreSQL, to every
    /// instance's; if listening there fails, to this process's alone.
    pub(crate) async fn new(store: &Store, database_url: &str) -> FeedWake {
        let mut bell = store.feed_bell();
        bell.mark_unchanged();
        if store.dialect() != Dialect::Postgres {
            return FeedWake {
                bell,
                listener: None,
            };
        }
        let listener = async {
            let mut l = PgListener::connect(database_url).await?;
            l.listen_all([FEED_CHANNEL, WEBHOOK_CHANNEL]).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        match listener {
            Ok(l) => FeedWake {
                bell,
                listener: Some(l),
            },
            Err(e) => {
                warn!(error = %e, "cannot LISTEN for other instances' outbox writes; only this process's commits wake at once");
                FeedWake {
                    bell,
                    listener: None,
                }
            }
        }
    }

    /// Returns on a commit that wrote feed events, a notification, or after
    /// `max`, whichever comes first.
    pub(crate) async fn wait(&mut self, max: Duration) {
        let FeedWake { bell, listener } = self;
        let notified = async {
            match listener {
                Some(l) => {
                    if let Err(e) = l.recv().await {
                        // The listener reconnects on its next recv; until then, poll.
                        debug!(error = %e, "outbox listener lost its connection");
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        let rung = async {
            if bell.changed().await.is_err() {
                // No store is left to ring it.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = notified => {}
            () = rung => {}
            () = tokio::time::sleep(max) => {}
        }
    }
}

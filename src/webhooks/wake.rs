//! Waiting for work: PostgreSQL's NOTIFY on `paywatch_outbox` (sent at the
//! commit of every outbox write) or `paywatch_webhooks` (a redelivery) ends
//! a wait at once; a
//! timeout bounds it everywhere, since retries come due by the clock alone
//! and a notification can be missed while the listener reconnects.

use std::time::Duration;

use sqlx::postgres::PgListener;
use tracing::{debug, warn};

use crate::store::{Dialect, FEED_CHANNEL, WEBHOOK_CHANNEL};

#[derive(Debug)]
pub(crate) struct Wake {
    listener: Option<PgListener>,
}

impl Wake {
    /// Listens on PostgreSQL; elsewhere, or if listening fails, only polls.
    pub(crate) async fn new(dialect: Dialect, database_url: &str) -> Wake {
        if dialect != Dialect::Postgres {
            return Wake { listener: None };
        }
        let listener = async {
            let mut l = PgListener::connect(database_url).await?;
            l.listen_all([FEED_CHANNEL, WEBHOOK_CHANNEL]).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        match listener {
            Ok(l) => Wake { listener: Some(l) },
            Err(e) => {
                warn!(error = %e, "cannot LISTEN for outbox writes; polling instead");
                Wake { listener: None }
            }
        }
    }

    /// Returns on a notification or after `max`, whichever comes first.
    pub(crate) async fn wait(&mut self, max: Duration) {
        let Some(listener) = &mut self.listener else {
            tokio::time::sleep(max).await;
            return;
        };
        tokio::select! {
            got = listener.recv() => {
                if let Err(e) = got {
                    // The listener reconnects on its next recv; until then, poll.
                    debug!(error = %e, "outbox listener lost its connection");
                    tokio::time::sleep(max).await;
                }
            }
            _ = tokio::time::sleep(max) => {}
        }
    }
}

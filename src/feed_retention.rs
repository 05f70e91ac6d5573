//! Pruning the event feed past `events.retention_days`, hourly, in every
//! instance (a batch is one short transaction; two instances pruning at
//! once delete each row once).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::store::Store;

const EVERY: Duration = Duration::from_secs(3600);
const BATCH: i64 = 10_000;
const DAY_MS: i64 = 86_400_000;

pub(crate) async fn run(
    store: Store,
    clock: Arc<dyn Clock>,
    retention_days: u64,
    mut stop: watch::Receiver<bool>,
) {
    let keep_ms = i64::try_from(retention_days)
        .unwrap_or(i64::MAX)
        .saturating_mul(DAY_MS);
    loop {
        let before = clock.now_ms().saturating_sub(keep_ms);
        let mut pruned = 0;
        loop {
            match store.prune_events(before, BATCH).await {
                Ok(0) => break,
                Ok(n) => pruned += n,
                Err(e) => {
                    warn!(error = %e, "pruning the event feed failed; trying again later");
                    break;
                }
            }
        }
        if pruned > 0 {
            info!(pruned, retention_days, "event feed pruned");
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

//! Pruning old blocks, hourly, in every instance (a window of heights is one
//! short transaction; two instances pruning at once delete each row once):
//! see [`crate::store::Store::prune_blocks`].

use std::sync::Arc;
use std::time::Duration;

use paywatch_core::Network;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::store::Store;

const EVERY: Duration = Duration::from_secs(3600);
/// Heights per transaction: a few seconds of Solana, hours of Bitcoin.
const WINDOW: i64 = 10_000;
const DAY_MS: i64 = 86_400_000;

/// Prunes each of `networks` (with its reorg window) until `stop`.
pub(crate) async fn run(
    store: Store,
    clock: Arc<dyn Clock>,
    networks: Vec<(Network, u64)>,
    retention_days: u64,
    mut stop: watch::Receiver<bool>,
) {
    let keep_ms = i64::try_from(retention_days)
        .unwrap_or(i64::MAX)
        .saturating_mul(DAY_MS);
    loop {
        let before = clock.now_ms().saturating_sub(keep_ms);
        for (network, reorg_depth) in &networks {
            match store
                .prune_blocks(*network, *reorg_depth, before, WINDOW)
                .await
            {
                Ok((0, _)) => {}
                Ok((pruned, below)) => {
                    info!(%network, pruned, below, retention_days, "old blocks pruned")
                }
                Err(e) => warn!(%network, error = %e, "pruning blocks failed; trying again later"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

//! A network's heights once a minute, for the console's lag charts: written
//! by the network's watcher through its fenced handle, a day kept.

use paywatch_core::Network;
use sqlx::Row;

use super::blocks::to_u64;
use super::{Store, StoreError};

/// How long samples are kept.
const KEPT_MS: i64 = 24 * 60 * 60 * 1000;

/// A network's heights at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSample {
    pub at_ms: i64,
    pub tip_height: Option<u64>,
    pub cursor_height: Option<u64>,
    pub final_height: Option<u64>,
}

impl ChainSample {
    /// Blocks between the node's tip and what was applied.
    pub fn lag_blocks(&self) -> Option<u64> {
        Some(self.tip_height?.saturating_sub(self.cursor_height?))
    }
}

impl Store {
    /// Samples `network`'s stored heights at `now_ms`, and drops samples
    /// older than a day, in one transaction.
    pub async fn record_chain_sample(
        &self,
        network: Network,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO chain_samples (network, at, tip_height, cursor_height, final_height) \
             SELECT network, $2, tip_height, cursor_height, final_height FROM chain_state \
             WHERE network = $1 ON CONFLICT (network, at) DO NOTHING",
        )
        .bind(network.as_str())
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM chain_samples WHERE network = $1 AND at < $2")
            .bind(network.as_str())
            .bind(now_ms - KEPT_MS)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// `network`'s samples taken at or after `since_ms`, oldest first.
    pub async fn chain_samples(
        &self,
        network: Network,
        since_ms: i64,
    ) -> Result<Vec<ChainSample>, StoreError> {
        let rows = sqlx::query(
            "SELECT at, tip_height, cursor_height, final_height FROM chain_samples \
             WHERE network = $1 AND at >= $2 ORDER BY at",
        )
        .bind(network.as_str())
        .bind(since_ms)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ChainSample {
                    at_ms: r.try_get("at")?,
                    tip_height: to_u64(r.try_get("tip_height")?),
                    cursor_height: to_u64(r.try_get("cursor_height")?),
                    final_height: to_u64(r.try_get("final_height")?),
                })
            })
            .collect()
    }
}

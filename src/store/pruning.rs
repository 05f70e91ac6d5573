//! Pruning blocks (issue 21, found 5): below the reorg window and older than
//! the retention, a block row serves nothing but a rescan, unless it holds
//! a transfer (reconcile reads its time) or follows one (its time may prove
//! a payment made in time). Those stay; the rest go, a window of heights per
//! transaction, and `chain_state.pruned_below` says where the rest ends.

use paywatch_core::Network;
use sqlx::Row;

use super::{Store, StoreError};

impl Store {
    /// Prunes `network`'s blocks below both its final height less
    /// `reorg_depth` and the newest block connected before `before_ms`,
    /// `window` heights a transaction. Returns the blocks deleted and where
    /// pruning stands now.
    pub async fn prune_blocks(
        &self,
        network: Network,
        reorg_depth: u64,
        before_ms: i64,
        window: i64,
    ) -> Result<(u64, Option<i64>), StoreError> {
        let state =
            sqlx::query("SELECT final_height, pruned_below FROM chain_state WHERE network = $1")
                .bind(network.as_str())
                .fetch_optional(self.pool())
                .await?;
        let Some(state) = state else {
            return Ok((0, None));
        };
        let pruned_below: Option<i64> = state.try_get("pruned_below")?;
        let Some(final_height) = state.try_get::<Option<i64>, _>("final_height")? else {
            return Ok((0, pruned_below));
        };
        // Served by blocks_by_connected_at, backwards: one row.
        let aged: Option<i64> = sqlx::query_scalar(
            "SELECT height FROM blocks WHERE network = $1 AND orphaned_at IS NULL \
             AND connected_at < $2 ORDER BY connected_at DESC, height DESC LIMIT 1",
        )
        .bind(network.as_str())
        .bind(before_ms)
        .fetch_optional(self.pool())
        .await?;
        let Some(aged) = aged else {
            return Ok((0, pruned_below));
        };
        let depth = i64::try_from(reorg_depth).unwrap_or(i64::MAX);
        let horizon = (aged + 1).min(final_height.saturating_sub(depth));
        let mut from = match pruned_below {
            Some(p) => p,
            None => sqlx::query_scalar(
                "SELECT height FROM blocks WHERE network = $1 AND orphaned_at IS NULL \
                 ORDER BY height LIMIT 1",
            )
            .bind(network.as_str())
            .fetch_optional(self.pool())
            .await?
            .unwrap_or(horizon),
        };
        let mut deleted = 0;
        let mut stands = pruned_below;
        while from < horizon {
            let to = from.saturating_add(window.max(1)).min(horizon);
            let mut tx = self.begin().await?;
            deleted += sqlx::query(
                "DELETE FROM blocks WHERE network = $1 AND orphaned_at IS NULL \
                 AND height >= $2 AND height < $3 \
                 AND NOT EXISTS (SELECT 1 FROM transfers t \
                                 WHERE t.network = blocks.network AND t.block_hash = blocks.hash) \
                 AND NOT EXISTS (SELECT 1 FROM transfers t \
                                 WHERE t.network = blocks.network AND t.block_hash = blocks.parent)",
            )
            .bind(network.as_str())
            .bind(from)
            .bind(to)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            sqlx::query(
                "UPDATE chain_state SET pruned_below = $2 \
                 WHERE network = $1 AND (pruned_below IS NULL OR pruned_below < $2)",
            )
            .bind(network.as_str())
            .bind(to)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            stands = Some(to);
            from = to;
        }
        Ok((deleted, stands))
    }

    /// Below this height only blocks holding a transfer (and the block after
    /// each) are kept; `None` while nothing was pruned.
    pub async fn blocks_pruned_below(&self, network: Network) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar::<_, Option<i64>>(
            "SELECT pruned_below FROM chain_state WHERE network = $1",
        )
        .bind(network.as_str())
        .fetch_optional(self.pool())
        .await?
        .flatten())
    }
}

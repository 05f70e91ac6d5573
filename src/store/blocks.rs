//! Blocks as the watcher connected and disconnected them: connecting moves
//! the cursor, disconnecting orphans a block and its transfers (kept as
//! evidence) and lowers finality below it.

use paywatch_core::{BlockRef, Network};
use sqlx::Row;

use super::{Store, StoreError, Tx};

pub(super) fn block_ref_from_row(r: &sqlx::any::AnyRow) -> Result<BlockRef, StoreError> {
    let height: i64 = r.try_get("height")?;
    Ok(BlockRef {
        height: u64::try_from(height)
            .map_err(|_| StoreError::Corrupt(format!("block height {height}")))?,
        hash: r.try_get("hash")?,
        parent: r.try_get("parent")?,
    })
}

pub(super) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(super) fn to_u64(v: Option<i64>) -> Option<u64> {
    v.and_then(|v| u64::try_from(v).ok())
}

/// Served by `blocks_by_connected_at`: a look back of seconds, not the
/// whole chain.
pub(super) const BLOCKS_CONNECTED_SINCE: &str = "SELECT height, hash, parent FROM blocks \
     WHERE network = $1 AND orphaned_at IS NULL AND connected_at >= $2 ORDER BY height LIMIT $3";

impl Store {
    /// Active blocks connected at or after `since_ms`, ascending, at most `limit`.
    pub(crate) async fn blocks_connected_since(
        &self,
        network: Network,
        since_ms: i64,
        limit: i64,
    ) -> Result<Vec<BlockRef>, StoreError> {
        let rows = sqlx::query(BLOCKS_CONNECTED_SINCE)
            .bind(network.as_str())
            .bind(since_ms)
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(block_ref_from_row).collect()
    }

    /// Active blocks from `from` to `to` (inclusive), ascending, at most `limit`.
    pub(crate) async fn blocks_between(
        &self,
        network: Network,
        from: u64,
        to: u64,
        limit: i64,
    ) -> Result<Vec<BlockRef>, StoreError> {
        let rows = sqlx::query(
            "SELECT height, hash, parent FROM blocks \
             WHERE network = $1 AND orphaned_at IS NULL AND height >= $2 AND height <= $3 \
             ORDER BY height LIMIT $4",
        )
        .bind(network.as_str())
        .bind(to_i64(from))
        .bind(to_i64(to))
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(block_ref_from_row).collect()
    }

    pub(crate) async fn is_block_orphaned(
        &self,
        tx: &mut Tx,
        network: Network,
        hash: &str,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT orphaned_at FROM blocks WHERE network = $1 AND hash = $2")
            .bind(network.as_str())
            .bind(hash)
            .fetch_optional(&mut **tx)
            .await?;
        Ok(match row {
            Some(r) => r.try_get::<Option<i64>, _>("orphaned_at")?.is_some(),
            None => true,
        })
    }

    pub(crate) async fn connect_block(
        &self,
        tx: &mut Tx,
        network: Network,
        block: &BlockRef,
        timestamp_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (network, hash) DO UPDATE SET orphaned_at = NULL, connected_at = $6",
        )
        .bind(network.as_str())
        .bind(&block.hash)
        .bind(to_i64(block.height))
        .bind(&block.parent)
        .bind(timestamp_ms)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
        // The cursor moves, and the first block ever connected marks where
        // this database's history begins: one statement, as this runs per block.
        sqlx::query(
            "UPDATE chain_state SET cursor_height = $2, cursor_hash = $3, updated_at = $4, \
             start_height = COALESCE(start_height, $2) WHERE network = $1",
        )
        .bind(network.as_str())
        .bind(to_i64(block.height))
        .bind(&block.hash)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Orphans a disconnected block and its transfers; returns the addresses
    /// whose intents must be looked at again.
    pub(crate) async fn disconnect_block(
        &self,
        tx: &mut Tx,
        network: Network,
        block: &BlockRef,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        sqlx::query("UPDATE blocks SET orphaned_at = $3 WHERE network = $1 AND hash = $2")
            .bind(network.as_str())
            .bind(&block.hash)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        let rows = sqlx::query(
            "UPDATE transfers SET orphaned_at = $3, final_at = NULL \
             WHERE network = $1 AND block_hash = $2 AND orphaned_at IS NULL \
             RETURNING to_address",
        )
        .bind(network.as_str())
        .bind(&block.hash)
        .bind(now_ms)
        .fetch_all(&mut **tx)
        .await?;
        let top = sqlx::query(
            "SELECT height, hash FROM blocks WHERE network = $1 AND orphaned_at IS NULL ORDER BY height DESC LIMIT 1",
        )
        .bind(network.as_str())
        .fetch_optional(&mut **tx)
        .await?;
        let top = top
            .map(|r| {
                Ok::<_, StoreError>((
                    r.try_get::<i64, _>("height")? as u64,
                    r.try_get::<String, _>("hash")?,
                ))
            })
            .transpose()?;
        // The replaced heights are final again only when the node says so.
        sqlx::query(
            "UPDATE chain_state SET final_height = $2 WHERE network = $1 AND final_height > $2",
        )
        .bind(network.as_str())
        .bind(to_i64(block.height.saturating_sub(1)))
        .execute(&mut **tx)
        .await?;
        self.set_cursor(
            tx,
            network,
            top.as_ref().map(|(h, s)| (*h, s.as_str())),
            now_ms,
        )
        .await?;
        rows.iter().map(|r| Ok(r.try_get("to_address")?)).collect()
    }
}

//! A watcher's place and standing: the cursor (the last block applied),
//! the tip and state it reports, as `chain_state` holds them.

use paywatch_core::{BlockRef, Network};
use sqlx::Row;

use super::blocks::{block_ref_from_row, to_i64, to_u64};
use super::{Store, StoreError, Tx};

/// What applying one chain event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    Applied,
    /// Another worker applied this very event first; nothing was written.
    AlreadyApplied,
    /// The stored cursor is elsewhere: the caller's view of the chain is stale.
    CursorMismatch {
        stored: Option<String>,
    },
}

/// A watcher's standing, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainStatus {
    pub network: Network,
    pub cursor_height: Option<u64>,
    pub cursor_hash: Option<String>,
    /// The first height this database followed.
    pub start_height: Option<u64>,
    pub tip_height: Option<u64>,
    pub final_height: Option<u64>,
    pub watcher_state: String,
    pub last_error: Option<String>,
    pub updated_at_ms: i64,
}

impl Store {
    pub async fn ensure_chain_state(
        &self,
        network: Network,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        // In a transaction, like every write a watcher makes: on a fenced
        // handle that is where the lease is checked.
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO chain_state (network, updated_at) VALUES ($1, $2) ON CONFLICT (network) DO NOTHING",
        )
        .bind(network.as_str())
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The last `depth` connected blocks, ascending: the canonical stream's
    /// cursor. Blocks below an accepted gap are no longer part of it.
    pub async fn load_cursor(
        &self,
        network: Network,
        depth: usize,
    ) -> Result<Vec<BlockRef>, StoreError> {
        let rows = sqlx::query(
            "SELECT height, hash, parent FROM blocks WHERE network = $1 AND orphaned_at IS NULL \
             AND height > COALESCE((SELECT MAX(g.to_height) FROM chain_gaps g WHERE g.network = $1), -1) \
             ORDER BY height DESC LIMIT $2",
        )
        .bind(network.as_str())
        .bind(i64::try_from(depth).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        let mut cursor = rows
            .iter()
            .map(block_ref_from_row)
            .collect::<Result<Vec<_>, StoreError>>()?;
        cursor.reverse();
        Ok(cursor)
    }

    pub(crate) async fn stored_cursor_hash(
        &self,
        tx: &mut Tx,
        network: Network,
    ) -> Result<Option<String>, StoreError> {
        let sql = self.sql("SELECT cursor_hash FROM chain_state WHERE network = $1 FOR_UPDATE");
        let row = sqlx::query(&sql)
            .bind(network.as_str())
            .fetch_optional(&mut **tx)
            .await?;
        match row {
            Some(r) => Ok(r.try_get("cursor_hash")?),
            None => Err(StoreError::Corrupt(format!(
                "no chain_state row for {network}"
            ))),
        }
    }

    pub(super) async fn set_cursor(
        &self,
        tx: &mut Tx,
        network: Network,
        at: Option<(u64, &str)>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE chain_state SET cursor_height = $2, cursor_hash = $3, updated_at = $4 WHERE network = $1")
            .bind(network.as_str())
            .bind(at.map(|(h, _)| to_i64(h)))
            .bind(at.map(|(_, hash)| hash.to_owned()))
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Records that a watcher is degraded or halted, and why.
    pub async fn record_watcher_trouble(
        &self,
        network: Network,
        state: &str,
        error: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE chain_state SET watcher_state = $2, last_error = $3, updated_at = $4 WHERE network = $1")
            .bind(network.as_str())
            .bind(state)
            .bind(error)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn chain_status(&self, network: Network) -> Result<Option<ChainStatus>, StoreError> {
        let row = sqlx::query(
            "SELECT cursor_height, cursor_hash, start_height, tip_height, final_height, watcher_state, last_error, updated_at \
             FROM chain_state WHERE network = $1",
        )
        .bind(network.as_str())
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(ChainStatus {
                network,
                cursor_height: to_u64(r.try_get("cursor_height")?),
                cursor_hash: r.try_get("cursor_hash")?,
                start_height: to_u64(r.try_get("start_height")?),
                tip_height: to_u64(r.try_get("tip_height")?),
                final_height: to_u64(r.try_get("final_height")?),
                watcher_state: r.try_get("watcher_state")?,
                last_error: r.try_get("last_error")?,
                updated_at_ms: r.try_get("updated_at")?,
            })
        })
        .transpose()
    }
}

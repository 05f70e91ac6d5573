//! Dormant addresses: issued long ago, their intent ended, no money since.
//! They leave the watch set of a source that can look addresses up, and
//! the sweep looks them up instead (see `watcher::dormancy`).

use paywatch_core::{Network, Probe};
use sqlx::Row;

use super::blocks::{to_i64, to_u64};
use super::{Store, StoreError};

/// Intent statuses after which an address waits for nothing: money sent to
/// it now is late, and goes to review whenever it is seen.
const ENDED: &str = "('paid', 'expired', 'resolved')";

/// The live addresses a watcher reads into its set: all at a takeover, then
/// those issued since its last look (index `addresses_live`).
pub(super) const LIVE_ADDRESSES_SINCE: &str = "SELECT address, issued_at FROM addresses \
     WHERE network = $1 AND issued_at IS NOT NULL AND dormant_at IS NULL AND issued_at >= $2";

/// A page of the sweep (index `addresses_dormant`).
pub(super) const DORMANT_PAGE: &str = "SELECT id, address, dormant_height FROM addresses \
     WHERE network = $1 AND dormant_at IS NOT NULL AND id > $2 ORDER BY id LIMIT $3";

impl Store {
    /// The issued addresses of `network` that are watched live, issued at
    /// or after `since_ms` (by any instance).
    pub async fn live_addresses(
        &self,
        network: Network,
        since_ms: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(LIVE_ADDRESSES_SINCE)
            .bind(network.as_str())
            .bind(since_ms)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("address")?, r.try_get("issued_at")?)))
            .collect()
    }

    /// Marks dormant, at most `limit` at a time, the live addresses of
    /// `network` issued before `quiet_since_ms` whose intent ended before
    /// it and that saw no money (mined or waiting) since. `watched_to`: the
    /// last block read with them watched. Returns the addresses marked.
    pub async fn mark_dormant(
        &self,
        network: Network,
        quiet_since_ms: i64,
        watched_to: u64,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "UPDATE addresses SET dormant_at = $3, dormant_height = $4 \
             WHERE id IN ( \
               SELECT a.id FROM addresses a \
               WHERE a.network = $1 AND a.issued_at IS NOT NULL AND a.dormant_at IS NULL \
                 AND a.issued_at < $2 \
                 AND (a.lost_window_at IS NULL OR a.lost_window_at < $2) \
                 AND (a.woke_at IS NULL OR a.woke_at < $2) \
                 AND NOT EXISTS (SELECT 1 FROM intents i \
                   WHERE i.network = a.network AND i.address = a.address \
                     AND (i.status NOT IN {ENDED} OR i.updated_at >= $2)) \
                 AND NOT EXISTS (SELECT 1 FROM transfers t \
                   WHERE t.network = a.network AND t.to_address = a.address \
                     AND (t.first_seen_at >= $2 \
                          OR (t.orphaned_at IS NULL AND t.block_height > $4))) \
               ORDER BY a.issued_at LIMIT $5) \
             RETURNING address"
        );
        let mut tx = self.begin().await?;
        let rows = sqlx::query(&sql)
            .bind(network.as_str())
            .bind(quiet_since_ms)
            .bind(now_ms)
            .bind(to_i64(watched_to))
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.iter().map(|r| Ok(r.try_get("address")?)).collect()
    }

    /// The dormant addresses of `network` after id `after`, in id order,
    /// each with its id and what the sweep asks of it.
    pub(crate) async fn dormant_page(
        &self,
        network: Network,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(i64, Probe)>, StoreError> {
        let rows = sqlx::query(DORMANT_PAGE)
            .bind(network.as_str())
            .bind(after)
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                let probe = Probe {
                    address: r.try_get("address")?,
                    // The last block read while it was watched.
                    watched_to: to_u64(r.try_get("dormant_height")?).unwrap_or(0),
                };
                Ok((r.try_get("id")?, probe))
            })
            .collect()
    }

    pub async fn dormant_count(&self, network: Network) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM addresses WHERE network = $1 AND dormant_at IS NOT NULL",
        )
        .bind(network.as_str())
        .fetch_one(self.pool())
        .await?;
        Ok(row.try_get("n")?)
    }

    /// Puts dormant addresses of `network` back among the live ones.
    pub(crate) async fn wake_addresses(
        &self,
        network: Network,
        addresses: &[String],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        for address in addresses {
            sqlx::query(
                "UPDATE addresses SET dormant_at = NULL, dormant_height = NULL, woke_at = $3 \
                 WHERE network = $1 AND address = $2 AND dormant_at IS NOT NULL",
            )
            .bind(network.as_str())
            .bind(address.as_str())
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The lowest last block read with a dormant address of `network`
    /// watched; `None` when none is dormant.
    pub(crate) async fn dormant_floor(&self, network: Network) -> Result<Option<u64>, StoreError> {
        // Every dormant row has its height: no rows, no minimum.
        let row = sqlx::query(
            "SELECT MIN(dormant_height) AS low FROM addresses \
             WHERE network = $1 AND dormant_at IS NOT NULL",
        )
        .bind(network.as_str())
        .fetch_one(self.pool())
        .await?;
        Ok(to_u64(row.try_get("low")?))
    }

    /// Every dormant address of `network` back among the live ones, for a
    /// source that cannot look them up. Returns them.
    pub(crate) async fn wake_all_dormant(
        &self,
        network: Network,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        let mut tx = self.begin().await?;
        let rows = sqlx::query(
            "UPDATE addresses SET dormant_at = NULL, dormant_height = NULL, woke_at = $2 \
             WHERE network = $1 AND dormant_at IS NOT NULL RETURNING address",
        )
        .bind(network.as_str())
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(|r| Ok(r.try_get("address")?)).collect()
    }
}

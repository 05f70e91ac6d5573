//! The statements behind configuration agreement: the money settings pinned
//! per network, applying new ones, and the instances' records.

use paywatch_core::Network;
use sqlx::Row;

use super::{Store, StoreError};
use crate::money_settings::MoneySettings;

/// A network's pinned money settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedMoney {
    pub fingerprint: String,
    pub settings: String,
    pub applied_at: i64,
    pub applied_by: String,
}

impl Store {
    pub async fn pinned_money(&self, network: Network) -> Result<Option<PinnedMoney>, StoreError> {
        let row = sqlx::query(
            "SELECT fingerprint, settings, applied_at, applied_by FROM money_settings \
             WHERE network = $1",
        )
        .bind(network.as_str())
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(PinnedMoney {
                fingerprint: r.try_get("fingerprint")?,
                settings: r.try_get("settings")?,
                applied_at: r.try_get("applied_at")?,
                applied_by: r.try_get("applied_by")?,
            })
        })
        .transpose()
    }

    /// Pins `own` unless settings are pinned already; returns what is pinned.
    pub(crate) async fn pin_money_if_absent(
        &self,
        network: Network,
        own: &MoneySettings,
        by: &str,
        now_ms: i64,
    ) -> Result<PinnedMoney, StoreError> {
        // Through `begin`, as every write: SQLite's writer lock is taken up
        // front (waiting out another writer), and a connection a killed
        // task left mid-transaction is replaced, not reused.
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO money_settings (network, fingerprint, settings, applied_at, applied_by) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (network) DO NOTHING",
        )
        .bind(network.as_str())
        .bind(&own.fingerprint)
        .bind(&own.json)
        .bind(now_ms)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.pinned_money(network)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("money settings of {network} vanished")))
    }

    /// Pins `own`; when `fence`, moves the network's lease token on (its
    /// holder's next write fails the fence) and lets it run out; lowers the
    /// final height by `lower_final_by`. One transaction: no holder writes
    /// under the old rules once the new ones are in force.
    pub(crate) async fn apply_money(
        &self,
        network: Network,
        own: &MoneySettings,
        by: &str,
        now_ms: i64,
        fence: bool,
        lower_final_by: Option<i64>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO money_settings (network, fingerprint, settings, applied_at, applied_by) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (network) DO UPDATE SET \
             fingerprint = excluded.fingerprint, settings = excluded.settings, \
             applied_at = excluded.applied_at, applied_by = excluded.applied_by",
        )
        .bind(network.as_str())
        .bind(&own.fingerprint)
        .bind(&own.json)
        .bind(now_ms)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        if fence {
            self.fence_out_lease(&mut tx, network).await?;
        }
        if let Some(blocks) = lower_final_by {
            self.lower_final_height(&mut tx, network, blocks).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The fingerprint of a network's pinned money settings.
    pub(crate) async fn pinned_money_fingerprint(
        &self,
        network: Network,
    ) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT fingerprint FROM money_settings WHERE network = $1")
                .bind(network.as_str())
                .fetch_optional(self.pool())
                .await?,
        )
    }

    pub(crate) async fn record_instance(
        &self,
        name: &str,
        version: &str,
        config_hash: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO instances (name, version, config_hash, started_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET version = excluded.version, \
             config_hash = excluded.config_hash, started_at = excluded.started_at",
        )
        .bind(name)
        .bind(version)
        .bind(config_hash)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every instance as it last started: name, version, configuration
    /// hash, when.
    pub async fn instances(&self) -> Result<Vec<(String, String, String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, version, config_hash, started_at FROM instances ORDER BY name",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("name")?,
                    r.try_get("version")?,
                    r.try_get("config_hash")?,
                    r.try_get("started_at")?,
                ))
            })
            .collect()
    }
}

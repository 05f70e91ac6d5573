use paywatch_core::Network;
use sqlx::Row;

use super::{Store, StoreError, Tx};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub added: u64,
    pub already_present: u64,
}

impl Store {
    /// Adds addresses to a network's pool. Re-importing a file adds nothing twice.
    pub async fn import_addresses(
        &self,
        network: Network,
        addresses: &[String],
        now_ms: i64,
    ) -> Result<ImportReport, StoreError> {
        let mut tx = self.begin().await?;
        let mut report = ImportReport::default();
        for chunk in addresses.chunks(500) {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| format!("($1, ${}, 'pool', $2)", i + 3))
                .collect();
            let sql = format!(
                "INSERT INTO addresses (network, address, origin, added_at) VALUES {} \
                 ON CONFLICT (network, address) DO NOTHING",
                values.join(", ")
            );
            let mut q = sqlx::query(&sql).bind(network.as_str()).bind(now_ms);
            for a in chunk {
                q = q.bind(a.as_str());
            }
            let added = q.execute(&mut *tx).await?.rows_affected();
            report.added += added;
            report.already_present += chunk.len() as u64 - added;
        }
        tx.commit().await?;
        Ok(report)
    }

    /// Takes the oldest never-issued pool address and marks it issued, in one
    /// statement under a row lock, so concurrent callers never get the same one.
    pub(crate) async fn take_pool_address(
        &self,
        tx: &mut Tx,
        network: Network,
        now_ms: i64,
    ) -> Result<Option<(i64, String)>, StoreError> {
        let sql = self.sql(
            "UPDATE addresses SET issued_at = $2 \
             WHERE id = (SELECT id FROM addresses WHERE network = $1 AND issued_at IS NULL \
                         ORDER BY id LIMIT 1 SKIP_LOCKED) \
               AND issued_at IS NULL \
             RETURNING id, address",
        );
        let row = sqlx::query(&sql)
            .bind(network.as_str())
            .bind(now_ms)
            .fetch_optional(&mut **tx)
            .await?;
        row.map(|r| Ok((r.try_get("id")?, r.try_get("address")?)))
            .transpose()
    }

    /// Reserves the next derivation index of the key `fingerprint` on a
    /// network. `None` when the counter belongs to another key now (it was
    /// rotated): nothing is taken. A counter from before fingerprints were
    /// kept (none recorded) is the key's: start-up adopts it
    /// ([`crate::keys::check_keys`]).
    pub(crate) async fn take_derivation_index(
        &self,
        tx: &mut Tx,
        network: Network,
        fingerprint: &str,
    ) -> Result<Option<u32>, StoreError> {
        self.ensure_derivation_counter(tx, network, fingerprint)
            .await?;
        let row = sqlx::query(
            "UPDATE address_derivation SET next_index = next_index + 1 \
             WHERE network = $1 AND (key_fingerprint = $2 OR key_fingerprint IS NULL) \
             RETURNING next_index - 1 AS taken",
        )
        .bind(network.as_str())
        .bind(fingerprint)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let taken: i64 = row.try_get("taken")?;
        u32::try_from(taken)
            .map(Some)
            .map_err(|_| StoreError::Corrupt(format!("derivation index {taken} for {network}")))
    }

    /// Gives a network that never derived a counter from 0, belonging to
    /// the key `fingerprint`; leaves an existing one as it is.
    pub(super) async fn ensure_derivation_counter(
        &self,
        tx: &mut Tx,
        network: Network,
        fingerprint: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO address_derivation (network, next_index, key_fingerprint) \
             VALUES ($1, 0, $2) ON CONFLICT (network) DO NOTHING",
        )
        .bind(network.as_str())
        .bind(fingerprint)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Records a freshly derived address as issued. A derived address that was
    /// ever seen before violates the unique key: it is never issued twice.
    pub(crate) async fn insert_derived_address(
        &self,
        tx: &mut Tx,
        network: Network,
        address: &str,
        index: u32,
        fingerprint: &str,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO addresses \
               (network, address, origin, derivation_index, key_fingerprint, added_at, issued_at) \
             VALUES ($1, $2, 'derived', $3, $5, $4, $4) RETURNING id",
        )
        .bind(network.as_str())
        .bind(address)
        .bind(i64::from(index))
        .bind(now_ms)
        .bind(fingerprint)
        .fetch_one(&mut **tx)
        .await?;
        Ok(row.try_get("id")?)
    }

    pub(crate) async fn address_exists(
        &self,
        tx: &mut Tx,
        network: Network,
        address: &str,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT id FROM addresses WHERE network = $1 AND address = $2")
            .bind(network.as_str())
            .bind(address)
            .fetch_optional(&mut **tx)
            .await?;
        Ok(row.is_some())
    }

    pub(crate) async fn link_address_to_intent(
        &self,
        tx: &mut Tx,
        address_id: i64,
        intent_id: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE addresses SET intent_id = $1 WHERE id = $2")
            .bind(intent_id)
            .bind(address_id)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Issued addresses of a network, issued at or after `since_ms`, with
    /// when: what a watcher must look for. Addresses stay watched forever.
    pub async fn issued_addresses(
        &self,
        network: Network,
        since_ms: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT address, issued_at FROM addresses \
             WHERE network = $1 AND issued_at IS NOT NULL AND issued_at >= $2",
        )
        .bind(network.as_str())
        .bind(since_ms)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("address")?, r.try_get("issued_at")?)))
            .collect()
    }

    /// How many pool addresses a network has left to issue.
    pub async fn free_addresses(&self, network: Network) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM addresses WHERE network = $1 AND issued_at IS NULL",
        )
        .bind(network.as_str())
        .fetch_one(self.pool())
        .await?;
        Ok(row.try_get("n")?)
    }
}

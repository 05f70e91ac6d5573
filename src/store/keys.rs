//! The statements behind derivation keys: which key the counter belongs to,
//! the addresses it derived, and the keys retired by a rotation.

use paywatch_core::Network;
use sqlx::Row;

use super::{Store, StoreError, Tx};

/// A network's derivation counter and the key it belongs to (`None`: from
/// before fingerprints were kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DerivationCounter {
    pub next_index: i64,
    pub key_fingerprint: Option<String>,
}

impl Store {
    pub(crate) async fn derivation_counter(
        &self,
        tx: &mut Tx,
        network: Network,
    ) -> Result<Option<DerivationCounter>, StoreError> {
        let sql = self.sql(
            "SELECT next_index, key_fingerprint FROM address_derivation WHERE network = $1 \
             FOR_UPDATE",
        );
        let row = sqlx::query(&sql)
            .bind(network.as_str())
            .fetch_optional(&mut **tx)
            .await?;
        row.map(|r| {
            Ok(DerivationCounter {
                next_index: r.try_get("next_index")?,
                key_fingerprint: r.try_get("key_fingerprint")?,
            })
        })
        .transpose()
    }

    /// The derived addresses of the key `fingerprint` (`None`: those from
    /// before fingerprints were kept) with the lowest and the highest
    /// index: what a configured key is checked against.
    pub(crate) async fn derived_samples(
        &self,
        tx: &mut Tx,
        network: Network,
        fingerprint: Option<&str>,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let of_key = if fingerprint.is_some() {
            "key_fingerprint = $2"
        } else {
            "key_fingerprint IS NULL"
        };
        let mut samples = Vec::new();
        for order in ["ASC", "DESC"] {
            let sql = format!(
                "SELECT derivation_index, address FROM addresses \
                 WHERE network = $1 AND origin = 'derived' AND {of_key} \
                 ORDER BY derivation_index {order} LIMIT 1"
            );
            let mut query = sqlx::query(&sql).bind(network.as_str());
            if let Some(fingerprint) = fingerprint {
                query = query.bind(fingerprint);
            }
            let row = query.fetch_optional(&mut **tx).await?;
            if let Some(r) = row {
                let sample = (r.try_get("derivation_index")?, r.try_get("address")?);
                if !samples.contains(&sample) {
                    samples.push(sample);
                }
            }
        }
        Ok(samples)
    }

    /// Names the key of a counter and of the derived addresses that have
    /// none recorded: they are the configured key's, as checked.
    pub(crate) async fn adopt_key(
        &self,
        tx: &mut Tx,
        network: Network,
        fingerprint: &str,
    ) -> Result<(), StoreError> {
        self.ensure_derivation_counter(tx, network, fingerprint)
            .await?;
        sqlx::query(
            "UPDATE address_derivation SET key_fingerprint = $2 \
             WHERE network = $1 AND key_fingerprint IS NULL",
        )
        .bind(network.as_str())
        .bind(fingerprint)
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "UPDATE addresses SET key_fingerprint = $2 \
             WHERE network = $1 AND origin = 'derived' AND key_fingerprint IS NULL",
        )
        .bind(network.as_str())
        .bind(fingerprint)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    pub(crate) async fn key_retired_at(
        &self,
        tx: &mut Tx,
        network: Network,
        fingerprint: &str,
    ) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT retired_at FROM retired_keys WHERE network = $1 AND key_fingerprint = $2",
        )
        .bind(network.as_str())
        .bind(fingerprint)
        .fetch_optional(&mut **tx)
        .await?)
    }

    /// Retires the counter's key with its next index and gives the counter
    /// to `fingerprint`, from index 0.
    pub(crate) async fn rotate_key(
        &self,
        tx: &mut Tx,
        network: Network,
        retired: &DerivationCounter,
        retired_fingerprint: &str,
        fingerprint: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO retired_keys (network, key_fingerprint, next_index, retired_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(network.as_str())
        .bind(retired_fingerprint)
        .bind(retired.next_index)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "UPDATE address_derivation SET next_index = 0, key_fingerprint = $2 WHERE network = $1",
        )
        .bind(network.as_str())
        .bind(fingerprint)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

//! Where a restart must read the chain again from: the lowest block a
//! source handed out without every transfer in it and still reads again
//! (an Ethereum block its node could not trace). The source keeps that wait
//! in memory; the watcher writes it here before the block itself, so a
//! crash cannot forget it.

use paywatch_core::Network;
use sqlx::Row;

use super::blocks::to_i64;
use super::{Store, StoreError};

impl Store {
    /// The height recorded by [`Store::record_unread_from`], if any.
    pub async fn unread_from(&self, network: Network) -> Result<Option<u64>, StoreError> {
        let row = sqlx::query("SELECT unread_from FROM chain_state WHERE network = $1")
            .bind(network.as_str())
            .fetch_optional(self.pool())
            .await?;
        let height: Option<i64> = match row {
            Some(r) => r.try_get("unread_from")?,
            None => None,
        };
        Ok(height.and_then(|h| u64::try_from(h).ok()))
    }

    /// Records (or, with `None`, clears) the lowest height still read again.
    pub async fn record_unread_from(
        &self,
        network: Network,
        height: Option<u64>,
    ) -> Result<(), StoreError> {
        // In a transaction, like every write a watcher makes: on a fenced
        // handle that is where the lease is checked.
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE chain_state SET unread_from = $2 WHERE network = $1")
            .bind(network.as_str())
            .bind(height.map(to_i64))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

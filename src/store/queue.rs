//! The reconcile queue: addresses whose intents reconcile must look at
//! again, written in the same transaction as what changed them.

use paywatch_core::Network;
use serde::Serialize;
use sqlx::Row;

use super::{json, Col, Store, StoreError, Tx};

impl Store {
    /// Queues the intents at these addresses for another look by reconcile.
    pub(crate) async fn touch_intents(
        &self,
        tx: &mut Tx,
        network: Network,
        addresses: &[String],
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Row<'a> {
            a: &'a str,
        }
        if addresses.is_empty() {
            return Ok(());
        }
        let mut unique: Vec<&str> = addresses.iter().map(String::as_str).collect();
        unique.sort_unstable();
        unique.dedup();
        let rows: Vec<Row<'_>> = unique.into_iter().map(|a| Row { a }).collect();
        let sql = format!(
            "INSERT INTO reconcile_queue (network, address) SELECT $2, a FROM {}",
            self.dialect().rowset("$1", &[("a", Col::Text)])
        );
        let body = json(&rows)?;
        sqlx::query(&sql)
            .bind(body)
            .bind(network.as_str())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Claims up to `limit` queued addresses; a rollback puts them back.
    pub(crate) async fn claim_queue(
        &self,
        tx: &mut Tx,
        limit: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let sql = self.sql(
            "DELETE FROM reconcile_queue WHERE id IN \
               (SELECT id FROM reconcile_queue ORDER BY id LIMIT $1 SKIP_LOCKED) \
             RETURNING network, address",
        );
        let mut pairs = Vec::new();
        for r in sqlx::query(&sql).bind(limit).fetch_all(&mut **tx).await? {
            pairs.push((r.try_get("network")?, r.try_get("address")?));
        }
        Ok(pairs)
    }
}

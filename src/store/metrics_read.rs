//! The one read the metrics scrape needs that nothing else does.

use sqlx::Row;

use super::{Store, StoreError};

impl Store {
    /// Intents per stored status (a status no intent has is absent), and
    /// how many of them a reorg reversed after settlement: one pass over
    /// the table for both.
    pub(crate) async fn intent_counts_by_status(
        &self,
    ) -> Result<(Vec<(String, i64)>, i64), StoreError> {
        let rows = sqlx::query(
            "SELECT status, COUNT(*) AS n, \
             SUM(CASE WHEN exception = 'reversed' THEN 1 ELSE 0 END) AS reversed \
             FROM intents GROUP BY status",
        )
        .fetch_all(self.pool())
        .await?;
        let mut reversed = 0;
        let mut counts = Vec::with_capacity(rows.len());
        for r in &rows {
            counts.push((r.try_get("status")?, r.try_get("n")?));
            reversed += r.try_get::<i64, _>("reversed")?;
        }
        Ok((counts, reversed))
    }
}

//! The one read the metrics scrape needs that nothing else does.

use sqlx::Row;

use super::{Store, StoreError};

impl Store {
    /// Intents per stored status; a status no intent has is absent.
    pub(crate) async fn intent_counts_by_status(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM intents GROUP BY status")
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("status")?, r.try_get("n")?)))
            .collect()
    }
}

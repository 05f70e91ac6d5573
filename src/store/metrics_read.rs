//! The reads the metrics scrape needs that nothing else does.

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

/// Backlogs an on-call engineer is alerted on, read in one scrape.
#[derive(Debug, Default)]
pub(crate) struct OperationsBacklog {
    /// Free addresses per network (only networks with any are listed).
    pub free_pool_addresses: std::collections::HashMap<String, i64>,
    pub webhooks_pending: i64,
    /// When the oldest event still waiting for its webhook was made.
    pub webhook_oldest_at: Option<i64>,
    pub reconcile_queue: i64,
}

impl Store {
    /// Each from a partial index or a table kept small: free addresses
    /// (`addresses_free`), open deliveries (`webhook_deliveries_due`), and
    /// the reconcile queue, which reconcile empties.
    pub(crate) async fn operations_backlog(&self) -> Result<OperationsBacklog, StoreError> {
        let mut backlog = OperationsBacklog::default();
        let free = sqlx::query(
            "SELECT network, COUNT(*) AS n FROM addresses WHERE issued_at IS NULL GROUP BY network",
        )
        .fetch_all(self.pool())
        .await?;
        for r in &free {
            backlog
                .free_pool_addresses
                .insert(r.try_get("network")?, r.try_get("n")?);
        }
        let webhooks = sqlx::query(
            "SELECT COUNT(*) AS n, MIN(o.created_at) AS oldest \
             FROM webhook_deliveries d JOIN outbox o ON o.id = d.outbox_id \
             WHERE d.delivered_at IS NULL",
        )
        .fetch_one(self.pool())
        .await?;
        backlog.webhooks_pending = webhooks.try_get("n")?;
        backlog.webhook_oldest_at = webhooks.try_get("oldest")?;
        backlog.reconcile_queue = sqlx::query("SELECT COUNT(*) AS n FROM reconcile_queue")
            .fetch_one(self.pool())
            .await?
            .try_get("n")?;
        Ok(backlog)
    }
}

impl Store {
    /// Open intents (awaiting payment or confirming) per network, networks
    /// with none left out: what a switched-off network leaves unwatched.
    pub async fn open_intents_by_network(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT network, COUNT(*) AS n FROM intents \
             WHERE status IN ('awaiting_payment', 'confirming') GROUP BY network ORDER BY network",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("network")?, r.try_get("n")?)))
            .collect()
    }
}

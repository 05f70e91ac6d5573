//! The reads the metrics scrape needs that nothing else does.

use sqlx::Row;

use super::{Dialect, Store, StoreError};

impl Store {
    /// Intents per stored status (a status no intent has is absent), and
    /// how many of them a reorg reversed after settlement: one pass over
    /// the whole table for both, so the metrics read it only every few
    /// minutes (the open statuses come from [`Store::open_intent_counts`]).
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

/// The open statuses, each counted on the partial index made for it, so a
/// scrape reads the open intents, never the years of settled ones: the
/// `awaiting_payment` rows of `intents_expiring`, the `confirming` rows of
/// `intents_money_open` (its predicate repeated so the planner may use it),
/// and `intents_needing_review`.
pub(super) fn open_status_sql(dialect: Dialect) -> [(&'static str, String); 3] {
    let zero = match dialect {
        Dialect::Postgres => "0",
        Dialect::Sqlite => "'0'",
    };
    [
        (
            "awaiting_payment",
            "SELECT network, COUNT(*) AS n FROM intents WHERE status = 'awaiting_payment' \
             GROUP BY network"
                .to_owned(),
        ),
        (
            "confirming",
            format!(
                "SELECT network, COUNT(*) AS n FROM intents \
                 WHERE (status = 'confirming' OR amount_pending <> {zero}) \
                   AND status = 'confirming' GROUP BY network"
            ),
        ),
        // Not per network (nothing reads it so): one count, off its index.
        (
            "needs_review",
            "SELECT MIN(network) AS network, COUNT(*) AS n FROM intents \
             WHERE status = 'needs_review' HAVING COUNT(*) > 0"
                .to_owned(),
        ),
    ]
}

/// Intents in the open statuses, per status and network.
#[derive(Debug, Default, Clone)]
pub(crate) struct OpenIntents {
    /// (status, network, count), networks with none left out.
    pub rows: Vec<(&'static str, String, i64)>,
}

impl OpenIntents {
    pub(crate) fn of_status(&self, status: &str) -> i64 {
        self.rows
            .iter()
            .filter(|(s, _, _)| *s == status)
            .map(|(_, _, n)| n)
            .sum()
    }

    /// Awaiting payment or confirming, per network: what a switched-off
    /// network leaves unwatched.
    pub(crate) fn payable_by_network(&self) -> Vec<(String, i64)> {
        let mut out: std::collections::BTreeMap<String, i64> = Default::default();
        for (status, network, n) in &self.rows {
            if *status != "needs_review" {
                *out.entry(network.clone()).or_default() += n;
            }
        }
        out.into_iter().collect()
    }
}

impl Store {
    /// Intents in the open statuses, counted through their partial indexes.
    pub(crate) async fn open_intent_counts(&self) -> Result<OpenIntents, StoreError> {
        let mut open = OpenIntents::default();
        for (status, sql) in open_status_sql(self.dialect()) {
            for r in sqlx::query(&sql).fetch_all(self.pool()).await? {
                open.rows
                    .push((status, r.try_get("network")?, r.try_get("n")?));
            }
        }
        Ok(open)
    }

    /// Open intents (awaiting payment or confirming) per network, networks
    /// with none left out: what a switched-off network leaves unwatched.
    pub async fn open_intents_by_network(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(self.open_intent_counts().await?.payable_by_network())
    }
}

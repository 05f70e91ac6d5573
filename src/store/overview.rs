//! What the console's overview page reads: intents by method and status
//! since a time, money settled since a time, and the review queue's size
//! and age. Each reads a time range by an index (`intents_by_created`,
//! `settlements_by_time`, `intents_needing_review`), never the years before.

use sqlx::Row;

use super::{Store, StoreError};

/// Intents of one method and status made since the range's start, and how
/// many of them since the later `today` mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IntentTally {
    pub asset: String,
    pub network: String,
    pub status: String,
    pub since_start: i64,
    pub today: i64,
}

/// Money settled for one method (`None`: from a balance) since the
/// range's start, and since `today`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettledTally {
    pub method: Option<(String, String)>,
    pub count: i64,
    pub usd_cents: i64,
    pub today_count: i64,
    pub today_usd_cents: i64,
}

/// The review queue's size and its oldest case's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct QueueSize {
    pub waiting: i64,
    /// The oldest last change among the cases waiting (`updated_at`, which
    /// `intents_needing_review` orders by): a case that saw a new transfer
    /// while in review counts from then.
    pub oldest_since_ms: Option<i64>,
}

pub(crate) const INTENTS_SINCE: &str = "SELECT asset, network, status, COUNT(*) AS n, \
     CAST(SUM(CASE WHEN created_at >= $2 THEN 1 ELSE 0 END) AS BIGINT) AS today \
     FROM intents WHERE created_at >= $1 GROUP BY asset, network, status";

impl Store {
    /// Intents made since `from_ms`, by method and status, with those made
    /// since `today_ms` counted apart.
    pub(crate) async fn intents_made_since(
        &self,
        from_ms: i64,
        today_ms: i64,
    ) -> Result<Vec<IntentTally>, StoreError> {
        let rows = sqlx::query(INTENTS_SINCE)
            .bind(from_ms)
            .bind(today_ms)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(IntentTally {
                    asset: r.try_get("asset")?,
                    network: r.try_get("network")?,
                    status: r.try_get("status")?,
                    since_start: r.try_get("n")?,
                    today: r.try_get::<Option<i64>, _>("today")?.unwrap_or(0),
                })
            })
            .collect()
    }

    /// Intents made per `bucket_ms` since `from_ms` (bucket 0 first;
    /// buckets with none are absent).
    pub(crate) async fn intents_made_per_bucket(
        &self,
        from_ms: i64,
        bucket_ms: i64,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT (created_at - $1) / $2 AS bucket, COUNT(*) AS n FROM intents \
             WHERE created_at >= $1 GROUP BY (created_at - $1) / $2 ORDER BY bucket",
        )
        .bind(from_ms)
        .bind(bucket_ms)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("bucket")?, r.try_get("n")?)))
            .collect()
    }

    /// Settlements standing (not reversed) made since `from_ms`, by method,
    /// with those since `today_ms` apart.
    pub(crate) async fn settled_since(
        &self,
        from_ms: i64,
        today_ms: i64,
    ) -> Result<Vec<SettledTally>, StoreError> {
        let rows = sqlx::query(
            "SELECT i.asset, i.network, COUNT(*) AS n, CAST(SUM(s.usd_cents) AS BIGINT) AS cents, \
             CAST(SUM(CASE WHEN s.settled_at >= $2 THEN 1 ELSE 0 END) AS BIGINT) AS today_n, \
             CAST(SUM(CASE WHEN s.settled_at >= $2 THEN s.usd_cents ELSE 0 END) AS BIGINT) AS today_cents \
             FROM settlements s LEFT JOIN intents i ON i.id = s.intent_id \
             WHERE s.settled_at >= $1 AND s.reversed_at IS NULL \
             GROUP BY i.asset, i.network ORDER BY i.network, i.asset",
        )
        .bind(from_ms)
        .bind(today_ms)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let asset: Option<String> = r.try_get("asset")?;
                let network: Option<String> = r.try_get("network")?;
                Ok(SettledTally {
                    method: asset.zip(network),
                    count: r.try_get("n")?,
                    usd_cents: sum(r, "cents")?,
                    today_count: sum(r, "today_n")?,
                    today_usd_cents: sum(r, "today_cents")?,
                })
            })
            .collect()
    }

    /// USD cents settled (and standing) per `bucket_ms` since `from_ms`.
    pub(crate) async fn settled_per_bucket(
        &self,
        from_ms: i64,
        bucket_ms: i64,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT (settled_at - $1) / $2 AS bucket, CAST(SUM(usd_cents) AS BIGINT) AS cents FROM settlements \
             WHERE settled_at >= $1 AND reversed_at IS NULL \
             GROUP BY (settled_at - $1) / $2 ORDER BY bucket",
        )
        .bind(from_ms)
        .bind(bucket_ms)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("bucket")?, sum(r, "cents")?)))
            .collect()
    }

    /// How many cases wait for review, and since when the oldest has.
    pub(crate) async fn review_queue_size(&self) -> Result<QueueSize, StoreError> {
        let r = sqlx::query(
            "SELECT COUNT(*) AS n, MIN(updated_at) AS oldest FROM intents \
             WHERE status = 'needs_review'",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(QueueSize {
            waiting: r.try_get("n")?,
            oldest_since_ms: r.try_get("oldest")?,
        })
    }
}

/// A SUM cast to BIGINT (PostgreSQL sums BIGINT as NUMERIC); NULL over no
/// rows reads as 0.
fn sum(r: &sqlx::any::AnyRow, column: &str) -> Result<i64, StoreError> {
    Ok(r.try_get::<Option<i64>, _>(column)?.unwrap_or(0))
}

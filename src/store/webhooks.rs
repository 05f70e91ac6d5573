//! Webhook delivery state (`webhook_deliveries`, one row per outbox row).
//!
//! A send is claimed by moving the row's `next_attempt_at` to the end of a
//! lease, in a short transaction; the HTTP request runs outside any
//! transaction, so no database lock is held while a receiver is slow. The
//! lease end is the claim's token: a result is recorded only if the row
//! still holds it, so a late answer can undo neither a newer claim nor an
//! operator's redelivery.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::{json, Col, Store, StoreError};

/// An open row that no open row of the same order or top-up with a lower
/// feed cursor precedes: its events go out one at a time, in commit order,
/// whichever of its intents they are about. (A debit that paid no order
/// names none, and waits for nothing.)
const OPEN_HEAD: &str = "d.delivered_at IS NULL AND NOT EXISTS (\
    SELECT 1 FROM webhook_deliveries e WHERE e.delivered_at IS NULL \
    AND e.kind = d.kind AND e.reference = d.reference AND e.seq < d.seq)";

const DELIVERY_COLUMNS: &str = "d.outbox_id, d.intent_id, o.topic, o.payload, o.created_at, \
    d.attempts, d.failures, d.next_attempt_at, d.last_attempt_at, d.last_status, \
    d.last_error, d.delivered_at";

fn delivery_sql() -> String {
    format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d \
         JOIN outbox o ON o.id = d.outbox_id WHERE d.outbox_id = $1"
    )
}

/// Where a delivery stands, as operators filter them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Not sent yet, in flight, or asked to be sent again; no failure since.
    Pending,
    /// Not delivered, and the last attempt failed: waiting for its retry.
    Failing,
    Delivered,
}

impl DeliveryState {
    pub fn parse(s: &str) -> Option<DeliveryState> {
        match s {
            "pending" => Some(DeliveryState::Pending),
            "failing" => Some(DeliveryState::Failing),
            "delivered" => Some(DeliveryState::Delivered),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Failing => "failing",
            DeliveryState::Delivered => "delivered",
        }
    }
}

/// One outbox row's delivery, with the row itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookDelivery {
    pub outbox_id: i64,
    pub intent_id: Option<i64>,
    pub topic: String,
    /// The JSON body sent, byte for byte as the outbox holds it.
    pub payload: String,
    pub created_at_ms: i64,
    /// Sends begun, ever.
    pub attempts: i64,
    /// Failures since the last success or redelivery.
    pub failures: i64,
    pub next_attempt_at_ms: i64,
    pub last_attempt_at_ms: Option<i64>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub delivered_at_ms: Option<i64>,
}

impl WebhookDelivery {
    pub fn state(&self) -> DeliveryState {
        if self.delivered_at_ms.is_some() {
            DeliveryState::Delivered
        } else if self.failures > 0 {
            DeliveryState::Failing
        } else {
            DeliveryState::Pending
        }
    }

    fn from_row(r: &AnyRow) -> Result<WebhookDelivery, StoreError> {
        Ok(WebhookDelivery {
            outbox_id: r.try_get("outbox_id")?,
            intent_id: r.try_get("intent_id")?,
            topic: r.try_get("topic")?,
            payload: r.try_get("payload")?,
            created_at_ms: r.try_get("created_at")?,
            attempts: r.try_get("attempts")?,
            failures: r.try_get("failures")?,
            next_attempt_at_ms: r.try_get("next_attempt_at")?,
            last_attempt_at_ms: r.try_get("last_attempt_at")?,
            last_status: r.try_get("last_status")?,
            last_error: r.try_get("last_error")?,
            delivered_at_ms: r.try_get("delivered_at")?,
        })
    }
}

/// A row claimed for one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimedDelivery {
    pub outbox_id: i64,
    pub payload: String,
    /// Failures before this attempt.
    pub failures: i64,
    /// The claim's token: the lease end written to `next_attempt_at`.
    pub lease_until_ms: i64,
}

impl Store {
    /// Claims up to `limit` due rows, oldest first, at most one per order or top-up,
    /// until `lease_until_ms`. Rows another instance is claiming are skipped.
    pub(crate) async fn claim_webhook_deliveries(
        &self,
        now_ms: i64,
        lease_until_ms: i64,
        limit: i64,
    ) -> Result<Vec<ClaimedDelivery>, StoreError> {
        let mut tx = self.begin().await?;
        let sql = self.sql(&format!(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, last_attempt_at = $1, \
             next_attempt_at = $2 WHERE outbox_id IN (\
               SELECT d.outbox_id FROM webhook_deliveries d \
               WHERE {OPEN_HEAD} AND d.next_attempt_at <= $1 \
               ORDER BY d.outbox_id LIMIT $3 SKIP_LOCKED) \
             RETURNING outbox_id, failures"
        ));
        let mut claimed: Vec<(i64, i64)> = Vec::new();
        for r in sqlx::query(&sql)
            .bind(now_ms)
            .bind(lease_until_ms)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?
        {
            claimed.push((r.try_get("outbox_id")?, r.try_get("failures")?));
        }
        if claimed.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        #[derive(Serialize)]
        struct Id {
            id: i64,
        }
        let ids: Vec<Id> = claimed.iter().map(|(id, _)| Id { id: *id }).collect();
        let sql = format!(
            "SELECT o.id, o.payload FROM outbox o JOIN {} ON o.id = v.id",
            self.dialect().rowset("$1", &[("id", Col::Int)])
        );
        let mut payloads = std::collections::HashMap::new();
        for r in sqlx::query(&sql)
            .bind(json(&ids)?)
            .fetch_all(&mut *tx)
            .await?
        {
            payloads.insert(
                r.try_get::<i64, _>("id")?,
                r.try_get::<String, _>("payload")?,
            );
        }
        tx.commit().await?;
        claimed.sort_unstable();
        claimed
            .into_iter()
            .map(|(outbox_id, failures)| {
                let payload = payloads.remove(&outbox_id).ok_or_else(|| {
                    StoreError::Corrupt(format!("webhook delivery {outbox_id} has no outbox row"))
                })?;
                Ok(ClaimedDelivery {
                    outbox_id,
                    payload,
                    failures,
                    lease_until_ms,
                })
            })
            .collect()
    }

    /// Records a 2xx. False when the claim was overtaken (see the module).
    pub(crate) async fn record_webhook_delivered(
        &self,
        claim: &ClaimedDelivery,
        status: u16,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET delivered_at = $3, last_status = $4, failures = 0, \
             next_attempt_at = $3 \
             WHERE outbox_id = $1 AND next_attempt_at = $2 AND delivered_at IS NULL",
        )
        .bind(claim.outbox_id)
        .bind(claim.lease_until_ms)
        .bind(now_ms)
        .bind(i64::from(status))
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(done == 1)
    }

    /// Records a failed attempt and when to try again. The last error is
    /// kept after a later success: it says why the delivery was late.
    pub(crate) async fn record_webhook_failure(
        &self,
        claim: &ClaimedDelivery,
        status: Option<u16>,
        error: &str,
        retry_at_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET failures = failures + 1, last_status = $3, \
             last_error = $4, next_attempt_at = $5 \
             WHERE outbox_id = $1 AND next_attempt_at = $2 AND delivered_at IS NULL",
        )
        .bind(claim.outbox_id)
        .bind(claim.lease_until_ms)
        .bind(status.map(i64::from))
        .bind(error)
        .bind(retry_at_ms)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(done == 1)
    }

    /// Records that webhooks are configured, once: from now on every new
    /// event is enrolled for delivery. The first time, the feed's cursor is
    /// taken under its lock (no event is half-written meanwhile), and rows an
    /// older release enrolled before any endpoint existed, never attempted,
    /// are dropped: a receiver configured today is not sent the history.
    /// Returns what the first registration dropped, or `None` when an
    /// endpoint was registered before.
    pub async fn register_webhook_endpoint(&self, now_ms: i64) -> Result<Option<u64>, StoreError> {
        let mut tx = self.begin().await?;
        self.lock_feed(&mut tx).await?;
        let made = sqlx::query(
            "INSERT INTO webhook_endpoint (one, since_seq, configured_at) \
             SELECT 1, COALESCE(MAX(seq), 0), $1 FROM outbox WHERE true \
             ON CONFLICT (one) DO NOTHING",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if made == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let dropped = sqlx::query(
            "DELETE FROM webhook_deliveries WHERE delivered_at IS NULL AND attempts = 0 \
             AND outbox_id IN (SELECT id FROM outbox \
                 WHERE seq <= (SELECT since_seq FROM webhook_endpoint))",
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(Some(dropped))
    }

    /// When the next row becomes due (it may be now), if any is open.
    pub(crate) async fn next_webhook_due(&self) -> Result<Option<i64>, StoreError> {
        let sql =
            format!("SELECT MIN(d.next_attempt_at) FROM webhook_deliveries d WHERE {OPEN_HEAD}");
        let row = sqlx::query(&sql).fetch_one(self.pool()).await?;
        Ok(row.try_get::<Option<i64>, _>(0)?)
    }

    /// Makes an outbox row due now, delivered or not, with its failures
    /// forgotten so the retries start short again. Rows written before
    /// webhooks existed are enrolled. `None`: no such outbox row.
    pub async fn redeliver_webhook(
        &self,
        outbox_id: i64,
        now_ms: i64,
    ) -> Result<Option<WebhookDelivery>, StoreError> {
        let mut tx = self.begin().await?;
        let touched = sqlx::query(
            "INSERT INTO webhook_deliveries (outbox_id, intent_id, seq, kind, reference, \
               next_attempt_at) \
             SELECT id, intent_id, seq, kind, reference, $2 FROM outbox WHERE id = $1 \
             ON CONFLICT (outbox_id) DO UPDATE SET next_attempt_at = $2, delivered_at = NULL, \
             failures = 0, seq = excluded.seq, kind = excluded.kind, reference = excluded.reference",
        )
        .bind(outbox_id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if touched == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        // Read before commit: a woken task may have sent it again already
        // by the time a later read ran, and the answer is "reset", not that.
        let row = sqlx::query(&delivery_sql())
            .bind(outbox_id)
            .fetch_optional(&mut *tx)
            .await?;
        // Wakes delivery tasks listening on PostgreSQL, at commit.
        self.notify_webhooks(&mut tx).await?;
        tx.commit().await?;
        row.as_ref().map(WebhookDelivery::from_row).transpose()
    }

    pub async fn webhook_delivery(
        &self,
        outbox_id: i64,
    ) -> Result<Option<WebhookDelivery>, StoreError> {
        let row = sqlx::query(&delivery_sql())
            .bind(outbox_id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(WebhookDelivery::from_row).transpose()
    }

    /// Deliveries in `state`: delivered ones newest first, the others
    /// oldest first (the order they are sent in).
    pub async fn webhook_deliveries(
        &self,
        state: DeliveryState,
        limit: i64,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        let (filter, order) = match state {
            DeliveryState::Pending => ("d.delivered_at IS NULL AND d.failures = 0", "ASC"),
            DeliveryState::Failing => ("d.delivered_at IS NULL AND d.failures > 0", "ASC"),
            DeliveryState::Delivered => ("d.delivered_at IS NOT NULL", "DESC"),
        };
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d \
             JOIN outbox o ON o.id = d.outbox_id WHERE {filter} \
             ORDER BY d.outbox_id {order} LIMIT $1"
        );
        let rows = sqlx::query(&sql).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(WebhookDelivery::from_row).collect()
    }
}

//! The statements behind `paywatch restore-check`: after a restore, moving
//! every issuing counter past what the lost window could have handed out.
//! [`crate::restore`] decides how far; this writes it.

use paywatch_core::Network;
use sqlx::Row;

use super::{Dialect, Store, StoreError, Tx};

/// Tables whose ids a storefront, a webhook receiver or a support agent may
/// keep: intents, their history and declarations, the feed's rows (the
/// outbox id is the `Paywatch-Delivery` header), ledger entries, transfers
/// (named in reasons), decisions and the audit log, rescans. Internal tables
/// (addresses, the reconcile queue) may reuse theirs.
pub(crate) const KEPT_IDS: [&str; 9] = [
    "intents",
    "intent_events",
    "payment_declarations",
    "outbox",
    "ledger_entries",
    "transfers",
    "decisions",
    "audit_log",
    "rescan_requests",
];

/// A network's issuing so far, as the restored copy knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issuing {
    pub network: Network,
    /// The most addresses it issued in any one hour.
    pub peak_per_hour: i64,
    /// Pool addresses never issued.
    pub free_pool: i64,
    /// The next derivation index, when it derives.
    pub next_index: Option<i64>,
}

impl Store {
    /// The newest moment the database holds a trace of: anything after it
    /// was lost with the restore.
    pub(crate) async fn newest_trace(&self, tx: &mut Tx) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT MAX(t) AS t FROM ( \
               SELECT MAX(created_at) AS t FROM intents \
               UNION ALL SELECT MAX(at) FROM intent_events \
               UNION ALL SELECT MAX(created_at) FROM outbox \
               UNION ALL SELECT MAX(created_at) FROM ledger_entries \
               UNION ALL SELECT MAX(issued_at) FROM addresses \
             ) traces",
        )
        .fetch_one(&mut **tx)
        .await?;
        Ok(row.try_get("t")?)
    }

    /// Every network that issues addresses, from a pool or by derivation.
    pub(crate) async fn issuing(&self, tx: &mut Tx) -> Result<Vec<Issuing>, StoreError> {
        let rows = sqlx::query(
            "SELECT n.network, \
               COALESCE((SELECT MAX(per_hour) FROM ( \
                   SELECT COUNT(*) AS per_hour FROM addresses a \
                   WHERE a.network = n.network AND a.issued_at IS NOT NULL \
                     AND a.lost_window_at IS NULL \
                   GROUP BY a.issued_at / 3600000) hours), 0) AS peak, \
               (SELECT COUNT(*) FROM addresses f \
                 WHERE f.network = n.network AND f.issued_at IS NULL) AS free_pool, \
               (SELECT d.next_index FROM address_derivation d \
                 WHERE d.network = n.network) AS next_index \
             FROM (SELECT network FROM addresses UNION SELECT network FROM address_derivation) n \
             ORDER BY n.network",
        )
        .fetch_all(&mut **tx)
        .await?;
        rows.iter()
            .map(|r| {
                let name: String = r.try_get("network")?;
                Ok(Issuing {
                    network: name
                        .parse()
                        .map_err(|_| StoreError::Corrupt(format!("network {name:?}")))?,
                    peak_per_hour: r.try_get("peak")?,
                    free_pool: r.try_get("free_pool")?,
                    next_index: r.try_get("next_index")?,
                })
            })
            .collect()
    }

    /// Marks the `n` pool addresses the pool would have issued next (oldest
    /// first, as [`Store::take_pool_address`] does) as issued in a lost
    /// window, and returns them.
    pub(crate) async fn mark_pool_lost(
        &self,
        tx: &mut Tx,
        network: Network,
        n: i64,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "UPDATE addresses SET issued_at = $2, lost_window_at = $2 \
             WHERE id IN (SELECT id FROM addresses WHERE network = $1 AND issued_at IS NULL \
                          ORDER BY id LIMIT $3) \
             RETURNING address",
        )
        .bind(network.as_str())
        .bind(now_ms)
        .bind(n)
        .fetch_all(&mut **tx)
        .await?;
        rows.iter().map(|r| Ok(r.try_get("address")?)).collect()
    }

    /// Records a derived address the lost window could have issued: watched,
    /// never issued again. `false` when the address was already known.
    pub(crate) async fn insert_lost_derived_address(
        &self,
        tx: &mut Tx,
        network: Network,
        address: &str,
        index: i64,
        fingerprint: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let added = sqlx::query(
            "INSERT INTO addresses \
               (network, address, origin, derivation_index, key_fingerprint, added_at, issued_at, \
                lost_window_at) \
             VALUES ($1, $2, 'derived', $3, $5, $4, $4, $4) \
             ON CONFLICT (network, address) DO NOTHING",
        )
        .bind(network.as_str())
        .bind(address)
        .bind(index)
        .bind(now_ms)
        .bind(fingerprint)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        Ok(added == 1)
    }

    /// Moves a network's derivation counter to `next_index` (never back).
    pub(crate) async fn raise_derivation_index(
        &self,
        tx: &mut Tx,
        network: Network,
        next_index: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE address_derivation SET next_index = $2 \
             WHERE network = $1 AND next_index < $2",
        )
        .bind(network.as_str())
        .bind(next_index)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Moves `table`'s id counter `gap` past both its counter and its
    /// highest row, and returns the next id it will give.
    pub(crate) async fn jump_ids(
        &self,
        tx: &mut Tx,
        table: &'static str,
        gap: i64,
    ) -> Result<i64, StoreError> {
        debug_assert!(KEPT_IDS.contains(&table));
        let highest: i64 = sqlx::query_scalar(&format!(
            "SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM {table}"
        ))
        .fetch_one(&mut **tx)
        .await?;
        match self.dialect() {
            Dialect::Postgres => {
                let sequence: String =
                    sqlx::query_scalar("SELECT pg_get_serial_sequence($1, 'id')")
                        .bind(table)
                        .fetch_one(&mut **tx)
                        .await?;
                // nextval: the counter may stand above the highest row (a
                // rolled back insert), and is what the next insert reads.
                let counter: i64 = sqlx::query_scalar("SELECT nextval(CAST($1 AS regclass))")
                    .bind(&sequence)
                    .fetch_one(&mut **tx)
                    .await?;
                let last = counter.max(highest) + gap;
                sqlx::query("SELECT setval(CAST($1 AS regclass), $2)")
                    .bind(&sequence)
                    .bind(last)
                    .execute(&mut **tx)
                    .await?;
                Ok(last + 1)
            }
            Dialect::Sqlite => {
                // AUTOINCREMENT tables keep their counter in sqlite_sequence,
                // which may be written like any table.
                let counter: Option<i64> =
                    sqlx::query_scalar("SELECT seq FROM sqlite_sequence WHERE name = $1")
                        .bind(table)
                        .fetch_optional(&mut **tx)
                        .await?;
                let last = counter.unwrap_or(0).max(highest) + gap;
                let sql = if counter.is_some() {
                    "UPDATE sqlite_sequence SET seq = $2 WHERE name = $1"
                } else {
                    "INSERT INTO sqlite_sequence (name, seq) VALUES ($1, $2)"
                };
                sqlx::query(sql)
                    .bind(table)
                    .bind(last)
                    .execute(&mut **tx)
                    .await?;
                Ok(last + 1)
            }
        }
    }

    /// The feed's next cursor after the jump: `gap` past every cursor drawn.
    pub(crate) async fn jump_feed(&self, tx: &mut Tx, gap: i64) -> Result<i64, StoreError> {
        self.lock_feed(tx).await?;
        let highest: i64 =
            sqlx::query_scalar("SELECT CAST(COALESCE(MAX(seq), 0) AS BIGINT) FROM outbox")
                .fetch_one(&mut **tx)
                .await?;
        match self.dialect() {
            Dialect::Postgres => {
                let counter: i64 = sqlx::query_scalar("SELECT nextval('outbox_seq')")
                    .fetch_one(&mut **tx)
                    .await?;
                let last = counter.max(highest) + gap;
                sqlx::query("SELECT setval('outbox_seq', $1)")
                    .bind(last)
                    .execute(&mut **tx)
                    .await?;
                Ok(last + 1)
            }
            // SQLite draws the next cursor from the highest row: the event
            // announcing the restore is written at this cursor, and holds
            // every later one above it.
            Dialect::Sqlite => Ok(highest + gap + 1),
        }
    }

    /// Records what a restore-check did; returns its id.
    pub(crate) async fn record_restore(
        &self,
        tx: &mut Tx,
        now_ms: i64,
        lost_since_ms: i64,
        gap: i64,
        report: &str,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO restores (checked_at, lost_since, id_gap, report) \
             VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .bind(now_ms)
        .bind(lost_since_ms)
        .bind(gap)
        .bind(report)
        .fetch_one(&mut **tx)
        .await?;
        Ok(row.try_get("id")?)
    }

    /// The watcher leases held now, by the database's clock as leases are
    /// granted: each is an instance running.
    pub(crate) async fn live_leases(
        &self,
        tx: &mut Tx,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let sql = self.sql(
            "SELECT network, holder FROM watcher_leases WHERE expires_at >= DB_NOW_MS \
             ORDER BY network",
        );
        let rows = sqlx::query(&sql).fetch_all(&mut **tx).await?;
        rows.iter()
            .map(|r| Ok((r.try_get("network")?, r.try_get("holder")?)))
            .collect()
    }
}

/// A payment to an address a lost window may have issued: no intent here
/// knows it, so a person attributes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostWindowTransfer {
    pub transfer_id: i64,
    pub network: String,
    pub asset: String,
    pub txid: String,
    pub to_address: String,
    pub amount: String,
    pub block_height: i64,
    pub marked_at_ms: i64,
}

impl Store {
    /// Transfers, not orphaned, to addresses a restore-check marked as
    /// issued in a lost window, oldest first.
    pub async fn lost_window_transfers(
        &self,
        limit: i64,
    ) -> Result<Vec<LostWindowTransfer>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.id, t.network, t.asset, t.txid, t.to_address, \
                    CAST(t.amount AS TEXT) AS amount, t.block_height, a.lost_window_at \
             FROM transfers t \
             JOIN addresses a ON a.network = t.network AND a.address = t.to_address \
             WHERE a.lost_window_at IS NOT NULL AND t.orphaned_at IS NULL \
               AND t.tx_status = 'success' \
             ORDER BY t.id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(LostWindowTransfer {
                    transfer_id: r.try_get("id")?,
                    network: r.try_get("network")?,
                    asset: r.try_get("asset")?,
                    txid: r.try_get("txid")?,
                    to_address: r.try_get("to_address")?,
                    amount: r.try_get("amount")?,
                    block_height: r.try_get("block_height")?,
                    marked_at_ms: r.try_get("lost_window_at")?,
                })
            })
            .collect()
    }
}

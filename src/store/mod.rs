//! The database: PostgreSQL in production (shared with the storefront) and
//! SQLite embedded. One implementation serves both through sqlx's `Any`
//! driver; the few places where the dialects differ are spelled out in
//! [`Dialect`], so the same queries, and the same story tests, run on both.

mod addresses;
mod backup;
mod balance_gaps;
mod blocks;
mod cases;
mod contract;
mod cursor;
mod decisions;
mod dialect;
mod dormancy;
mod error;
mod export;
mod facts;
mod feed;
mod feed_wake;
mod finality;
mod gaps;
#[doc(hidden)]
pub mod hot_queries;
#[cfg(test)]
mod index_use;
mod intents;
mod invariants;
mod keys;
mod leases;
mod ledger;
mod metrics_read;
mod migrations;
mod money_settings;
mod overview;
mod pruning;
mod queue;
mod refunds;
mod rescan;
mod restore;
mod run_lock;
mod samples;
mod sessions;
mod settlement_payments;
mod settlements;
mod spam;
mod transfers;
mod tx;
mod unconfirmed;
mod unread;
mod verdicts;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Executor, Row};

pub use addresses::ImportReport;
pub use balance_gaps::BalanceGap;
pub(crate) use balance_gaps::{Finding, WatchedAddress};
pub use cases::{AuditEntry, CaseTransfer, RefundRecord};
pub use cursor::{ApplyOutcome, ChainStatus};
pub(crate) use decisions::{DecisionPayment, NewAudit, NewDecision, PaymentKey};
pub(crate) use dialect::Col;
pub use dialect::Dialect;
pub use error::StoreError;
pub use export::{ExportKey, SettlementLine};
pub(crate) use facts::{DecisionRow, Facts, SettlementRow};
pub use feed::FeedEvent;
pub use gaps::{ChainGap, GapRefusal};
pub use intents::{
    Declared, IntentEvent, IntentRecord, NewIntentRow, SettlementRecord, MAX_DECLARATIONS,
};
pub use invariants::{LedgerCheck, Violation};
pub use keys::DerivationCounter;
pub use leases::{Lease, LeaseHolder};
pub use ledger::{AccountBalance, LedgerEntry};
pub use money_settings::PinnedMoney;
pub(crate) use overview::{IntentTally, SettledTally};
pub(crate) use refunds::RefundCheckWrite;
pub use refunds::RefundRow;
pub(crate) use rescan::RescanProgress;
pub use rescan::{RescanOutcome, RescanRefusal, RescanRequest};
pub use restore::LostWindowTransfer;
pub(crate) use restore::KEPT_IDS;
pub use run_lock::{RunLock, RunLockError};
pub use samples::ChainSample;
pub(crate) use settlement_payments::SettlementNames;
pub(crate) use settlements::{
    LedgerPosting, NewSettlement, OutboxEvent, FEED_CHANNEL, WEBHOOK_CHANNEL,
};
pub use spam::SpamTransfer;
pub use transfers::TransferRecord;
pub use unconfirmed::{MEMPOOL_BLOCK, MEMPOOL_HEIGHT};
pub(crate) use verdicts::VerdictWrite;
pub(crate) use webhooks::ClaimedDelivery;
pub use webhooks::{DeliveryState, WebhookDelivery};

pub(crate) use feed_wake::FeedWake;
use tx::FeedBell;
pub(crate) use tx::Tx;

/// A handle on the shared database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    /// Set on a watcher's handle: its transactions check the lease first.
    fence: Option<Lease>,
    /// Tests only: where a reconcile pass stops between its reads.
    read_pause: Option<ReadPause>,
    /// Rung when a transaction that wrote feed events commits.
    bell: Arc<FeedBell>,
}

/// A point a test can stop a reconcile pass at, between reading the
/// transfers and reading the final heights, to commit a change meanwhile
/// and show the pass still reads one state.
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct ReadPause {
    /// Notified when a pass has read the transfers.
    pub reached: std::sync::Arc<tokio::sync::Notify>,
    /// The pass goes on once notified.
    pub resume: std::sync::Arc<tokio::sync::Notify>,
}

impl Store {
    /// Connects to `url` (`postgres://…` or `sqlite://…`). SQLite files are
    /// created when missing.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::from_url(url)?;
        // No ping before each acquire: sqlx already pings every connection
        // when it is released and drops a broken one, so a second ping on
        // acquire only added a round trip to every one-query read. A
        // connection that breaks while idle fails its next query, which the
        // caller retries like any other database outage.
        let options = AnyPoolOptions::new()
            .acquire_timeout(Duration::from_secs(30))
            .test_before_acquire(false);
        let pool = match dialect {
            Dialect::Postgres => {
                options
                    .max_connections(10)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            // No transaction of ours waits on anything outside
                            // the database. One left open is a process stopped
                            // (SIGSTOP, a frozen VM) while holding row locks:
                            // the server ends it, so other instances, and a
                            // takeover of its watcher lease, are not held up.
                            conn.execute("SET idle_in_transaction_session_timeout = '10s'")
                                .await?;
                            Ok(())
                        })
                    })
                    .connect(url)
                    .await?
            }
            Dialect::Sqlite => {
                options
                    // SQLite has one writer; several connections would only
                    // trade waiting for SQLITE_BUSY.
                    .max_connections(1)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            // FULL: an issued address must survive a power cut,
                            // or it could be issued again.
                            conn.execute(
                                "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
                                 PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 10000;",
                            )
                            .await?;
                            Ok(())
                        })
                    })
                    .connect(&sqlite_url_creating_file(url))
                    .await?
            }
        };
        Ok(Store {
            pool,
            dialect,
            fence: None,
            read_pause: None,
            bell: Arc::default(),
        })
    }

    /// Applies every migration not yet applied. Safe to call at each start.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        migrations::run(&self.pool, self.dialect).await?;
        self.backfill_twin_addresses().await?;
        self.backfill_amount_short().await?;
        self.comment_contract().await
    }

    /// Checks, changing nothing, that the schema is at least this binary's:
    /// for commands that only read. A newer schema is fine (migrations only
    /// add within a release's compatibility window).
    pub async fn require_current_schema(&self) -> Result<(), StoreError> {
        let need = migrations::latest(self.dialect);
        let at = migrations::applied(&self.pool).await?;
        if at.is_some_and(|v| v >= need) {
            Ok(())
        } else {
            Err(StoreError::SchemaBehind { at, need })
        }
    }

    /// Applies every migration to a database with none; otherwise the same
    /// as [`Store::require_current_schema`].
    pub async fn create_or_require_current_schema(&self) -> Result<(), StoreError> {
        match migrations::applied(&self.pool).await? {
            None => self.migrate().await,
            Some(_) => self.require_current_schema().await,
        }
    }

    /// Tests only: the schema as the release with migrations up to
    /// `version` left it.
    #[doc(hidden)]
    pub async fn migrate_until(&self, version: i64) -> Result<(), StoreError> {
        migrations::run_until(&self.pool, self.dialect, version).await
    }

    /// Intents with money final before `amount_short` existed get it, on
    /// SQLite (PostgreSQL's migration works it out in SQL): SQLite cannot
    /// subtract amounts beyond 64 bits exactly. Only rows still missing it
    /// with money final are touched, so this is cheap at every start.
    async fn backfill_amount_short(&self) -> Result<(), StoreError> {
        let rows = sqlx::query(
            "SELECT id, CAST(amount_due AS TEXT) AS amount_due, \
                    CAST(amount_final AS TEXT) AS amount_final FROM intents \
             WHERE amount_short IS NULL AND CAST(amount_final AS TEXT) <> '0'",
        )
        .fetch_all(&self.pool)
        .await?;
        for r in rows {
            let id: i64 = r.try_get("id")?;
            let short =
                amount_col(&r, "amount_due")?.saturating_sub(amount_col(&r, "amount_final")?);
            sqlx::query(&self.sql("UPDATE intents SET amount_short = NUM($1) WHERE id = $2"))
                .bind(short.to_string())
                .bind(id)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// Intents issued before twin addresses were kept get theirs: the
    /// encoding lives in the chain crates, not in SQL. Only rows still
    /// missing one are touched, so this is cheap at every start.
    async fn backfill_twin_addresses(&self) -> Result<(), StoreError> {
        let rows = sqlx::query(
            "SELECT id, network, address FROM intents \
             WHERE twin_address IS NULL AND network IN ('ethereum', 'tron')",
        )
        .fetch_all(&self.pool)
        .await?;
        for r in rows {
            let id: i64 = r.try_get("id")?;
            let network: String = r.try_get("network")?;
            let address: String = r.try_get("address")?;
            let Some((_, twin)) = network
                .parse()
                .ok()
                .and_then(|n| crate::twin::twin(n, &address))
            else {
                continue;
            };
            sqlx::query("UPDATE intents SET twin_address = $1 WHERE id = $2")
                .bind(twin)
                .bind(id)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// Tests only: a handle whose reconcile passes stop at `pause`.
    #[doc(hidden)]
    pub fn pausing_reads(&self, pause: ReadPause) -> Store {
        Store {
            read_pause: Some(pause),
            ..self.clone()
        }
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A write transaction. SQLite takes the write lock up front so two
    /// writers queue instead of failing half-way with SQLITE_BUSY.
    /// On a [`fenced`](Self::fenced) handle the lease is checked before
    /// anything else, so no write of a former holder lands.
    pub(crate) async fn begin(&self) -> Result<Tx, StoreError> {
        let mut tx = Tx::new(match self.dialect {
            Dialect::Postgres => self.pool.begin().await?,
            Dialect::Sqlite => match self.pool.begin_with("BEGIN IMMEDIATE").await {
                // A COMMIT that failed (SQLITE_FULL on a full disk) is rolled
                // back by SQLite itself; sqlx's own ROLLBACK then fails, and
                // the connection goes on believing a transaction is open,
                // refusing every BEGIN. With one connection that would stop
                // every write for good, disk freed or not: close it, and
                // the pool opens a clean one.
                Err(sqlx::Error::InvalidSavePointStatement) => {
                    let mut stale = self.pool.acquire().await?;
                    stale.close_on_drop();
                    drop(stale);
                    self.pool.begin_with("BEGIN IMMEDIATE").await?
                }
                other => other?,
            },
        });
        if let Some(lease) = &self.fence {
            self.check_fence(&mut tx, lease).await?;
        }
        Ok(tx)
    }

    /// A write transaction that reads one snapshot: on PostgreSQL, REPEATABLE
    /// READ, so every statement of a reconcile pass sees the same committed
    /// state (transfers, finality, settlements), never a mix of two. A
    /// transaction that then finds a row changed under it fails with a
    /// serialization error and runs again whole
    /// ([`StoreError::is_retryable_conflict`]). SQLite's one writer, which
    /// takes its lock up front, already reads one state.
    pub(crate) async fn begin_snapshot(&self) -> Result<Tx, StoreError> {
        match self.dialect {
            Dialect::Postgres => Ok(Tx::new(
                self.pool
                    .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    .await?,
            )),
            Dialect::Sqlite => self.begin().await,
        }
    }

    /// Changes each time a transaction of this process that wrote feed
    /// events commits.
    pub(crate) fn feed_bell(&self) -> tokio::sync::watch::Receiver<u64> {
        self.bell.listen()
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub(crate) fn sql(&self, template: &str) -> String {
        self.dialect.sql(template)
    }
}

fn sqlite_url_creating_file(url: &str) -> String {
    if url.contains("mode=") || url.contains(":memory:") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}

/// Reads a base-unit amount column that the query cast to TEXT.
pub(crate) fn amount_col(row: &AnyRow, col: &str) -> Result<u128, StoreError> {
    let text: String = row.try_get(col)?;
    text.parse::<u128>().map_err(|_| {
        StoreError::Corrupt(format!(
            "column {col} holds '{text}', not a base-unit integer"
        ))
    })
}

/// A batch as the one JSON parameter of a [`Dialect::rowset`].
pub(crate) fn json<T: serde::Serialize + ?Sized>(rows: &T) -> Result<String, StoreError> {
    serde_json::to_string(rows).map_err(|e| StoreError::Corrupt(format!("batch encoding: {e}")))
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Store {
    /// Runs one statement outside any transaction (tests and admin tasks).
    pub async fn execute_raw(&self, sql: &str) -> Result<u64, StoreError> {
        Ok(sqlx::query(sql).execute(&self.pool).await?.rows_affected())
    }

    /// The database's own clock, in Unix milliseconds.
    pub async fn database_now_ms(&self) -> Result<i64, StoreError> {
        let sql = self.sql("SELECT DB_NOW_MS AS now");
        Ok(sqlx::query(&sql)
            .fetch_one(&self.pool)
            .await?
            .try_get("now")?)
    }

    /// The first column of the first row, as an integer: `SELECT COUNT(*) …`.
    pub async fn count_raw(&self, sql: &str) -> Result<i64, StoreError> {
        let row = sqlx::query(sql).fetch_one(&self.pool).await?;
        Ok(row.try_get(0)?)
    }
}

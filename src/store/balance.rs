//! Paying from an account's USD balance: an idempotent debit that posts
//! only when the available balance covers all of it.

use sqlx::Row;

use super::{Store, StoreError};

/// What a debit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebitOutcome {
    /// Posted now; the balance after it.
    Posted { balance_cents: i64 },
    /// This key was posted before, for the same account and amount: nothing
    /// was taken again.
    AlreadyPosted { balance_cents: i64 },
    /// Not enough available: nothing was posted.
    Insufficient { balance_cents: i64 },
    /// This key was posted before for another account or amount.
    KeyConflict,
}

impl Store {
    /// Debits `cents` from `account` under the caller's idempotency `key`.
    ///
    /// The account's lock row is taken first, so of two concurrent debits
    /// the second reads the balance the first left (PostgreSQL row lock;
    /// SQLite has one writer at a time).
    pub async fn debit(
        &self,
        account: &str,
        cents: i64,
        key: &str,
        memo: Option<&str>,
        now_ms: i64,
    ) -> Result<DebitOutcome, StoreError> {
        let entry_key = format!("debit:{key}");
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO account_locks (account) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(account)
            .execute(&mut *tx)
            .await?;
        sqlx::query(&self.sql("SELECT account FROM account_locks WHERE account = $1 FOR_UPDATE"))
            .bind(account)
            .fetch_one(&mut *tx)
            .await?;
        let balance: i64 = sqlx::query(
            "SELECT CAST(COALESCE(SUM(usd_cents), 0) AS BIGINT) AS b \
             FROM ledger_entries WHERE account = $1",
        )
        .bind(account)
        .fetch_one(&mut *tx)
        .await?
        .try_get("b")?;
        let earlier =
            sqlx::query("SELECT account, usd_cents FROM ledger_entries WHERE entry_key = $1")
                .bind(&entry_key)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(row) = earlier {
            let (was_account, was_cents): (String, i64) =
                (row.try_get("account")?, row.try_get("usd_cents")?);
            return Ok(if was_account == account && was_cents == -cents {
                DebitOutcome::AlreadyPosted {
                    balance_cents: balance,
                }
            } else {
                DebitOutcome::KeyConflict
            });
        }
        if balance < cents {
            return Ok(DebitOutcome::Insufficient {
                balance_cents: balance,
            });
        }
        sqlx::query(
            "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, created_at, memo) \
             VALUES ($1, $2, 'debit', $3, $4, $5)",
        )
        .bind(account)
        .bind(-cents)
        .bind(&entry_key)
        .bind(now_ms)
        .bind(memo)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(DebitOutcome::Posted {
            balance_cents: balance - cents,
        })
    }
}

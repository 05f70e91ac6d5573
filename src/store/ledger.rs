//! An account's balance and its ledger as the storefront reads them
//! (`paywatch_balances`, `paywatch_ledger`, and the API over them).

use sqlx::Row;

use super::{Store, StoreError};

/// What an account has: available (final) and pending (confirming top-ups).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountBalance {
    pub available_usd_cents: i64,
    pub pending_usd_cents: i64,
    pub entries: i64,
    pub last_entry_at_ms: Option<i64>,
}

/// One ledger entry, with the order or top-up it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub entry_id: i64,
    pub usd_cents: i64,
    /// `topup_credit`, `debit`, `reversal` or `adjustment`.
    pub entry_kind: String,
    pub entry_key: String,
    pub intent_id: Option<i64>,
    pub kind: Option<String>,
    pub reference: Option<String>,
    pub created_at_ms: i64,
}

impl Store {
    /// Any account's balance; zero throughout for one with nothing.
    pub async fn account_balance(&self, account: &str) -> Result<AccountBalance, StoreError> {
        let ledger = sqlx::query(
            "SELECT available_usd_cents, entries, last_entry_at_ms \
             FROM paywatch_balances WHERE account = $1",
        )
        .bind(account)
        .fetch_optional(self.pool())
        .await?;
        // Read apart from the view: an account with no entries yet may
        // already have a top-up confirming.
        let pending: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(usd_cents), 0) AS BIGINT) FROM intents \
             WHERE account = $1 AND kind = 'topup' AND status = 'confirming' \
               AND COALESCE(reason_code, '') <> 'partly_unconfirmed'",
        )
        .bind(account)
        .fetch_one(self.pool())
        .await?;
        let mut b = AccountBalance {
            pending_usd_cents: pending,
            ..AccountBalance::default()
        };
        if let Some(r) = ledger {
            b.available_usd_cents = r.try_get("available_usd_cents")?;
            b.entries = r.try_get("entries")?;
            b.last_entry_at_ms = r.try_get("last_entry_at_ms")?;
        }
        Ok(b)
    }

    /// Up to `limit` of the account's entries after `after`, oldest first.
    pub async fn ledger_entries(
        &self,
        account: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT entry_id, usd_cents, entry_kind, entry_key, intent_id, kind, reference, \
                    created_at_ms \
             FROM paywatch_ledger WHERE account = $1 AND entry_id > $2 \
             ORDER BY entry_id LIMIT $3",
        )
        .bind(account)
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(LedgerEntry {
                    entry_id: r.try_get("entry_id")?,
                    usd_cents: r.try_get("usd_cents")?,
                    entry_kind: r.try_get("entry_kind")?,
                    entry_key: r.try_get("entry_key")?,
                    intent_id: r.try_get("intent_id")?,
                    kind: r.try_get("kind")?,
                    reference: r.try_get("reference")?,
                    created_at_ms: r.try_get("created_at_ms")?,
                })
            })
            .collect()
    }
}

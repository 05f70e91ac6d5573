use paywatch_core::{Amount, Asset, Method, Network};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::{amount_col, Dialect, Store, StoreError, Tx};
use crate::reconcile::{Exception, Outcome, SettledBy, Status};
use crate::IntentKind;

/// An intent as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentRecord {
    pub id: i64,
    pub kind: IntentKind,
    pub reference: String,
    pub account: String,
    pub method: Method,
    pub address: String,
    pub amount_due: Amount,
    pub usd_cents: i64,
    pub rate_usd: String,
    pub rate_source: String,
    pub rate_at_ms: i64,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub status: Status,
    pub exception: Option<Exception>,
    pub reason: Option<String>,
    /// Stable and customer-safe; `None` until the intent's verdict is
    /// first written (or, for intents from before codes, next changes).
    pub reason_code: Option<String>,
    pub amount_final: Amount,
    pub amount_pending: Amount,
    pub amount_excess: Amount,
    pub paid_at_ms: Option<i64>,
    /// The highest transfer row id seen at settlement.
    pub settled_through: Option<i64>,
    pub reversed_at_ms: Option<i64>,
    pub declared_paid_at_ms: Option<i64>,
    /// How support closed it, while resolved or settled by support.
    pub outcome: Option<Outcome>,
    /// Money seen in time must be final by then to settle by itself; `None`
    /// for intents made before the deadline was kept (the configured
    /// window after the expiry applies).
    pub confirm_by_ms: Option<i64>,
    /// Lets a customer's browser read this intent's status and payment
    /// instructions only; `None` for intents made before view tokens.
    pub view_token: Option<String>,
}

/// How a reference was paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementRecord {
    /// `None` for an order paid from the balance.
    pub intent_id: Option<i64>,
    /// `chain`, `support` or `balance`.
    pub via: String,
    pub account: String,
    pub usd_cents: i64,
    pub settled_at_ms: i64,
    pub reversed_at_ms: Option<i64>,
}

/// What intent creation writes.
#[derive(Debug, Clone)]
pub struct NewIntentRow<'a> {
    pub kind: IntentKind,
    pub reference: &'a str,
    pub account: &'a str,
    pub method: Method,
    pub address: &'a str,
    pub amount_due: Amount,
    pub usd_cents: i64,
    pub rate_usd: &'a str,
    pub rate_source: &'a str,
    pub rate_at_ms: i64,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub confirm_by_ms: i64,
    /// The storefront's idempotency key, unique across intents.
    pub create_key: Option<&'a str>,
    pub view_token: &'a str,
}

/// By `intents_by_view_token`. Spelt out, not built from
/// [`INTENT_COLUMNS`], so the index-use test can name it.
pub(crate) const INTENT_BY_VIEW_TOKEN: &str =
    "SELECT id, kind, reference, account, asset, network, \
    address, CAST(amount_due AS TEXT) AS amount_due, usd_cents, rate_usd, rate_source, rate_at, \
    created_at, expires_at, status, exception, reason, reason_code, \
    CAST(amount_final AS TEXT) AS amount_final, CAST(amount_pending AS TEXT) AS amount_pending, \
    CAST(amount_excess AS TEXT) AS amount_excess, paid_at, settled_through, reversed_at, \
    declared_paid_at, outcome, confirm_by, view_token FROM intents WHERE view_token = $1";

/// One line of an intent's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentEvent {
    pub at_ms: i64,
    pub kind: String,
    pub status: Option<String>,
    pub exception: Option<String>,
    pub detail: Option<String>,
}

pub(crate) const INTENT_COLUMNS: &str = "id, kind, reference, account, asset, network, address, \
    CAST(amount_due AS TEXT) AS amount_due, usd_cents, rate_usd, rate_source, rate_at, created_at, \
    expires_at, status, exception, reason, reason_code, CAST(amount_final AS TEXT) AS amount_final, \
    CAST(amount_pending AS TEXT) AS amount_pending, CAST(amount_excess AS TEXT) AS amount_excess, \
    paid_at, settled_through, reversed_at, declared_paid_at, outcome, confirm_by, view_token";

pub(crate) fn intent_from_row(row: &AnyRow) -> Result<IntentRecord, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(what);
    let asset: String = row.try_get("asset")?;
    let network: String = row.try_get("network")?;
    let asset: Asset = asset
        .parse()
        .map_err(|e| corrupt(format!("intent asset: {e}")))?;
    let network: Network = network
        .parse()
        .map_err(|e| corrupt(format!("intent network: {e}")))?;
    let kind: String = row.try_get("kind")?;
    let status: String = row.try_get("status")?;
    let exception: Option<String> = row.try_get("exception")?;
    Ok(IntentRecord {
        id: row.try_get("id")?,
        kind: kind
            .parse()
            .map_err(|e| corrupt(format!("intent kind: {e}")))?,
        reference: row.try_get("reference")?,
        account: row.try_get("account")?,
        method: Method::new(asset, network).map_err(|e| corrupt(e.to_string()))?,
        address: row.try_get("address")?,
        amount_due: Amount(amount_col(row, "amount_due")?),
        usd_cents: row.try_get("usd_cents")?,
        rate_usd: row.try_get("rate_usd")?,
        rate_source: row.try_get("rate_source")?,
        rate_at_ms: row.try_get("rate_at")?,
        created_at_ms: row.try_get("created_at")?,
        expires_at_ms: row.try_get("expires_at")?,
        status: status
            .parse()
            .map_err(|e| corrupt(format!("intent status: {e}")))?,
        exception: exception
            .map(|e| e.parse())
            .transpose()
            .map_err(|e| corrupt(format!("intent exception: {e}")))?,
        reason: row.try_get("reason")?,
        reason_code: row.try_get("reason_code")?,
        amount_final: Amount(amount_col(row, "amount_final")?),
        amount_pending: Amount(amount_col(row, "amount_pending")?),
        amount_excess: Amount(amount_col(row, "amount_excess")?),
        paid_at_ms: row.try_get("paid_at")?,
        settled_through: row.try_get("settled_through")?,
        reversed_at_ms: row.try_get("reversed_at")?,
        declared_paid_at_ms: row.try_get("declared_paid_at")?,
        outcome: row
            .try_get::<Option<String>, _>("outcome")?
            .map(|o| o.parse())
            .transpose()
            .map_err(|e| corrupt(format!("intent outcome: {e}")))?,
        confirm_by_ms: row.try_get("confirm_by")?,
        view_token: row.try_get("view_token")?,
    })
}

/// Declarations of payment kept per intent: the first, and a few more
/// that each say something new.
pub const MAX_DECLARATIONS: i64 = 5;

/// What a customer's "I have paid" came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declared {
    NoSuchIntent,
    /// Recorded now, and the intent's address queued to be looked at.
    Recorded,
    /// Said before (or said too often): nothing was written.
    AlreadyRecorded {
        first_at_ms: i64,
    },
}

impl Store {
    /// Writes a new intent on the address `address_id` (taken in `tx`), with
    /// its first history line, its address linked to it and a reconcile
    /// entry for its first verdict. `None`, writing nothing, when an intent
    /// of the same kind and reference is already settled: checked in the
    /// same statement as the insert, so it costs no round trip of its own.
    pub(crate) async fn insert_intent(
        &self,
        tx: &mut Tx,
        new: &NewIntentRow<'_>,
        address_id: i64,
    ) -> Result<Option<IntentRecord>, StoreError> {
        const INSERT: &str = "INSERT INTO intents (kind, reference, account, asset, network, address, \
             decimals, amount_due, usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, \
             status, updated_at, twin_address, create_key, confirm_by, view_token) \
             SELECT $1, $2, $3, $4, $5, $6, $7, NUM($8), $9, $10, $11, $12, $13, $14, \
             'awaiting_payment', $13, $15, $16, $17, $18 \
             WHERE NOT EXISTS (SELECT 1 FROM settlements WHERE kind = $1 AND reference = $2 \
                               AND reversed_at IS NULL)";
        // On PostgreSQL the four writes are one statement: intent creation is
        // the storefront's hot path, and each statement is a round trip and
        // a parse and plan. SQLite has no writing CTEs, and no network
        // between it and us either.
        let sql = match self.dialect() {
            Dialect::Postgres => self.sql(&format!(
                "WITH i AS ({INSERT} RETURNING *), \
                 q AS (INSERT INTO reconcile_queue (network, address) SELECT network, address FROM i), \
                 e AS (INSERT INTO intent_events (intent_id, at, kind, status) \
                       SELECT id, created_at, 'created', status FROM i), \
                 l AS (UPDATE addresses SET intent_id = i.id FROM i WHERE addresses.id = $19) \
                 SELECT {INTENT_COLUMNS} FROM i"
            )),
            Dialect::Sqlite => self.sql(&format!("{INSERT} RETURNING {INTENT_COLUMNS}")),
        };
        let mut query = sqlx::query(&sql)
            .bind(new.kind.as_str())
            .bind(new.reference)
            .bind(new.account)
            .bind(new.method.asset().as_str())
            .bind(new.method.network().as_str())
            .bind(new.address)
            .bind(i64::from(new.method.decimals()))
            .bind(new.amount_due.to_string())
            .bind(new.usd_cents)
            .bind(new.rate_usd)
            .bind(new.rate_source)
            .bind(new.rate_at_ms)
            .bind(new.created_at_ms)
            .bind(new.expires_at_ms)
            .bind(crate::twin::twin(new.method.network(), new.address).map(|(_, a)| a))
            .bind(new.create_key)
            .bind(new.confirm_by_ms)
            .bind(new.view_token);
        if self.dialect() == Dialect::Postgres {
            query = query.bind(address_id);
        }
        let Some(row) = query.fetch_optional(&mut **tx).await? else {
            return Ok(None);
        };
        let intent = intent_from_row(&row)?;
        if self.dialect() == Dialect::Sqlite {
            // Reconcile gives every new intent its first verdict and reason.
            sqlx::query("INSERT INTO reconcile_queue (network, address) VALUES ($1, $2)")
                .bind(new.method.network().as_str())
                .bind(new.address)
                .execute(&mut **tx)
                .await?;
            self.insert_intent_event(
                tx,
                intent.id,
                new.created_at_ms,
                "created",
                Some(Status::AwaitingPayment),
                None,
                None,
            )
            .await?;
            self.link_address_to_intent(tx, address_id, intent.id)
                .await?;
        }
        Ok(Some(intent))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn insert_intent_event(
        &self,
        tx: &mut Tx,
        intent_id: i64,
        at_ms: i64,
        kind: &str,
        status: Option<Status>,
        exception: Option<Exception>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO intent_events (intent_id, at, kind, status, exception, detail) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(intent_id)
        .bind(at_ms)
        .bind(kind)
        .bind(status.map(|s| s.as_str()))
        .bind(exception.map(|e| e.as_str()))
        .bind(detail)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// The intent created under the storefront's idempotency key `key`.
    pub async fn intent_by_create_key(
        &self,
        key: &str,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let sql = format!("SELECT {INTENT_COLUMNS} FROM intents WHERE create_key = $1");
        let row = sqlx::query(&sql)
            .bind(key)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(intent_from_row).transpose()
    }

    pub async fn intent(&self, id: i64) -> Result<Option<IntentRecord>, StoreError> {
        let sql = format!("SELECT {INTENT_COLUMNS} FROM intents WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(intent_from_row).transpose()
    }

    /// The intent a customer's view token opens, if any.
    pub async fn intent_by_view_token(
        &self,
        token: &str,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let row = sqlx::query(INTENT_BY_VIEW_TOKEN)
            .bind(token)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(intent_from_row).transpose()
    }

    /// Every intent of a reference, oldest first.
    pub async fn intents_for_reference(
        &self,
        kind: IntentKind,
        reference: &str,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE kind = $1 AND reference = $2 ORDER BY id"
        );
        let rows = sqlx::query(&sql)
            .bind(kind.as_str())
            .bind(reference)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// The intent that paid a reference, if an intent did.
    pub async fn settled_intent(
        &self,
        kind: IntentKind,
        reference: &str,
    ) -> Result<Option<i64>, StoreError> {
        Ok(match self.settled_by(kind, reference).await? {
            Some(SettledBy::Intent(id)) => Some(id),
            _ => None,
        })
    }

    /// A reference's settlement, if it has one.
    pub async fn settlement(
        &self,
        kind: IntentKind,
        reference: &str,
    ) -> Result<Option<SettlementRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT intent_id, via, account, usd_cents, settled_at, reversed_at FROM settlements \
             WHERE kind = $1 AND reference = $2",
        )
        .bind(kind.as_str())
        .bind(reference)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(SettlementRecord {
                intent_id: r.try_get("intent_id")?,
                via: r.try_get("via")?,
                account: r.try_get("account")?,
                usd_cents: r.try_get("usd_cents")?,
                settled_at_ms: r.try_get("settled_at")?,
                reversed_at_ms: r.try_get("reversed_at")?,
            })
        })
        .transpose()
    }

    /// What pays a reference: an intent, or the balance. A reversed
    /// settlement pays nothing.
    pub async fn settled_by(
        &self,
        kind: IntentKind,
        reference: &str,
    ) -> Result<Option<SettledBy>, StoreError> {
        let row = sqlx::query(
            "SELECT intent_id FROM settlements WHERE kind = $1 AND reference = $2 \
             AND reversed_at IS NULL",
        )
        .bind(kind.as_str())
        .bind(reference)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(match r.try_get::<Option<i64>, _>("intent_id")? {
                Some(id) => SettledBy::Intent(id),
                None => SettledBy::Balance,
            })
        })
        .transpose()
    }

    pub async fn intent_events(&self, intent_id: i64) -> Result<Vec<IntentEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT at, kind, status, exception, detail FROM intent_events WHERE intent_id = $1 ORDER BY id",
        )
        .bind(intent_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(IntentEvent {
                    at_ms: r.try_get("at")?,
                    kind: r.try_get("kind")?,
                    status: r.try_get("status")?,
                    exception: r.try_get("exception")?,
                    detail: r.try_get("detail")?,
                })
            })
            .collect()
    }

    /// Open intents (awaiting payment or confirming) of one reference, in
    /// `tx`. On PostgreSQL the reference is locked for the rest of `tx`
    /// first, so concurrent creations for it count one after the other
    /// and the cap holds exactly; SQLite's writer is one at a time anyway.
    /// Claims `kind`/`reference` for `account` unless another account owns
    /// it: `Some(owner)` then. The claim is a row whose primary key makes a
    /// concurrent claim wait for this transaction (and, in a snapshot
    /// transaction that cannot see the winner, fail with a serialization
    /// error and run again), so two accounts never both get one reference.
    pub(crate) async fn claim_reference(
        &self,
        tx: &mut Tx,
        kind: IntentKind,
        reference: &str,
        account: &str,
    ) -> Result<Option<String>, StoreError> {
        sqlx::query(
            "INSERT INTO reference_owners (kind, reference, account) VALUES ($1, $2, $3) \
             ON CONFLICT (kind, reference) DO NOTHING",
        )
        .bind(kind.as_str())
        .bind(reference)
        .bind(account)
        .execute(&mut **tx)
        .await?;
        let owner: String = sqlx::query_scalar(
            "SELECT account FROM reference_owners WHERE kind = $1 AND reference = $2",
        )
        .bind(kind.as_str())
        .bind(reference)
        .fetch_one(&mut **tx)
        .await?;
        Ok((owner != account).then_some(owner))
    }

    pub(crate) async fn open_intents_for_reference(
        &self,
        tx: &mut Tx,
        kind: IntentKind,
        reference: &str,
    ) -> Result<usize, StoreError> {
        if self.dialect() == Dialect::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("intent-reference:{}:{reference}", kind.as_str()))
                .execute(&mut **tx)
                .await?;
        }
        let n: i64 = sqlx::query(
            "SELECT COUNT(*) AS n FROM intents WHERE kind = $1 AND reference = $2 \
             AND status IN ('awaiting_payment', 'confirming')",
        )
        .bind(kind.as_str())
        .bind(reference)
        .fetch_one(&mut **tx)
        .await?
        .try_get("n")?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Records a customer's "I have paid". It changes no status: only the
    /// chain can prove a payment; a declaration only makes the intent's address be looked at now. A repeat (no note,
    /// or a note already given) writes nothing, and at most
    /// [`MAX_DECLARATIONS`] are kept per intent, so a caller who repeats it
    /// cannot grow the tables.
    pub async fn declare_paid(
        &self,
        intent_id: i64,
        note: Option<&str>,
        now_ms: i64,
    ) -> Result<Declared, StoreError> {
        let mut tx = self.begin().await?;
        // Taking the intent's row first orders concurrent declarations of
        // one intent, so two equal ones cannot both be written.
        let touched = sqlx::query(
            "UPDATE intents SET declared_paid_at = COALESCE(declared_paid_at, $2) WHERE id = $1",
        )
        .bind(intent_id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if touched == 0 {
            return Ok(Declared::NoSuchIntent);
        }
        let earlier = sqlx::query(
            "SELECT COUNT(*) AS n, SUM(CASE WHEN note = $2 THEN 1 ELSE 0 END) AS same, \
             MIN(declared_at) AS first_at FROM payment_declarations WHERE intent_id = $1",
        )
        .bind(intent_id)
        .bind(note)
        .fetch_one(&mut *tx)
        .await?;
        let n: i64 = earlier.try_get("n")?;
        let same: Option<i64> = earlier.try_get("same")?;
        let first_at: Option<i64> = earlier.try_get("first_at")?;
        if let Some(first_at_ms) = first_at {
            if note.is_none() || same.unwrap_or(0) > 0 || n >= MAX_DECLARATIONS {
                // Nothing new was said: the row taken above is left as it was.
                drop(tx);
                return Ok(Declared::AlreadyRecorded { first_at_ms });
            }
        }
        sqlx::query(
            "INSERT INTO payment_declarations (intent_id, declared_at, note) VALUES ($1, $2, $3)",
        )
        .bind(intent_id)
        .bind(now_ms)
        .bind(note)
        .execute(&mut *tx)
        .await?;
        // A declaration is no proof, but it is a reason to look again now
        // rather than at the next scheduled pass.
        sqlx::query(
            "INSERT INTO reconcile_queue (network, address) \
             SELECT network, address FROM intents WHERE id = $1",
        )
        .bind(intent_id)
        .execute(&mut *tx)
        .await?;
        self.insert_intent_event(
            &mut tx,
            intent_id,
            now_ms,
            "declared_paid",
            None,
            None,
            note,
        )
        .await?;
        tx.commit().await?;
        Ok(Declared::Recorded)
    }

    /// Available USD balance of an account, in cents: posted entries only.
    pub async fn balance_cents(&self, account: &str) -> Result<i64, StoreError> {
        let row =
            sqlx::query("SELECT available_usd_cents FROM paywatch_balances WHERE account = $1")
                .bind(account)
                .fetch_optional(self.pool())
                .await?;
        Ok(row
            .map(|r| r.try_get::<i64, _>("available_usd_cents"))
            .transpose()?
            .unwrap_or(0))
    }
}

impl Store {
    /// Intents on `network` still awaiting payment.
    pub async fn open_intents(
        &self,
        network: paywatch_core::Network,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        let sql = format!("SELECT {INTENT_COLUMNS} FROM intents WHERE network = $1 AND status = 'awaiting_payment' ORDER BY id");
        let rows = sqlx::query(&sql)
            .bind(network.as_str())
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(intent_from_row).collect()
    }
}

#[cfg(test)]
mod view_token_query {
    use super::{INTENT_BY_VIEW_TOKEN, INTENT_COLUMNS};

    #[test]
    fn the_view_token_lookup_reads_every_intent_column() {
        assert_eq!(
            INTENT_BY_VIEW_TOKEN,
            format!("SELECT {INTENT_COLUMNS} FROM intents WHERE view_token = $1")
        );
    }
}

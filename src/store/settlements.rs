//! The statements behind settlements, the ledger and the outbox. Only the
//! reconciler's writer calls them (`reconcile::writer`), inside the
//! transaction that also writes the status they go with.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use sqlx::Row;

use super::{json, Col, Dialect, Store, StoreError, Tx};

/// A settlement to make: a reference paid by an intent (`intent_id`), or by
/// the balance (`debit_key` names the ledger entry).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NewSettlement<'a> {
    pub kind: &'a str,
    pub reference: &'a str,
    pub intent_id: Option<i64>,
    pub account: &'a str,
    pub usd_cents: i64,
    pub via: &'static str,
    pub decision_id: Option<i64>,
    pub debit_key: Option<&'a str>,
    /// The terms it is judged by while it stands: the tolerance then in
    /// force (basis points, and its cap in base units) and the locked rate.
    pub tolerance_bp: Option<i64>,
    pub tolerance_max: Option<String>,
    pub rate_usd: Option<&'a str>,
    /// Same-asset money under it (base units) arriving later opens no case.
    pub dust_floor: Option<String>,
}

/// One ledger entry to post.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LedgerPosting<'a> {
    pub account: &'a str,
    pub usd_cents: i64,
    pub entry_kind: &'static str,
    pub entry_key: String,
    pub intent_id: Option<i64>,
    pub memo: String,
    /// For a credit back: the ledger key of the debit it returns.
    pub returns_entry: Option<String>,
}

/// One event for the storefront's feed (the outbox). `payload` is a JSON
/// object; its `cursor` and `created_at_ms` are added when it is written.
#[derive(Debug, Clone)]
pub(crate) struct OutboxEvent {
    pub topic: &'static str,
    pub intent_id: Option<i64>,
    /// The order or top-up the event is about; none for a debit that paid
    /// no order.
    pub kind: Option<String>,
    pub reference: Option<String>,
    pub payload: serde_json::Map<String, serde_json::Value>,
}

/// An outbox row as the batch insert reads it.
#[derive(Debug, Serialize)]
struct OutboxRow<'a> {
    seq: i64,
    topic: &'a str,
    intent_id: Option<i64>,
    kind: Option<&'a str>,
    reference: Option<&'a str>,
    payload: String,
}

/// The channel each feed write notifies, with its newest cursor.
pub(crate) const FEED_CHANNEL: &str = "paywatch_outbox";
/// The channel a webhook redelivery notifies: not a feed event.
pub(crate) const WEBHOOK_CHANNEL: &str = "paywatch_webhooks";

/// Any fixed number: it only has to differ from other advisory locks'
/// keys, which are hashes of their own names. Migration 0014's trigger
/// (numbering an older release's rows) takes it by its decimal value,
/// 8097887158714852708.
pub(crate) const FEED_LOCK: i64 = 0x7061_7977_6665_6564; // "paywfeed"

impl Store {
    /// Makes these settlements, at most one per reference: the primary key on
    /// (kind, reference) makes a second settlement impossible, not merely
    /// unlikely. Returns the intents whose settlement was made, each with
    /// its credit count: 1, or more when the intent settled before and that
    /// settlement was reversed and superseded, so each credit of one intent
    /// has a ledger key of its own. The others found their reference taken.
    pub(crate) async fn insert_settlements(
        &self,
        tx: &mut Tx,
        rows: &[NewSettlement<'_>],
        now_ms: i64,
    ) -> Result<HashMap<Option<i64>, i64>, StoreError> {
        let mut made = HashMap::new();
        if rows.is_empty() {
            return Ok(made);
        }
        self.supersede_reversed(tx, rows, now_ms).await?;
        let sql = format!(
            "INSERT INTO settlements (kind, reference, intent_id, account, usd_cents, settled_at, \
             via, decision_id, debit_key, tolerance_bp, tolerance_max, rate_usd, dust_floor, credits) \
             SELECT kind, reference, intent_id, account, usd_cents, $2, via, decision_id, debit_key, \
             tolerance_bp, tolerance_max, rate_usd, dust_floor, \
             1 + COALESCE((SELECT SUM(x.credits) FROM settlements_superseded x \
                           WHERE x.intent_id = v.intent_id), 0) \
             FROM {} WHERE true ON CONFLICT DO NOTHING RETURNING kind, reference, intent_id, credits",
            self.dialect().rowset(
                "$1",
                &[
                    ("kind", Col::Text),
                    ("reference", Col::Text),
                    ("intent_id", Col::Int),
                    ("account", Col::Text),
                    ("usd_cents", Col::Int),
                    ("via", Col::Text),
                    ("decision_id", Col::Int),
                    ("debit_key", Col::Text),
                    ("tolerance_bp", Col::Int),
                    ("tolerance_max", Col::Text),
                    ("rate_usd", Col::Text),
                    ("dust_floor", Col::Amount),
                ]
            )
        );
        for row in sqlx::query(&sql)
            .bind(json(rows)?)
            .bind(now_ms)
            .fetch_all(&mut **tx)
            .await?
        {
            made.insert(
                row.try_get::<Option<i64>, _>("intent_id")?,
                row.try_get::<i64, _>("credits")?,
            );
        }
        Ok(made)
    }

    /// Frees the references of `rows` whose settlement was reversed: the
    /// reversed row moves to `settlements_superseded` (the history stays),
    /// and the intent it belonged to is queued, to learn that its
    /// reference is paid by other money now. On PostgreSQL a concurrent
    /// pass that credits the reversed row again makes this one fail with a
    /// serialization error and run again, so the two never both stand.
    async fn supersede_reversed(
        &self,
        tx: &mut Tx,
        rows: &[NewSettlement<'_>],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Key<'a> {
            kind: &'a str,
            reference: &'a str,
        }
        let keys: Vec<Key<'_>> = rows
            .iter()
            .map(|r| Key {
                kind: r.kind,
                reference: r.reference,
            })
            .collect();
        let keys = json(&keys)?;
        let rowset = self
            .dialect()
            .rowset("$1", &[("kind", Col::Text), ("reference", Col::Text)]);
        let reversed_here = format!(
            "reversed_at IS NOT NULL AND EXISTS (SELECT 1 FROM {rowset} \
             WHERE v.kind = settlements.kind AND v.reference = settlements.reference)"
        );
        let moved = sqlx::query(&format!(
            "INSERT INTO settlements_superseded (kind, reference, intent_id, account, usd_cents, \
             settled_at, via, decision_id, debit_key, credits, reversed_at, tolerance_bp, \
             tolerance_max, rate_usd, dust_floor, superseded_at) \
             SELECT kind, reference, intent_id, account, usd_cents, settled_at, via, decision_id, \
             debit_key, credits, reversed_at, tolerance_bp, tolerance_max, rate_usd, dust_floor, $2 \
             FROM settlements WHERE {reversed_here}"
        ))
        .bind(keys.clone())
        .bind(now_ms)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if moved == 0 {
            return Ok(());
        }
        sqlx::query(&format!(
            "INSERT INTO reconcile_queue (network, address) \
             SELECT i.network, i.address FROM intents i JOIN settlements ON settlements.intent_id = i.id \
             WHERE settlements.{reversed_here}"
        ))
        .bind(keys.clone())
        .execute(&mut **tx)
        .await?;
        sqlx::query(&format!("DELETE FROM settlements WHERE {reversed_here}"))
            .bind(keys.clone())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Marks these intents' settlements reversed (`reversed` true) or
    /// standing again (false, one more credit posted).
    pub(crate) async fn mark_settlements(
        &self,
        tx: &mut Tx,
        intent_ids: &[i64],
        reversed: bool,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Id {
            id: i64,
        }
        if intent_ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<Id> = intent_ids.iter().map(|id| Id { id: *id }).collect();
        let rowset = self.dialect().rowset("$1", &[("id", Col::Int)]);
        if reversed {
            let sql = format!(
                "UPDATE settlements SET reversed_at = $2 WHERE intent_id IN (SELECT id FROM {rowset})"
            );
            sqlx::query(&sql)
                .bind(json(&ids)?)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?;
            // The reference is free now: its other intents are looked at
            // again, and one holding timely final money settles it.
            let sql = format!(
                "INSERT INTO reconcile_queue (network, address) \
                 SELECT o.network, o.address FROM intents o JOIN intents i \
                 ON o.kind = i.kind AND o.reference = i.reference AND o.id <> i.id \
                 WHERE i.id IN (SELECT id FROM {rowset})"
            );
            sqlx::query(&sql)
                .bind(json(&ids)?)
                .execute(&mut **tx)
                .await?;
        } else {
            let sql = format!(
                "UPDATE settlements SET reversed_at = NULL, credits = credits + 1 \
                 WHERE intent_id IN (SELECT id FROM {rowset})"
            );
            sqlx::query(&sql)
                .bind(json(&ids)?)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Posts ledger entries. Their ids are drawn under the feed's lock (held
    /// to commit, as the feed's cursors are), so entry ids too increase in
    /// commit order and a reader paging the ledger by `entry_id` never
    /// passes an entry still to commit.
    pub(crate) async fn post_ledger(
        &self,
        tx: &mut Tx,
        postings: &[LedgerPosting<'_>],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if postings.is_empty() {
            return Ok(());
        }
        self.lock_feed(tx).await?;
        let sql = format!(
            "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, intent_id, created_at, memo, \
             returns_entry) \
             SELECT account, usd_cents, entry_kind, entry_key, intent_id, $2, memo, returns_entry FROM {}",
            self.dialect().rowset(
                "$1",
                &[
                    ("account", Col::Text),
                    ("usd_cents", Col::Int),
                    ("entry_kind", Col::Text),
                    ("entry_key", Col::Text),
                    ("intent_id", Col::Int),
                    ("memo", Col::Text),
                    ("returns_entry", Col::Text)
                ]
            )
        );
        sqlx::query(&sql)
            .bind(json(postings)?)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Writes `events` to the feed in order, numbered after every event
    /// already committed, and wakes listeners once this commits.
    ///
    /// On PostgreSQL the numbers are drawn under a transaction advisory lock
    /// held until commit, so a second writer draws only once the first has
    /// committed (or rolled back): the feed's order is commit order, and a
    /// reader never sees a cursor while a lower one is still to commit.
    /// Written last in the money path's transaction, so the lock is held
    /// for this insert, one notification round trip and the commit (from
    /// the ledger's entries, when the transaction posts any). SQLite's one
    /// writer gives the same order.
    pub(crate) async fn insert_outbox(
        &self,
        tx: &mut Tx,
        events: &[OutboxEvent],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.insert_outbox_from(tx, events, now_ms, 0).await
    }

    /// [`insert_outbox`](Self::insert_outbox), with cursors at or above
    /// `floor`: the feed jumps past a restore's lost window.
    pub(crate) async fn insert_outbox_from(
        &self,
        tx: &mut Tx,
        events: &[OutboxEvent],
        now_ms: i64,
        floor: i64,
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let first = self.draw_feed_numbers(tx, events.len()).await?.max(floor);
        let rows: Vec<OutboxRow<'_>> = events
            .iter()
            .zip(first..)
            .map(|(e, seq)| {
                let mut payload = e.payload.clone();
                payload.insert("cursor".into(), seq.into());
                payload.insert("created_at_ms".into(), now_ms.into());
                OutboxRow {
                    seq,
                    topic: e.topic,
                    intent_id: e.intent_id,
                    kind: e.kind.as_deref(),
                    reference: e.reference.as_deref(),
                    payload: serde_json::Value::Object(payload).to_string(),
                }
            })
            .collect();
        let sql = format!(
            "INSERT INTO outbox (seq, topic, intent_id, kind, reference, payload, created_at) \
             SELECT seq, topic, intent_id, kind, reference, payload, $2 FROM {}",
            self.dialect().rowset(
                "$1",
                &[
                    ("seq", Col::Int),
                    ("topic", Col::Text),
                    ("intent_id", Col::Int),
                    ("kind", Col::Text),
                    ("reference", Col::Text),
                    ("payload", Col::Text)
                ]
            )
        );
        sqlx::query(&sql)
            .bind(json(&rows)?)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        tx.ring_on_commit(&self.bell);
        self.notify_feed(tx, &rows).await
    }

    /// The feed's lock, held to commit (PostgreSQL; SQLite's one writer
    /// holds its own from BEGIN). Taken again in one transaction, it is the
    /// same lock.
    pub(super) async fn lock_feed(&self, tx: &mut Tx) -> Result<(), StoreError> {
        if self.dialect() == Dialect::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(FEED_LOCK)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// The first of `n` consecutive feed numbers, all above any committed.
    async fn draw_feed_numbers(&self, tx: &mut Tx, n: usize) -> Result<i64, StoreError> {
        let n = i64::try_from(n).map_err(|_| StoreError::Corrupt("event batch size".into()))?;
        match self.dialect() {
            Dialect::Postgres => {
                self.lock_feed(tx).await?;
                // No other writer draws while the lock is held, so one
                // statement takes n consecutive numbers.
                let last: i64 = sqlx::query_scalar(
                    "SELECT setval('outbox_seq', nextval('outbox_seq') + $1 - 1)",
                )
                .bind(n)
                .fetch_one(&mut **tx)
                .await?;
                Ok(last - n + 1)
            }
            Dialect::Sqlite => {
                let top: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM outbox")
                    .fetch_one(&mut **tx)
                    .await?;
                Ok(top + 1)
            }
        }
    }

    /// One notification per order or top-up the events are about, carrying
    /// its newest cursor: `{"cursor": 42, "kind": "order", "reference": "A-1"}`.
    /// A hint only (any session may NOTIFY); the feed is the truth.
    /// PostgreSQL delivers them only on commit.
    async fn notify_feed(&self, tx: &mut Tx, rows: &[OutboxRow<'_>]) -> Result<(), StoreError> {
        if self.dialect() != Dialect::Postgres {
            return Ok(());
        }
        let mut newest: BTreeMap<(Option<&str>, Option<&str>), i64> = BTreeMap::new();
        for r in rows {
            let cursor = newest.entry((r.kind, r.reference)).or_insert(r.seq);
            *cursor = (*cursor).max(r.seq);
        }
        let hints: Vec<String> = newest
            .into_iter()
            .map(|((kind, reference), cursor)| {
                serde_json::json!({"cursor": cursor, "kind": kind, "reference": reference})
                    .to_string()
            })
            .collect();
        // One round trip however many references: the feed's lock is held.
        sqlx::query("SELECT pg_notify($1, value) FROM json_array_elements_text(CAST($2 AS json))")
            .bind(FEED_CHANNEL)
            .bind(json(&hints)?)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Wakes the webhook senders (a redelivery); PostgreSQL delivers it only
    /// on commit.
    pub(crate) async fn notify_webhooks(&self, tx: &mut Tx) -> Result<(), StoreError> {
        if self.dialect() == Dialect::Postgres {
            sqlx::query("SELECT pg_notify($1, '')")
                .bind(WEBHOOK_CHANNEL)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// An account's available balance, with its lock row held for the rest
    /// of the transaction: of two concurrent debits the second reads the
    /// balance the first left (PostgreSQL row lock and snapshot; SQLite has
    /// one writer).
    pub(crate) async fn lock_balance(&self, tx: &mut Tx, account: &str) -> Result<i64, StoreError> {
        sqlx::query("INSERT INTO account_locks (account) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(account)
            .execute(&mut **tx)
            .await?;
        // An update, not a row lock alone: under PostgreSQL's snapshot a
        // second debit that waited here must not go on with a balance read
        // before the first committed. Updating the row makes it fail with a
        // serialization error instead, and run again on a fresh snapshot.
        sqlx::query("UPDATE account_locks SET account = account WHERE account = $1")
            .bind(account)
            .execute(&mut **tx)
            .await?;
        Ok(sqlx::query(
            "SELECT CAST(COALESCE(SUM(usd_cents), 0) AS BIGINT) AS b \
             FROM ledger_entries WHERE account = $1",
        )
        .bind(account)
        .fetch_one(&mut **tx)
        .await?
        .try_get("b")?)
    }

    /// The ledger entry posted under `entry_key`: its account and amount.
    pub(crate) async fn ledger_entry(
        &self,
        tx: &mut Tx,
        entry_key: &str,
    ) -> Result<Option<(String, i64)>, StoreError> {
        let row = sqlx::query("SELECT account, usd_cents FROM ledger_entries WHERE entry_key = $1")
            .bind(entry_key)
            .fetch_optional(&mut **tx)
            .await?;
        row.map(|r| Ok((r.try_get("account")?, r.try_get("usd_cents")?)))
            .transpose()
    }

    /// Who settled a reference, read in `tx`.
    pub(crate) async fn reference_settled_by(
        &self,
        tx: &mut Tx,
        kind: crate::IntentKind,
        reference: &str,
    ) -> Result<Option<crate::reconcile::SettledBy>, StoreError> {
        let row = sqlx::query(
            "SELECT intent_id FROM settlements WHERE kind = $1 AND reference = $2 \
             AND reversed_at IS NULL",
        )
        .bind(kind.as_str())
        .bind(reference)
        .fetch_optional(&mut **tx)
        .await?;
        row.map(|r| {
            Ok(match r.try_get::<Option<i64>, _>("intent_id")? {
                Some(id) => crate::reconcile::SettledBy::Intent(id),
                None => crate::reconcile::SettledBy::Balance,
            })
        })
        .transpose()
    }

    /// The debit a credit back returns money of, by the credit's ledger key.
    pub(crate) async fn returned_entry(
        &self,
        tx: &mut Tx,
        entry_key: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT returns_entry FROM ledger_entries WHERE entry_key = $1")
            .bind(entry_key)
            .fetch_optional(&mut **tx)
            .await?;
        Ok(row
            .map(|r| r.try_get::<Option<String>, _>("returns_entry"))
            .transpose()?
            .flatten())
    }

    /// What has been credited back of the debit `debit_key`, in cents.
    pub(crate) async fn credited_back(
        &self,
        tx: &mut Tx,
        debit_key: &str,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query(
            "SELECT CAST(COALESCE(SUM(usd_cents), 0) AS BIGINT) AS n FROM ledger_entries \
             WHERE returns_entry = $1",
        )
        .bind(debit_key)
        .fetch_one(&mut **tx)
        .await?
        .try_get("n")?)
    }

    /// The order a balance debit paid, by the debit's ledger key.
    pub(crate) async fn order_paid_by_debit(
        &self,
        tx: &mut Tx,
        debit_key: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT reference FROM settlements WHERE debit_key = $1")
            .bind(debit_key)
            .fetch_optional(&mut **tx)
            .await?;
        row.map(|r| Ok(r.try_get("reference")?)).transpose()
    }
}

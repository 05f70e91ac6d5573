//! What support and operators read about cases: the audit log, refunds,
//! search, the review queue and candidate intents. Support's actions are
//! written by `reconcile::support`.

use sqlx::Row;

use super::intents::{intent_from_row, INTENT_COLUMNS};
use super::{IntentRecord, Store, StoreError};

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub id: i64,
    pub at_ms: i64,
    pub role: String,
    pub actor: String,
    pub action: String,
    pub intent_id: i64,
    pub note: String,
    pub detail: Option<String>,
    /// The configured name of the token that acted; None for entries
    /// written before tokens had names.
    pub token_name: Option<String>,
}

/// A refund owed or sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRecord {
    pub destination: String,
    pub required_at_ms: i64,
    /// The latest transaction support recorded.
    pub txid: Option<String>,
    /// Every transaction recorded for it, oldest first, judged together.
    pub txids: Vec<String>,
    pub sent_at_ms: Option<i64>,
    /// Where it goes out: the network the money came on.
    pub network: Option<String>,
    /// What the chain shows of it (`reconcile::RefundState`'s names).
    pub state: Option<String>,
    /// Its transaction must be seen paying the destination by then.
    pub check_by_ms: Option<i64>,
    pub checked_at_ms: Option<i64>,
    /// Why its transaction does not match what is owed.
    pub mismatch: Option<String>,
}

impl Store {
    pub async fn audit_entries(&self, intent_id: i64) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, at, role, actor, action, intent_id, note, detail, token_name FROM audit_log \
             WHERE intent_id = $1 ORDER BY id",
        )
        .bind(intent_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AuditEntry {
                    id: r.try_get("id")?,
                    at_ms: r.try_get("at")?,
                    role: r.try_get("role")?,
                    actor: r.try_get("actor")?,
                    action: r.try_get("action")?,
                    intent_id: r.try_get("intent_id")?,
                    note: r.try_get("note")?,
                    detail: r.try_get("detail")?,
                    token_name: r.try_get("token_name")?,
                })
            })
            .collect()
    }

    pub async fn refund(&self, intent_id: i64) -> Result<Option<RefundRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT destination, required_at, txid, sent_at, network, state, check_by, checked_at, \
             mismatch FROM refunds WHERE intent_id = $1",
        )
        .bind(intent_id)
        .fetch_optional(self.pool())
        .await?;
        let Some(r) = row else {
            return Ok(None);
        };
        let txid: Option<String> = r.try_get("txid")?;
        let recorded = sqlx::query(
            "SELECT txid FROM refund_transactions WHERE intent_id = $1 ORDER BY sent_at, txid",
        )
        .bind(intent_id)
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(|t| t.try_get("txid"))
        .collect::<Result<Vec<String>, _>>()?;
        let txids = super::refunds::in_order(txid.as_deref(), recorded);
        Ok(Some(RefundRecord {
            destination: r.try_get("destination")?,
            required_at_ms: r.try_get("required_at")?,
            txids,
            txid,
            sent_at_ms: r.try_get("sent_at")?,
            network: r.try_get("network")?,
            state: r.try_get("state")?,
            check_by_ms: r.try_get("check_by")?,
            checked_at_ms: r.try_get("checked_at")?,
            mismatch: r.try_get("mismatch")?,
        }))
    }

    /// Intents matching a search: by reference, account, address (on any
    /// network, its twin spelling included) or a transaction id paid to one.
    /// Intents matching every criterion given, newest first. An address or
    /// txid is matched against each of its possible stored spellings.
    pub(crate) async fn find_intents(
        &self,
        reference: Option<&str>,
        account: Option<&str>,
        addresses: &[String],
        txids: &[String],
        limit: i64,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        let (sql, values) = find_intents_sql(reference, account, addresses, txids);
        let mut query = sqlx::query(&sql);
        for v in &values {
            query = query.bind(*v);
        }
        let query = query.bind(limit);
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// Intents waiting for a person, oldest first.
    pub async fn review_queue(&self, limit: i64) -> Result<Vec<IntentRecord>, StoreError> {
        let rows = sqlx::query(&review_queue_sql())
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// Open intents a transfer could belong to: same asset and network,
    /// the exact amount due, created before the transfer arrived.
    pub async fn candidate_intents(
        &self,
        transfer_id: i64,
        limit: i64,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        let rows = sqlx::query(&candidate_intents_sql())
            .bind(transfer_id)
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(intent_from_row).collect()
    }
}

/// A transfer shown in a case: any network, counting toward the intent or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseTransfer {
    pub transfer_id: i64,
    pub network: String,
    pub asset: String,
    pub txid: String,
    pub index: i64,
    pub to_address: String,
    pub from_address: Option<String>,
    /// Base units, as text: NUMERIC(78,0) does not fit an i64.
    pub amount: String,
    pub counts_toward_intent: bool,
    pub tx_status: String,
    pub block_height: Option<i64>,
    pub confirmations: i64,
    pub is_final: bool,
    pub first_seen_at_ms: i64,
    pub orphaned_at_ms: Option<i64>,
}

impl Store {
    /// Every transfer to an intent's address, on every network, as the
    /// storefront's view lists them.
    /// The transfers to an intent's address after transfer `after`, at
    /// most `limit`, oldest first: dust sent to a known address can be
    /// endless, so nothing reads them all at once.
    pub(crate) async fn case_transfers(
        &self,
        intent_id: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<CaseTransfer>, StoreError> {
        let rows = sqlx::query(
            "SELECT transfer_id, network, asset, txid, transfer_index, to_address, from_address, \
             CAST(amount AS TEXT) AS amount, counts_toward_intent, tx_status, block_height, \
             confirmations, is_final, first_seen_at, orphaned_at \
             FROM paywatch_intent_transfers WHERE intent_id = $1 AND transfer_id > $2 \
             ORDER BY transfer_id LIMIT $3",
        )
        .bind(intent_id)
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(CaseTransfer {
                    transfer_id: r.try_get("transfer_id")?,
                    network: r.try_get("network")?,
                    asset: r.try_get("asset")?,
                    txid: r.try_get("txid")?,
                    index: r.try_get("transfer_index")?,
                    to_address: r.try_get("to_address")?,
                    from_address: r.try_get("from_address")?,
                    amount: r.try_get("amount")?,
                    counts_toward_intent: flag(r, "counts_toward_intent")?,
                    tx_status: r.try_get("tx_status")?,
                    block_height: r.try_get("block_height")?,
                    confirmations: r.try_get("confirmations")?,
                    is_final: flag(r, "is_final")?,
                    first_seen_at_ms: r.try_get("first_seen_at")?,
                    orphaned_at_ms: r.try_get("orphaned_at")?,
                })
            })
            .collect()
    }
}

impl Store {
    /// How many transfers went to an intent's address, on any network.
    pub(crate) async fn case_transfer_count(&self, intent_id: i64) -> Result<i64, StoreError> {
        Ok(
            sqlx::query("SELECT COUNT(*) AS n FROM paywatch_intent_transfers WHERE intent_id = $1")
                .bind(intent_id)
                .fetch_one(self.pool())
                .await?
                .try_get("n")?,
        )
    }
}

/// A 0/1 column of the views (an integer on both databases).
fn flag(r: &sqlx::any::AnyRow, name: &str) -> Result<bool, StoreError> {
    let v: i64 = r
        .try_get(name)
        .or_else(|_| r.try_get::<i32, _>(name).map(i64::from))?;
    Ok(v != 0)
}

/// A search's query and the values of its placeholders, the limit's last.
/// Only the criteria given appear, each as plain equality, so every search
/// is served by its own index (`intents_by_reference_alone`,
/// `intents_by_account`, `intents_by_address`, `intents_by_twin`) whatever
/// plan the database caches: `($1 IS NULL OR reference = $1)` read them
/// all. One placeholder per spelling: a handful at most, so an IN list
/// beats a JSON rowset on both databases.
pub(super) fn find_intents_sql<'a>(
    reference: Option<&'a str>,
    account: Option<&'a str>,
    addresses: &'a [String],
    txids: &'a [String],
) -> (String, Vec<&'a str>) {
    let mut values: Vec<&str> = Vec::new();
    let mut criteria: Vec<String> = Vec::new();
    // Placeholders for `items`, numbered after the values so far, which
    // take them.
    let take = |items: &[&'a str], values: &mut Vec<&'a str>| -> String {
        let from = values.len() + 1;
        values.extend_from_slice(items);
        (from..from + items.len())
            .map(|n| format!("${n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(reference) = reference {
        criteria.push(format!("reference = {}", take(&[reference], &mut values)));
    }
    if let Some(account) = account {
        criteria.push(format!("account = {}", take(&[account], &mut values)));
    }
    if !addresses.is_empty() {
        let spelled: Vec<&str> = addresses.iter().map(String::as_str).collect();
        let l = take(&spelled, &mut values);
        criteria.push(format!("(address IN ({l}) OR twin_address IN ({l}))"));
    }
    if !txids.is_empty() {
        let spelled: Vec<&str> = txids.iter().map(String::as_str).collect();
        let l = take(&spelled, &mut values);
        criteria.push(format!(
            "id IN (SELECT intent_id FROM paywatch_intent_transfers WHERE txid IN ({l}))"
        ));
    }
    let filter = if criteria.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", criteria.join(" AND "))
    };
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM intents {filter} ORDER BY id DESC LIMIT ${}",
        values.len() + 1
    );
    (sql, values)
}

/// Open intents a transfer ($1) could belong to, served by
/// `intents_open_by_amount`. The outer query reads only `intents`, so its
/// bare column names are the intent's.
pub(super) fn candidate_intents_sql() -> String {
    format!(
        "SELECT {INTENT_COLUMNS} FROM intents i WHERE EXISTS (\
           SELECT 1 FROM transfers t WHERE t.id = $1 AND t.network = i.network \
           AND t.asset = i.asset AND t.amount = i.amount_due AND i.created_at <= t.first_seen_at \
           AND t.to_address <> i.address) \
         AND i.status IN ('awaiting_payment', 'expired', 'needs_review') \
         ORDER BY i.id DESC LIMIT $2"
    )
}

/// The review queue, oldest first, served by `intents_needing_review`.
pub(super) fn review_queue_sql() -> String {
    format!(
        "SELECT {INTENT_COLUMNS} FROM intents WHERE status = 'needs_review' \
         ORDER BY updated_at, id LIMIT $1"
    )
}

//! Support's resolution of a case: accept, refund, reassign or dismiss,
//! each written to the append-only audit log under the caller's key, in
//! the same transaction as its effect, so a replay does nothing twice.

use sqlx::Row;

use super::intents::{intent_from_row, INTENT_COLUMNS};
use super::{IntentRecord, Store, StoreError, Tx};
use crate::reconcile::Status;

/// What support may do to a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SupportAction {
    /// Mark the order paid or credit the top-up, as an automatic settlement
    /// would, once.
    Accept,
    /// The payer is owed a refund, to `destination`.
    RefundRequired,
    /// The refund went out in transaction `txid`.
    RefundSent,
    /// A payment to this intent's address belongs to `to_intent`: that one
    /// is settled, this one closed.
    Reassign,
    /// Nothing is owed either way.
    Dismiss,
}

impl SupportAction {
    pub fn as_str(self) -> &'static str {
        match self {
            SupportAction::Accept => "accept",
            SupportAction::RefundRequired => "refund_required",
            SupportAction::RefundSent => "refund_sent",
            SupportAction::Reassign => "reassign",
            SupportAction::Dismiss => "dismiss",
        }
    }

    pub fn parse(text: &str) -> Option<SupportAction> {
        [
            SupportAction::Accept,
            SupportAction::RefundRequired,
            SupportAction::RefundSent,
            SupportAction::Reassign,
            SupportAction::Dismiss,
        ]
        .into_iter()
        .find(|a| a.as_str() == text)
    }
}

/// One action as support asked for it.
#[derive(Debug, Clone)]
pub struct CaseAction<'a> {
    pub intent_id: i64,
    pub action: SupportAction,
    pub role: &'a str,
    pub actor: &'a str,
    pub note: &'a str,
    pub key: &'a str,
    pub destination: Option<&'a str>,
    pub txid: Option<&'a str>,
    pub to_intent: Option<i64>,
}

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionOutcome {
    Done {
        audit_id: i64,
    },
    /// This key's action was done before; nothing was done again.
    Replayed {
        audit_id: i64,
    },
    /// This key was used for another action or case.
    KeyConflict,
    NotFound(String),
    /// Not possible in the case's state; nothing was changed.
    Refused(String),
}

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
}

/// A refund owed or sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRecord {
    pub destination: String,
    pub required_at_ms: i64,
    pub txid: Option<String>,
    pub sent_at_ms: Option<i64>,
}

impl Store {
    pub async fn act_on_case(
        &self,
        a: &CaseAction<'_>,
        now_ms: i64,
    ) -> Result<ActionOutcome, StoreError> {
        let mut tx = self.begin().await?;
        let earlier =
            sqlx::query("SELECT id, intent_id, action FROM audit_log WHERE action_key = $1")
                .bind(a.key)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(row) = earlier {
            let (id, intent, action): (i64, i64, String) = (
                row.try_get("id")?,
                row.try_get("intent_id")?,
                row.try_get("action")?,
            );
            return Ok(if intent == a.intent_id && action == a.action.as_str() {
                ActionOutcome::Replayed { audit_id: id }
            } else {
                ActionOutcome::KeyConflict
            });
        }
        let Some(intent) = self.lock_intent(&mut tx, a.intent_id).await? else {
            return Ok(ActionOutcome::NotFound(format!(
                "no intent {}",
                a.intent_id
            )));
        };
        let (reason, detail) = match self.apply(&mut tx, a, &intent, now_ms).await? {
            Ok(done) => done,
            Err(refused) => return Ok(ActionOutcome::Refused(refused)),
        };
        if let Some(reason) = &reason {
            self.close_case(&mut tx, &intent, reason, now_ms).await?;
        }
        let audit_id: i64 = sqlx::query(
            "INSERT INTO audit_log (at, role, actor, action, intent_id, note, detail, action_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        )
        .bind(now_ms)
        .bind(a.role)
        .bind(a.actor)
        .bind(a.action.as_str())
        .bind(a.intent_id)
        .bind(a.note)
        .bind(detail.as_deref())
        .bind(a.key)
        .fetch_one(&mut *tx)
        .await?
        .try_get("id")?;
        self.insert_intent_event(
            &mut tx,
            a.intent_id,
            now_ms,
            &format!("support_{}", a.action.as_str()),
            reason.as_ref().map(|_| Status::Resolved),
            None,
            Some(a.note),
        )
        .await?;
        tx.commit().await?;
        Ok(ActionOutcome::Done { audit_id })
    }

    /// The action's effect: the reason to close the case with (if it closes
    /// it) and the audit detail, or why it cannot be done.
    async fn apply(
        &self,
        tx: &mut Tx,
        a: &CaseAction<'_>,
        intent: &IntentRecord,
        now_ms: i64,
    ) -> Result<Result<(Option<String>, Option<String>), String>, StoreError> {
        let note = a.note;
        Ok(Ok(match a.action {
            SupportAction::Accept => {
                if let Err(why) = self.settle_by_support(tx, intent, now_ms).await? {
                    return Ok(Err(why));
                }
                (Some(format!("accepted by support: {note}")), None)
            }
            SupportAction::Dismiss => {
                if intent.status == Status::Paid {
                    return Ok(Err(format!(
                        "intent {} is paid; dismissing would hide a settled payment",
                        intent.id
                    )));
                }
                (Some(format!("dismissed by support: {note}")), None)
            }
            SupportAction::RefundRequired => {
                let Some(dest) = a.destination else {
                    return Ok(Err("refund_required needs the destination address".into()));
                };
                let inserted = sqlx::query(
                    "INSERT INTO refunds (intent_id, destination, required_at) VALUES ($1, $2, $3) \
                     ON CONFLICT DO NOTHING",
                )
                .bind(intent.id)
                .bind(dest)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?
                .rows_affected();
                if inserted == 0 {
                    return Ok(Err(format!(
                        "intent {} already has a refund recorded",
                        intent.id
                    )));
                }
                (
                    Some(format!("refund required to {dest}: {note}")),
                    Some(format!("destination {dest}")),
                )
            }
            SupportAction::RefundSent => {
                let Some(txid) = a.txid else {
                    return Ok(Err("refund_sent needs the refund's transaction id".into()));
                };
                let updated = sqlx::query(
                    "UPDATE refunds SET txid = $2, sent_at = $3 WHERE intent_id = $1 AND txid IS NULL",
                )
                .bind(intent.id)
                .bind(txid)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?
                .rows_affected();
                if updated == 0 {
                    return Ok(Err(format!(
                        "intent {} has no refund awaiting its transaction (record refund_required first)",
                        intent.id
                    )));
                }
                (None, Some(format!("txid {txid}")))
            }
            SupportAction::Reassign => {
                let Some(to) = a.to_intent.filter(|t| *t != intent.id) else {
                    return Ok(Err("reassign needs to_intent, another intent's id".into()));
                };
                let Some(target) = self.lock_intent(tx, to).await? else {
                    return Ok(Err(format!("no intent {to} to reassign to")));
                };
                if let Err(why) = self.settle_by_support(tx, &target, now_ms).await? {
                    return Ok(Err(why));
                }
                self.close_case(
                    tx,
                    &target,
                    &format!(
                        "paid by a transfer to intent {}'s address, reassigned by support: {note}",
                        intent.id
                    ),
                    now_ms,
                )
                .await?;
                (
                    Some(format!(
                        "transfer reassigned to intent {to} by support: {note}"
                    )),
                    Some(format!("to intent {to}")),
                )
            }
        }))
    }

    /// Settles `intent` as reconcile would: the reference's one settlement
    /// and, for a top-up, its credit under the same ledger key an automatic
    /// credit uses, so it can never be credited twice.
    async fn settle_by_support(
        &self,
        tx: &mut Tx,
        intent: &IntentRecord,
        now_ms: i64,
    ) -> Result<Result<(), String>, StoreError> {
        if intent.status == Status::Paid || intent.paid_at_ms.is_some() {
            return Ok(Err(format!("intent {} is already paid", intent.id)));
        }
        let settled = self.settle(tx, &[intent], now_ms).await?;
        if !settled.contains(&intent.id) {
            return Ok(Err(format!(
                "{} {} is already settled by another intent",
                intent.kind.as_str(),
                intent.reference
            )));
        }
        sqlx::query("UPDATE intents SET paid_at = $2 WHERE id = $1")
            .bind(intent.id)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        Ok(Ok(()))
    }

    async fn close_case(
        &self,
        tx: &mut Tx,
        intent: &IntentRecord,
        reason: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE intents SET status = 'resolved', reason = $2, updated_at = $3 WHERE id = $1",
        )
        .bind(intent.id)
        .bind(reason)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn lock_intent(&self, tx: &mut Tx, id: i64) -> Result<Option<IntentRecord>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE id = $1 FOR_UPDATE"
        ));
        let row = sqlx::query(&sql).bind(id).fetch_optional(&mut **tx).await?;
        row.as_ref().map(intent_from_row).transpose()
    }

    pub async fn audit_entries(&self, intent_id: i64) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, at, role, actor, action, intent_id, note, detail FROM audit_log \
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
                })
            })
            .collect()
    }

    pub async fn refund(&self, intent_id: i64) -> Result<Option<RefundRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT destination, required_at, txid, sent_at FROM refunds WHERE intent_id = $1",
        )
        .bind(intent_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(RefundRecord {
                destination: r.try_get("destination")?,
                required_at_ms: r.try_get("required_at")?,
                txid: r.try_get("txid")?,
                sent_at_ms: r.try_get("sent_at")?,
            })
        })
        .transpose()
    }

    /// Intents matching a search: by reference, account, address (on any
    /// network, its twin spelling included) or a transaction id paid to one.
    pub async fn find_intents(
        &self,
        reference: Option<&str>,
        account: Option<&str>,
        address: Option<&str>,
        txid: Option<&str>,
        limit: i64,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE \
             ($1 IS NULL OR reference = $1) AND ($2 IS NULL OR account = $2) \
             AND ($3 IS NULL OR address = $3 OR twin_address = $3) \
             AND ($4 IS NULL OR id IN (SELECT intent_id FROM paywatch_intent_transfers WHERE txid = $4)) \
             ORDER BY id DESC LIMIT $5"
        );
        let rows = sqlx::query(&sql)
            .bind(reference)
            .bind(account)
            .bind(address)
            .bind(txid)
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// Intents waiting for a person, oldest first.
    pub async fn review_queue(&self, limit: i64) -> Result<Vec<IntentRecord>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE status = 'needs_review' \
             ORDER BY updated_at, id LIMIT $1"
        );
        let rows = sqlx::query(&sql).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// Open intents a transfer could belong to: same asset and network,
    /// the exact amount due, created before the transfer arrived.
    pub async fn candidate_intents(
        &self,
        transfer_id: i64,
        limit: i64,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        // The outer query reads only `intents`, so its bare column names
        // are the intent's.
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM intents i WHERE EXISTS (\
               SELECT 1 FROM transfers t WHERE t.id = $1 AND t.network = i.network \
               AND t.asset = i.asset AND t.amount = i.amount_due AND i.created_at <= t.first_seen_at \
               AND t.to_address <> i.address) \
             AND i.status IN ('awaiting_payment', 'expired', 'needs_review') \
             ORDER BY i.id DESC LIMIT $2"
        );
        let rows = sqlx::query(&sql)
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
    pub async fn case_transfers(&self, intent_id: i64) -> Result<Vec<CaseTransfer>, StoreError> {
        let rows = sqlx::query(
            "SELECT transfer_id, network, asset, txid, transfer_index, to_address, from_address, \
             CAST(amount AS TEXT) AS amount, counts_toward_intent, tx_status, block_height, \
             confirmations, is_final, first_seen_at, orphaned_at \
             FROM paywatch_intent_transfers WHERE intent_id = $1 ORDER BY transfer_id",
        )
        .bind(intent_id)
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

/// A 0/1 column of the views (an integer on both databases).
fn flag(r: &sqlx::any::AnyRow, name: &str) -> Result<bool, StoreError> {
    let v: i64 = r
        .try_get(name)
        .or_else(|_| r.try_get::<i32, _>(name).map(i64::from))?;
    Ok(v != 0)
}

use std::collections::HashMap;

use paywatch_core::Network;
use sqlx::Row;

use super::intents::{intent_from_row, INTENT_COLUMNS};
use super::{placeholders, Dialect, IntentRecord, Store, StoreError, TransferRecord, Tx};
use crate::reconcile::Evaluation;
use crate::IntentKind;

/// The intents reconcile looks at in one transaction, with what it needs.
#[derive(Debug, Default)]
pub(crate) struct ReconcileBatch {
    /// Each intent with the change counter it was read at.
    pub intents: Vec<(IntentRecord, i64)>,
    pub transfers: Vec<TransferRecord>,
    /// Which intent settled each reference, for the references in the batch.
    pub settled_by: HashMap<(IntentKind, String), i64>,
    pub final_heights: HashMap<Network, u64>,
}

/// How a settlement attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SettleOutcome {
    Settled,
    /// Another intent holds the reference's settlement.
    TakenBy(i64),
}

/// One intent's new evaluation, as reconcile writes it.
#[derive(Debug)]
pub(crate) struct ReconcileWrite<'a> {
    pub intent: &'a IntentRecord,
    pub seq: i64,
    pub eval: &'a Evaluation,
    pub paid_at_ms: Option<i64>,
    pub reversed_at_ms: Option<i64>,
}

impl Store {
    /// Locks and loads up to `limit` intents that changed or whose expiry passed.
    pub(crate) async fn load_reconcile_batch(
        &self,
        tx: &mut Tx,
        now_ms: i64,
        limit: i64,
    ) -> Result<ReconcileBatch, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE id IN \
               (SELECT id FROM intents WHERE change_seq > reconciled_seq ORDER BY id LIMIT $1) \
             OR id IN \
               (SELECT id FROM intents WHERE status = 'awaiting_payment' AND expires_at < $2 ORDER BY id LIMIT $1) \
             ORDER BY id SKIP_LOCKED"
        ));
        let rows = sqlx::query(&sql)
            .bind(limit)
            .bind(now_ms)
            .fetch_all(&mut **tx)
            .await?;
        let mut batch = ReconcileBatch::default();
        for r in &rows {
            let seq: i64 = r.try_get("change_seq")?;
            batch.intents.push((intent_from_row(r)?, seq));
        }
        if batch.intents.is_empty() {
            return Ok(batch);
        }

        let mut by_network: HashMap<Network, Vec<&str>> = HashMap::new();
        for (i, _) in &batch.intents {
            by_network
                .entry(i.method.network())
                .or_default()
                .push(i.address.as_str());
        }
        for (network, addresses) in by_network {
            let found = self.transfers_to(tx, network, &addresses).await?;
            batch.transfers.extend(found);
        }

        let mut references: Vec<&str> = batch
            .intents
            .iter()
            .map(|(i, _)| i.reference.as_str())
            .collect();
        references.sort_unstable();
        references.dedup();
        for chunk in references.chunks(500) {
            let sql = format!(
                "SELECT kind, reference, intent_id FROM settlements WHERE reference IN ({})",
                placeholders(1, chunk.len())
            );
            let mut q = sqlx::query(&sql);
            for r in chunk {
                q = q.bind(*r);
            }
            for row in q.fetch_all(&mut **tx).await? {
                let kind: String = row.try_get("kind")?;
                let kind = kind
                    .parse()
                    .map_err(|e| StoreError::Corrupt(format!("settlement kind: {e}")))?;
                batch
                    .settled_by
                    .insert((kind, row.try_get("reference")?), row.try_get("intent_id")?);
            }
        }

        for row in sqlx::query("SELECT network, final_height FROM chain_state")
            .fetch_all(&mut **tx)
            .await?
        {
            let network: String = row.try_get("network")?;
            let height: Option<i64> = row.try_get("final_height")?;
            if let (Ok(network), Some(height)) = (network.parse::<Network>(), height) {
                batch.final_heights.insert(network, height as u64);
            }
        }
        Ok(batch)
    }

    /// Marks the order paid or the top-up credited, at most once per
    /// reference: the primary key on (kind, reference) and the unique ledger
    /// key make a second settlement impossible, not merely unlikely.
    pub(crate) async fn settle(
        &self,
        tx: &mut Tx,
        intent: &IntentRecord,
        now_ms: i64,
    ) -> Result<SettleOutcome, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO settlements (kind, reference, intent_id, account, usd_cents, settled_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(intent.kind.as_str())
        .bind(&intent.reference)
        .bind(intent.id)
        .bind(&intent.account)
        .bind(intent.usd_cents)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            let row =
                sqlx::query("SELECT intent_id FROM settlements WHERE kind = $1 AND reference = $2")
                    .bind(intent.kind.as_str())
                    .bind(&intent.reference)
                    .fetch_one(&mut **tx)
                    .await?;
            return Ok(SettleOutcome::TakenBy(row.try_get("intent_id")?));
        }
        if intent.kind == IntentKind::Topup {
            self.post_ledger(
                tx,
                intent,
                intent.usd_cents,
                "topup_credit",
                &format!("topup:{}", intent.id),
                now_ms,
            )
            .await?;
        }
        Ok(SettleOutcome::Settled)
    }

    /// Takes back a top-up credit whose payment a reorg removed. Never an
    /// update of the credit: a new, opposite entry, posted once.
    pub(crate) async fn post_reversal(
        &self,
        tx: &mut Tx,
        intent: &IntentRecord,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if intent.kind == IntentKind::Topup {
            self.post_ledger(
                tx,
                intent,
                -intent.usd_cents,
                "reversal",
                &format!("reversal:{}", intent.id),
                now_ms,
            )
            .await?;
        }
        Ok(())
    }

    async fn post_ledger(
        &self,
        tx: &mut Tx,
        intent: &IntentRecord,
        usd_cents: i64,
        kind: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, intent_id, created_at, memo) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&intent.account)
        .bind(usd_cents)
        .bind(kind)
        .bind(key)
        .bind(intent.id)
        .bind(now_ms)
        .bind(format!("{} {}", intent.kind.as_str(), intent.reference))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Writes an evaluation; a change of status or exception also goes to the
    /// intent's history and the outbox, in the same transaction.
    pub(crate) async fn write_evaluation(
        &self,
        tx: &mut Tx,
        w: &ReconcileWrite<'_>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let reason = w.eval.reason.render(w.intent.method);
        let sql = self.sql(
            "UPDATE intents SET status = $2, exception = $3, reason = $4, amount_final = NUM($5), \
             amount_pending = NUM($6), amount_excess = NUM($7), paid_at = $8, reversed_at = $9, \
             reconciled_seq = $10, updated_at = $11 WHERE id = $1",
        );
        sqlx::query(&sql)
            .bind(w.intent.id)
            .bind(w.eval.status.as_str())
            .bind(w.eval.exception.map(|e| e.as_str()))
            .bind(&reason)
            .bind(w.eval.amount_final.to_string())
            .bind(w.eval.amount_pending.to_string())
            .bind(w.eval.amount_excess.to_string())
            .bind(w.paid_at_ms)
            .bind(w.reversed_at_ms)
            .bind(w.seq)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        let changed = w.eval.status != w.intent.status
            || w.eval.exception != w.intent.exception
            || w.paid_at_ms != w.intent.paid_at_ms
            || w.reversed_at_ms != w.intent.reversed_at_ms;
        if changed {
            self.insert_intent_event(
                tx,
                w.intent.id,
                now_ms,
                "status_changed",
                Some(w.eval.status),
                w.eval.exception,
                Some(&reason),
            )
            .await?;
            let payload = serde_json::json!({
                "intent_id": w.intent.id,
                "kind": w.intent.kind.as_str(),
                "reference": w.intent.reference,
                "account": w.intent.account,
                "status": w.eval.status.as_str(),
                "exception": w.eval.exception.map(|e| e.as_str()),
                "paid": w.paid_at_ms.is_some() && w.reversed_at_ms.is_none(),
                "reason": reason,
            });
            sqlx::query("INSERT INTO outbox (topic, intent_id, payload, created_at) VALUES ('intent.status', $1, $2, $3)")
                .bind(w.intent.id)
                .bind(payload.to_string())
                .bind(now_ms)
                .execute(&mut **tx)
                .await?;
        }
        Ok(changed)
    }

    /// Wakes storefront listeners; PostgreSQL delivers it only on commit.
    pub(crate) async fn notify_outbox(&self, tx: &mut Tx) -> Result<(), StoreError> {
        if self.dialect() == Dialect::Postgres {
            sqlx::query("SELECT pg_notify('paywatch_outbox', 'intent.status')")
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}

use std::collections::{HashMap, HashSet};

use paywatch_core::Network;
use serde::Serialize;
use sqlx::Row;

use super::intents::{intent_from_row, INTENT_COLUMNS};
use super::{json, Col, Dialect, IntentRecord, Store, StoreError, TransferRecord, Tx};
use crate::reconcile::Evaluation;
use crate::IntentKind;

/// The intents reconcile looks at in one transaction, with what it needs.
#[derive(Debug, Default)]
pub(crate) struct ReconcileBatch {
    pub intents: Vec<IntentRecord>,
    /// Queue entries consumed: more work may be queued behind them.
    pub claimed: usize,
    pub transfers: Vec<TransferRecord>,
    /// Which intent settled each reference, for the references in the batch.
    pub settled_by: HashMap<(IntentKind, String), i64>,
    pub final_heights: HashMap<Network, u64>,
}

#[derive(Serialize)]
struct LedgerPosting<'a> {
    account: &'a str,
    usd_cents: i64,
    entry_kind: &'static str,
    entry_key: String,
    intent_id: i64,
    memo: String,
}

impl<'a> LedgerPosting<'a> {
    fn new(
        intent: &'a IntentRecord,
        usd_cents: i64,
        entry_kind: &'static str,
        entry_key: String,
    ) -> Self {
        LedgerPosting {
            account: &intent.account,
            usd_cents,
            entry_kind,
            entry_key,
            intent_id: intent.id,
            memo: format!("{} {}", intent.kind.as_str(), intent.reference),
        }
    }
}

/// One intent's new evaluation, as reconcile writes it.
#[derive(Debug)]
pub(crate) struct ReconcileWrite<'a> {
    pub intent: &'a IntentRecord,
    pub eval: &'a Evaluation,
    pub paid_at_ms: Option<i64>,
    pub settled_through: Option<i64>,
    pub reversed_at_ms: Option<i64>,
    /// The evaluation's reason, rendered for people.
    pub reason: String,
}

impl ReconcileWrite<'_> {
    /// Anything stored about the intent differs from this evaluation.
    fn differs(&self, reason: &str) -> bool {
        let (i, e) = (self.intent, self.eval);
        self.changed()
            || i.reason.as_deref() != Some(reason)
            || i.amount_final != e.amount_final
            || i.amount_pending != e.amount_pending
            || i.amount_excess != e.amount_excess
            || i.settled_through != self.settled_through
    }

    /// The status, its exception, or the settlement changed: history-worthy.
    fn changed(&self) -> bool {
        self.eval.status != self.intent.status
            || self.eval.exception != self.intent.exception
            || self.paid_at_ms != self.intent.paid_at_ms
            || self.reversed_at_ms != self.intent.reversed_at_ms
    }
}

impl Store {
    /// Locks and loads up to `limit` intents that changed or whose expiry passed.
    pub(crate) async fn load_reconcile_batch(
        &self,
        tx: &mut Tx,
        now_ms: i64,
        limit: i64,
    ) -> Result<ReconcileBatch, StoreError> {
        #[derive(Serialize)]
        struct Pair {
            network: String,
            address: String,
        }
        // Claim queued addresses; a rollback puts them back.
        let sql = self.sql(
            "DELETE FROM reconcile_queue WHERE id IN \
               (SELECT id FROM reconcile_queue ORDER BY id LIMIT $1 SKIP_LOCKED) \
             RETURNING network, address",
        );
        let mut pairs: Vec<Pair> = Vec::new();
        for r in sqlx::query(&sql).bind(limit).fetch_all(&mut **tx).await? {
            pairs.push(Pair {
                network: r.try_get("network")?,
                address: r.try_get("address")?,
            });
        }
        // Money at an address's twin on the other network belongs to the
        // intent of the address (wrong network).
        let twins: Vec<Pair> = pairs
            .iter()
            .filter_map(|p| {
                let (network, address) = crate::twin::twin(p.network.parse().ok()?, &p.address)?;
                Some(Pair {
                    network: network.as_str().to_owned(),
                    address,
                })
            })
            .collect();
        pairs.extend(twins);
        pairs.sort_unstable_by(|a, b| (&a.network, &a.address).cmp(&(&b.network, &b.address)));
        pairs.dedup_by(|a, b| a.network == b.network && a.address == b.address);

        // Those intents, locked in id order; then those whose expiry passed,
        // skipping any another reconciler holds.
        let sql = self.sql(&format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE id IN \
               (SELECT intents.id FROM intents JOIN {} ON intents.network = v.network AND intents.address = v.address) \
             ORDER BY id FOR_UPDATE",
            self.dialect().rowset("$1", &[("network", Col::Text), ("address", Col::Text)])
        ));
        let mut rows = Vec::new();
        if !pairs.is_empty() {
            rows = sqlx::query(&sql)
                .bind(json(&pairs)?)
                .fetch_all(&mut **tx)
                .await?;
        }
        let sql = self.sql(&format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE status = 'awaiting_payment' AND expires_at < $1 \
             ORDER BY id LIMIT $2 SKIP_LOCKED"
        ));
        rows.extend(
            sqlx::query(&sql)
                .bind(now_ms)
                .bind(limit)
                .fetch_all(&mut **tx)
                .await?,
        );
        let mut batch = ReconcileBatch {
            claimed: pairs.len(),
            ..ReconcileBatch::default()
        };
        let mut ids = HashSet::new();
        for r in &rows {
            let intent = intent_from_row(r)?;
            if ids.insert(intent.id) {
                batch.intents.push(intent);
            }
        }
        if batch.intents.is_empty() {
            return Ok(batch);
        }

        let twins: Vec<(Network, String)> = batch
            .intents
            .iter()
            .filter_map(|i| crate::twin::twin(i.method.network(), &i.address))
            .collect();
        let addresses: Vec<(Network, &str)> = batch
            .intents
            .iter()
            .map(|i| (i.method.network(), i.address.as_str()))
            .chain(twins.iter().map(|(n, a)| (*n, a.as_str())))
            .collect();
        batch.transfers = self.transfers_to(tx, &addresses).await?;
        let references: Vec<&IntentRecord> = batch.intents.iter().collect();
        batch.settled_by = self.settlement_holders(tx, &references).await?;

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

    /// Marks orders paid and credits top-ups, at most once per reference:
    /// the primary key on (kind, reference) and the unique ledger key make a
    /// second settlement impossible, not merely unlikely. Returns the intents
    /// that settled; the others lost their reference to another intent.
    pub(crate) async fn settle(
        &self,
        tx: &mut Tx,
        intents: &[&IntentRecord],
        now_ms: i64,
    ) -> Result<HashSet<i64>, StoreError> {
        #[derive(Serialize)]
        struct Row<'a> {
            kind: &'a str,
            reference: &'a str,
            intent_id: i64,
            account: &'a str,
            usd_cents: i64,
        }
        let rows: Vec<Row<'_>> = intents
            .iter()
            .map(|i| Row {
                kind: i.kind.as_str(),
                reference: &i.reference,
                intent_id: i.id,
                account: &i.account,
                usd_cents: i.usd_cents,
            })
            .collect();
        let sql = format!(
            "INSERT INTO settlements (kind, reference, intent_id, account, usd_cents, settled_at) \
             SELECT kind, reference, intent_id, account, usd_cents, $2 FROM {} WHERE true \
             ON CONFLICT DO NOTHING RETURNING intent_id",
            self.dialect().rowset(
                "$1",
                &[
                    ("kind", Col::Text),
                    ("reference", Col::Text),
                    ("intent_id", Col::Int),
                    ("account", Col::Text),
                    ("usd_cents", Col::Int)
                ]
            )
        );
        let mut settled = HashSet::new();
        for row in sqlx::query(&sql)
            .bind(json(&rows)?)
            .bind(now_ms)
            .fetch_all(&mut **tx)
            .await?
        {
            settled.insert(row.try_get::<i64, _>("intent_id")?);
        }
        let credits: Vec<LedgerPosting<'_>> = intents
            .iter()
            .filter(|i| i.kind == IntentKind::Topup && settled.contains(&i.id))
            .map(|i| LedgerPosting::new(i, i.usd_cents, "topup_credit", format!("topup:{}", i.id)))
            .collect();
        self.post_ledger(tx, &credits, now_ms).await?;
        Ok(settled)
    }

    /// Which intent holds each of these intents' reference settlement.
    pub(crate) async fn settlement_holders(
        &self,
        tx: &mut Tx,
        intents: &[&IntentRecord],
    ) -> Result<HashMap<(IntentKind, String), i64>, StoreError> {
        #[derive(Serialize)]
        struct Key<'a> {
            kind: &'a str,
            reference: &'a str,
        }
        let keys: Vec<Key<'_>> = intents
            .iter()
            .map(|i| Key {
                kind: i.kind.as_str(),
                reference: &i.reference,
            })
            .collect();
        let sql = format!(
            "SELECT s.kind, s.reference, s.intent_id FROM settlements s \
             JOIN {} ON s.kind = v.kind AND s.reference = v.reference",
            self.dialect()
                .rowset("$1", &[("kind", Col::Text), ("reference", Col::Text)])
        );
        let mut out = HashMap::new();
        for row in sqlx::query(&sql)
            .bind(json(&keys)?)
            .fetch_all(&mut **tx)
            .await?
        {
            let kind: String = row.try_get("kind")?;
            let kind = kind
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("settlement kind: {e}")))?;
            out.insert((kind, row.try_get("reference")?), row.try_get("intent_id")?);
        }
        Ok(out)
    }

    /// Takes back top-up credits whose payment a reorg removed. Never an
    /// update of the credit: a new, opposite entry, posted once per intent.
    pub(crate) async fn post_reversals(
        &self,
        tx: &mut Tx,
        intents: &[&IntentRecord],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let reversals: Vec<LedgerPosting<'_>> = intents
            .iter()
            .filter(|i| i.kind == IntentKind::Topup)
            .map(|i| LedgerPosting::new(i, -i.usd_cents, "reversal", format!("reversal:{}", i.id)))
            .collect();
        self.post_ledger(tx, &reversals, now_ms).await
    }

    async fn post_ledger(
        &self,
        tx: &mut Tx,
        postings: &[LedgerPosting<'_>],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if postings.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, intent_id, created_at, memo) \
             SELECT account, usd_cents, entry_kind, entry_key, intent_id, $2, memo FROM {}",
            self.dialect().rowset(
                "$1",
                &[
                    ("account", Col::Text),
                    ("usd_cents", Col::Int),
                    ("entry_kind", Col::Text),
                    ("entry_key", Col::Text),
                    ("intent_id", Col::Int),
                    ("memo", Col::Text)
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

    /// Writes evaluations in bulk; every change of status or exception also
    /// goes to the intent's history and the outbox, in the same transaction.
    /// Returns how many intents changed.
    pub(crate) async fn write_evaluations(
        &self,
        tx: &mut Tx,
        writes: &[ReconcileWrite<'_>],
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        #[derive(Serialize)]
        struct Update<'a> {
            id: i64,
            status: &'a str,
            exception: Option<&'a str>,
            reason: &'a str,
            amount_final: String,
            amount_pending: String,
            amount_excess: String,
            paid_at: Option<i64>,
            settled_through: Option<i64>,
            reversed_at: Option<i64>,
        }
        #[derive(Serialize)]
        struct Event<'a> {
            intent_id: i64,
            status: &'a str,
            exception: Option<&'a str>,
            detail: &'a str,
            payload: String,
        }
        if writes.is_empty() {
            return Ok(0);
        }
        // An intent whose figures and reason are unchanged is not rewritten:
        // finality moving queues every confirming intent on each block.
        let updates: Vec<Update<'_>> = writes
            .iter()
            .map(|w| (w, &w.reason))
            .filter(|(w, reason)| w.differs(reason))
            .map(|(w, reason)| Update {
                id: w.intent.id,
                status: w.eval.status.as_str(),
                exception: w.eval.exception.map(|e| e.as_str()),
                reason,
                amount_final: w.eval.amount_final.to_string(),
                amount_pending: w.eval.amount_pending.to_string(),
                amount_excess: w.eval.amount_excess.to_string(),
                paid_at: w.paid_at_ms,
                settled_through: w.settled_through,
                reversed_at: w.reversed_at_ms,
            })
            .collect();
        let sql = format!(
            "UPDATE intents SET status = v.status, exception = v.exception, reason = v.reason, \
             amount_final = v.amount_final, amount_pending = v.amount_pending, amount_excess = v.amount_excess, \
             paid_at = v.paid_at, settled_through = v.settled_through, reversed_at = v.reversed_at, updated_at = $2 \
             FROM {} WHERE intents.id = v.id",
            self.dialect().rowset(
                "$1",
                &[
                    ("id", Col::Int),
                    ("status", Col::Text),
                    ("exception", Col::Text),
                    ("reason", Col::Text),
                    ("amount_final", Col::Amount),
                    ("amount_pending", Col::Amount),
                    ("amount_excess", Col::Amount),
                    ("paid_at", Col::Int),
                    ("settled_through", Col::Int),
                    ("reversed_at", Col::Int),
                ]
            )
        );
        if !updates.is_empty() {
            sqlx::query(&sql)
                .bind(json(&updates)?)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?;
        }

        let events: Vec<Event<'_>> = writes
            .iter()
            .map(|w| (w, &w.reason))
            .filter(|(w, _)| w.changed())
            .map(|(w, reason)| Event {
                intent_id: w.intent.id,
                status: w.eval.status.as_str(),
                exception: w.eval.exception.map(|e| e.as_str()),
                detail: reason,
                payload: serde_json::json!({
                    "intent_id": w.intent.id,
                    "kind": w.intent.kind.as_str(),
                    "reference": w.intent.reference,
                    "account": w.intent.account,
                    "status": w.eval.status.as_str(),
                    "exception": w.eval.exception.map(|e| e.as_str()),
                    "paid": w.paid_at_ms.is_some() && w.reversed_at_ms.is_none(),
                    "reason": reason,
                })
                .to_string(),
            })
            .collect();
        if !events.is_empty() {
            let columns = [
                ("intent_id", Col::Int),
                ("status", Col::Text),
                ("exception", Col::Text),
                ("detail", Col::Text),
                ("payload", Col::Text),
            ];
            let rowset = self.dialect().rowset("$1", &columns);
            let body = json(&events)?;
            let sql = format!(
                "INSERT INTO intent_events (intent_id, at, kind, status, exception, detail) \
                 SELECT intent_id, $2, 'status_changed', status, exception, detail FROM {rowset}"
            );
            sqlx::query(&sql)
                .bind(&body)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?;
            let sql = format!(
                "INSERT INTO outbox (topic, intent_id, payload, created_at) \
                 SELECT 'intent.status', intent_id, payload, $2 FROM {rowset}"
            );
            sqlx::query(&sql)
                .bind(&body)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?;
        }
        Ok(events.len())
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

//! Writing the status machine's verdicts onto intents, with a history line
//! for each change. Only the reconciler's writer calls this.

use paywatch_core::Amount;
use serde::Serialize;

use super::{json, Col, IntentRecord, Store, StoreError, Tx};
use crate::reconcile::{Exception, Outcome, Status};

/// One intent's new standing, as the writer stores it.
#[derive(Debug)]
pub(crate) struct VerdictWrite<'a> {
    pub intent: &'a IntentRecord,
    pub status: Status,
    pub exception: Option<Exception>,
    pub outcome: Option<Outcome>,
    /// Rendered for people.
    pub reason: String,
    /// Stable, for programs ([`crate::reconcile::Reason::code`]).
    pub reason_code: &'static str,
    pub amount_final: Amount,
    pub amount_pending: Amount,
    pub amount_excess: Amount,
    pub paid_at_ms: Option<i64>,
    pub settled_through: Option<i64>,
    pub reversed_at_ms: Option<i64>,
}

impl VerdictWrite<'_> {
    /// Final money still missing, never below zero.
    pub(crate) fn amount_outstanding(&self) -> Amount {
        self.intent.amount_due.saturating_sub(self.amount_final)
    }

    /// Anything stored about the intent differs from this verdict.
    fn differs(&self) -> bool {
        let i = self.intent;
        self.changed()
            || i.reason.as_deref() != Some(self.reason.as_str())
            || i.reason_code.as_deref() != Some(self.reason_code)
            || i.amount_final != self.amount_final
            || i.amount_pending != self.amount_pending
            || i.amount_excess != self.amount_excess
            || i.settled_through != self.settled_through
    }

    /// The status, its exception, the outcome or the settlement changed:
    /// history-worthy, and news for the storefront.
    pub(crate) fn changed(&self) -> bool {
        let i = self.intent;
        self.status != i.status
            || self.exception != i.exception
            || self.outcome != i.outcome
            || self.paid_at_ms != i.paid_at_ms
            || self.reversed_at_ms != i.reversed_at_ms
    }
}

impl Store {
    /// Writes verdicts in bulk; an intent whose figures and reason are
    /// unchanged is not rewritten (finality moving queues every confirming
    /// intent on each block). Every change also goes to the intent's history.
    pub(crate) async fn write_verdicts(
        &self,
        tx: &mut Tx,
        writes: &[VerdictWrite<'_>],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Update<'a> {
            id: i64,
            status: &'a str,
            exception: Option<&'a str>,
            outcome: Option<&'a str>,
            reason: &'a str,
            reason_code: &'a str,
            amount_final: String,
            amount_short: String,
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
        }
        let updates: Vec<Update<'_>> = writes
            .iter()
            .filter(|w| w.differs())
            .map(|w| Update {
                id: w.intent.id,
                status: w.status.as_str(),
                exception: w.exception.map(|e| e.as_str()),
                outcome: w.outcome.map(|o| o.as_str()),
                reason: &w.reason,
                reason_code: w.reason_code,
                amount_final: w.amount_final.to_string(),
                amount_short: w.amount_outstanding().to_string(),
                amount_pending: w.amount_pending.to_string(),
                amount_excess: w.amount_excess.to_string(),
                paid_at: w.paid_at_ms,
                settled_through: w.settled_through,
                reversed_at: w.reversed_at_ms,
            })
            .collect();
        if !updates.is_empty() {
            let sql = format!(
                "UPDATE intents SET status = v.status, exception = v.exception, outcome = v.outcome, \
                 reason = v.reason, reason_code = v.reason_code, amount_final = v.amount_final, amount_short = v.amount_short, \
                 amount_pending = v.amount_pending, \
                 amount_excess = v.amount_excess, paid_at = v.paid_at, settled_through = v.settled_through, \
                 reversed_at = v.reversed_at, updated_at = $2 \
                 FROM {} WHERE intents.id = v.id",
                self.dialect().rowset(
                    "$1",
                    &[
                        ("id", Col::Int),
                        ("status", Col::Text),
                        ("exception", Col::Text),
                        ("outcome", Col::Text),
                        ("reason", Col::Text),
                        ("reason_code", Col::Text),
                        ("amount_final", Col::Amount),
                        ("amount_short", Col::Amount),
                        ("amount_pending", Col::Amount),
                        ("amount_excess", Col::Amount),
                        ("paid_at", Col::Int),
                        ("settled_through", Col::Int),
                        ("reversed_at", Col::Int),
                    ]
                )
            );
            sqlx::query(&sql)
                .bind(json(&updates)?)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?;
        }
        let events: Vec<Event<'_>> = writes
            .iter()
            .filter(|w| w.changed())
            .map(|w| Event {
                intent_id: w.intent.id,
                status: w.status.as_str(),
                exception: w.exception.map(|e| e.as_str()),
                detail: &w.reason,
            })
            .collect();
        if !events.is_empty() {
            let sql = format!(
                "INSERT INTO intent_events (intent_id, at, kind, status, exception, detail) \
                 SELECT intent_id, $2, 'status_changed', status, exception, detail FROM {}",
                self.dialect().rowset(
                    "$1",
                    &[
                        ("intent_id", Col::Int),
                        ("status", Col::Text),
                        ("exception", Col::Text),
                        ("detail", Col::Text),
                    ]
                )
            );
            sqlx::query(&sql)
                .bind(json(&events)?)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}

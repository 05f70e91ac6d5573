//! Attribution, confirmations, the status machine and ledger postings. The
//! only writer of intent status and of the ledger.

mod evaluate;
mod matcher;
mod status;

use std::collections::HashMap;
use std::sync::Arc;

use paywatch_core::{Amount, Method};
use tracing::{error, info};

pub use evaluate::{evaluate, Evaluation, IntentFacts, Reason, SeenTransfer};
pub use matcher::Matcher;
pub use status::{Exception, Status, UnknownName};

use crate::clock::Clock;
use crate::store::{ReconcileWrite, SettleOutcome, Store, StoreError};

/// What one reconcile pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    pub examined: usize,
    pub changed: usize,
    pub settled: usize,
    pub reversed: usize,
}

#[derive(Debug, Clone)]
pub struct Reconciler {
    store: Store,
    clock: Arc<dyn Clock>,
    tolerance: HashMap<Method, Amount>,
    batch_size: i64,
}

impl Reconciler {
    pub fn new(
        store: Store,
        clock: Arc<dyn Clock>,
        tolerance: HashMap<Method, Amount>,
        batch_size: i64,
    ) -> Reconciler {
        Reconciler {
            store,
            clock,
            tolerance,
            batch_size,
        }
    }

    /// Reconciles until nothing is left to do.
    pub async fn run_until_idle(&self) -> Result<PassReport, StoreError> {
        let mut total = PassReport::default();
        loop {
            let r = self.run_once().await?;
            total.examined += r.examined;
            total.changed += r.changed;
            total.settled += r.settled;
            total.reversed += r.reversed;
            if r.examined == 0 {
                return Ok(total);
            }
        }
    }

    /// One batch in one transaction: status, settlement, ledger and outbox
    /// commit together or not at all.
    pub async fn run_once(&self) -> Result<PassReport, StoreError> {
        let now = self.clock.now_ms();
        let mut tx = self.store.begin().await?;
        let mut batch = self
            .store
            .load_reconcile_batch(&mut tx, now, self.batch_size)
            .await?;
        let mut report = PassReport {
            examined: batch.intents.len(),
            ..PassReport::default()
        };
        if batch.intents.is_empty() {
            tx.rollback().await?;
            return Ok(report);
        }

        let matcher = Matcher::new(
            batch
                .intents
                .iter()
                .map(|(i, _)| (i.method.network(), i.address.as_str())),
        );
        let mut seen: Vec<Vec<SeenTransfer>> = vec![Vec::new(); batch.intents.len()];
        for t in &batch.transfers {
            if let Some(pos) = matcher.attribute(t.network, &t.to) {
                seen[pos].push(t.seen());
            }
        }

        for ((intent, seq), transfers) in batch.intents.iter().zip(&seen) {
            let reference_key = (intent.kind, intent.reference.clone());
            let mut facts = IntentFacts {
                id: intent.id,
                method: intent.method,
                amount_due: intent.amount_due,
                expires_at_ms: intent.expires_at_ms,
                status: intent.status,
                exception: intent.exception,
                settled_at_ms: intent.paid_at_ms,
                reversed: intent.reversed_at_ms.is_some(),
                reference_settled_by: batch
                    .settled_by
                    .get(&reference_key)
                    .copied()
                    .filter(|id| *id != intent.id),
                transfers,
                final_height: batch.final_heights.get(&intent.method.network()).copied(),
                now_ms: now,
                tolerance: self
                    .tolerance
                    .get(&intent.method)
                    .copied()
                    .unwrap_or_default(),
            };
            let mut eval = evaluate(&facts);
            let mut paid_at = intent.paid_at_ms;
            if eval.settle {
                match self.store.settle(&mut tx, intent, now).await? {
                    SettleOutcome::Settled => {
                        paid_at = Some(now);
                        report.settled += 1;
                        batch.settled_by.insert(reference_key, intent.id);
                        info!(intent = intent.id, kind = intent.kind.as_str(), reference = %intent.reference,
                              account = %intent.account, "payment final: settled");
                    }
                    SettleOutcome::TakenBy(other) => {
                        facts.reference_settled_by = Some(other);
                        eval = evaluate(&facts);
                    }
                }
            }
            let mut reversed_at = intent.reversed_at_ms;
            if eval.reverse {
                self.store.post_reversal(&mut tx, intent, now).await?;
                reversed_at = Some(now);
                report.reversed += 1;
                error!(alert = "credit_reversed", intent = intent.id, kind = intent.kind.as_str(),
                       reference = %intent.reference, account = %intent.account,
                       "a reorg removed final money after settlement; credit reversed, intent needs review");
            }
            let write = ReconcileWrite {
                intent,
                seq: *seq,
                eval: &eval,
                paid_at_ms: paid_at,
                reversed_at_ms: reversed_at,
            };
            if self.store.write_evaluation(&mut tx, &write, now).await? {
                report.changed += 1;
            }
        }
        if report.changed > 0 {
            self.store.notify_outbox(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(report)
    }
}

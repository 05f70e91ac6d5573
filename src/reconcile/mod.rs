//! Attribution, confirmations, the status machine and ledger postings. The
//! only writer of intent status and of the ledger.

mod evaluate;
mod matcher;
mod status;

use std::collections::HashMap;
use std::sync::Arc;

use paywatch_core::{Amount, Method};
use tracing::{error, info};

pub use evaluate::{evaluate, txid_digest, Evaluation, IntentFacts, Reason, SeenTransfer};
pub use matcher::{Grouping, Matcher};

use crate::store::TransferRecord;
pub use status::{Exception, Status, UnknownName};

use crate::clock::Clock;
use crate::store::{IntentRecord, ReconcileWrite, Store, StoreError};

/// What one reconcile pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    pub examined: usize,
    pub changed: usize,
    pub settled: usize,
    pub reversed: usize,
    /// Queue entries consumed, whether or not an intent was behind them.
    pub claimed: usize,
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
            total.claimed += r.claimed;
            if r.examined == 0 && r.claimed == 0 {
                return Ok(total);
            }
        }
    }

    /// One batch in one transaction: status, settlement, ledger and outbox
    /// commit together or not at all.
    pub async fn run_once(&self) -> Result<PassReport, StoreError> {
        let now = self.clock.now_ms();
        let mut tx = self.store.begin().await?;
        let batch = self
            .store
            .load_reconcile_batch(&mut tx, now, self.batch_size)
            .await?;
        let mut report = PassReport {
            examined: batch.intents.len(),
            claimed: batch.claimed,
            ..PassReport::default()
        };
        if batch.intents.is_empty() {
            // Commit even so: the claimed queue entries had no intent to look at.
            tx.commit().await?;
            return Ok(report);
        }

        let matcher = Matcher::new(
            batch
                .intents
                .iter()
                .map(|i| (i.method.network(), i.address.as_str())),
        );
        let attributed = Attributed::rows(&matcher, &batch.transfers, batch.intents.len());

        let facts = |position: usize, settled_by: Option<i64>| {
            let intent = &batch.intents[position];
            IntentFacts {
                id: intent.id,
                method: intent.method,
                amount_due: intent.amount_due,
                expires_at_ms: intent.expires_at_ms,
                status: intent.status,
                exception: intent.exception,
                settled_at_ms: intent.paid_at_ms,
                settled_through: intent.settled_through,
                reversed: intent.reversed_at_ms.is_some(),
                reference_settled_by: settled_by.filter(|id| *id != intent.id),
                transfers: attributed.of(position),
                final_height: batch.final_heights.get(&intent.method.network()).copied(),
                now_ms: now,
                tolerance: self
                    .tolerance
                    .get(&intent.method)
                    .copied()
                    .unwrap_or_default(),
            }
        };
        let settled_by = |intent: &IntentRecord| {
            batch
                .settled_by
                .get(&(intent.kind, intent.reference.clone()))
                .copied()
        };
        let mut evals: Vec<Evaluation> = batch
            .intents
            .iter()
            .enumerate()
            .map(|(p, i)| evaluate(&facts(p, settled_by(i))))
            .collect();

        // Settle in bulk; an intent that finds its reference taken by another
        // is evaluated again as the duplicate it is.
        let candidates: Vec<&IntentRecord> = batch
            .intents
            .iter()
            .zip(&evals)
            .filter(|(_, e)| e.settle)
            .map(|(i, _)| i)
            .collect();
        let settled = if candidates.is_empty() {
            Default::default()
        } else {
            self.store.settle(&mut tx, &candidates, now).await?
        };
        let lost: Vec<&IntentRecord> = candidates
            .iter()
            .copied()
            .filter(|i| !settled.contains(&i.id))
            .collect();
        if !lost.is_empty() {
            let holders = self.store.settlement_holders(&mut tx, &lost).await?;
            for (p, intent) in batch.intents.iter().enumerate() {
                if evals[p].settle && !settled.contains(&intent.id) {
                    evals[p] = evaluate(&facts(
                        p,
                        holders
                            .get(&(intent.kind, intent.reference.clone()))
                            .copied(),
                    ));
                }
            }
        }
        let reversing: Vec<&IntentRecord> = batch
            .intents
            .iter()
            .zip(&evals)
            .filter(|(_, e)| e.reverse)
            .map(|(i, _)| i)
            .collect();
        self.store.post_reversals(&mut tx, &reversing, now).await?;

        let writes: Vec<ReconcileWrite<'_>> = batch
            .intents
            .iter()
            .zip(&evals)
            .enumerate()
            .map(|(position, (intent, eval))| ReconcileWrite {
                intent,
                eval,
                paid_at_ms: if settled.contains(&intent.id) {
                    Some(now)
                } else {
                    intent.paid_at_ms
                },
                settled_through: if settled.contains(&intent.id) {
                    attributed.of(position).iter().map(|t| t.id).max()
                } else {
                    intent.settled_through
                },
                reversed_at_ms: if eval.reverse {
                    Some(now)
                } else {
                    intent.reversed_at_ms
                },
                reason: eval.reason.render(intent.method, |id| {
                    batch.transfers.iter().find(|t| t.id == id).map(|t| {
                        format!(
                            "{} base units of {} on {} in {}",
                            t.amount,
                            t.asset.code(),
                            t.network,
                            t.txid
                        )
                    })
                }),
            })
            .collect();
        report.changed = self.store.write_evaluations(&mut tx, &writes, now).await?;
        if report.changed > 0 {
            self.store.notify_outbox(&mut tx).await?;
        }
        tx.commit().await?;

        report.settled = settled.len();
        report.reversed = reversing.len();
        for i in candidates.iter().filter(|i| settled.contains(&i.id)) {
            info!(intent = i.id, kind = i.kind.as_str(), reference = %i.reference, account = %i.account,
                  usd_cents = i.usd_cents, "payment final: settled");
        }
        for i in &reversing {
            error!(alert = "credit_reversed", intent = i.id, kind = i.kind.as_str(), reference = %i.reference,
                   account = %i.account, "a reorg removed final money after settlement; credit reversed, intent needs review");
        }
        Ok(report)
    }
}

/// A batch's transfers attributed to its intents: each intent's transfers as
/// plain data, side by side, for the status machine to read in order.
#[derive(Debug)]
pub struct Attributed<'a> {
    offsets: Vec<u32>,
    transfers: Vec<SeenTransfer<'a>>,
}

impl<'a> Attributed<'a> {
    /// One pass over the rows (plain data and lookup together), then a
    /// counting sort by owner. A row no intent owns by its own address is
    /// tried at its address's twin (money sent on the wrong network); rows
    /// still unowned are left out.
    pub fn rows(matcher: &Matcher, rows: &'a [TransferRecord], intents: usize) -> Attributed<'a> {
        let mut seen = Vec::with_capacity(rows.len());
        let mut owners = Vec::with_capacity(rows.len());
        matcher.attribute_all(
            rows.iter().map(|t| {
                seen.push(t.seen());
                (t.network, t.to.as_str())
            }),
            &mut owners,
        );
        for (owner, t) in owners.iter_mut().zip(rows) {
            if owner.is_none() {
                *owner = crate::twin::twin(t.network, &t.to)
                    .and_then(|(network, address)| matcher.attribute(network, &address))
                    .map(|p| p as u32);
            }
        }
        let groups = Grouping::by_owner(&owners, intents);
        let transfers = groups.members.iter().map(|t| seen[*t as usize]).collect();
        Attributed {
            offsets: groups.offsets,
            transfers,
        }
    }

    /// The transfers of the intent at `position` in the batch.
    pub fn of(&self, position: usize) -> &[SeenTransfer<'a>] {
        &self.transfers[self.offsets[position] as usize..self.offsets[position + 1] as usize]
    }

    pub fn len(&self) -> usize {
        self.transfers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.transfers.is_empty()
    }
}

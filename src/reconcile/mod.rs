//! Attribution, confirmations, the status machine and ledger postings: the
//! one writer of intent status, settlements and the ledger. Support's
//! decisions and payments from the balance are inputs it reads, written
//! in the same transaction as the verdict they lead to.

mod balance;
mod case_reading;
mod credit_back;
mod decide;
mod events;
mod excess;
mod facts;
mod matcher;
mod reason;
mod refund_check;
mod settlement_names;
mod status;
mod support;
pub mod time_policy;
mod tolerance;
mod writer;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use paywatch_core::{Method, Network};
use tracing::{error, info, warn};

pub use balance::{BalancePayment, DebitOutcome};
pub(crate) use case_reading::{CaseReading, PaymentReading};
pub use credit_back::{BalanceCredit, CreditOutcome};
pub use decide::{decide, txid_digest, ExcessMove, MoneyMove, Verdict};
pub use facts::{
    AcceptedExcess, Action, Closing, IntentFacts, Reassigned, SeenTransfer, SettledBy,
    SettlementFacts, Via,
};
pub use matcher::{Grouping, Matcher};
pub use reason::Reason;
pub use refund_check::RefundState;
pub use status::{Exception, Outcome, Status, UnknownName};
pub(crate) use support::refund_network;
pub use support::{ActionOutcome, CaseAction};
pub use time_policy::default_confirm_window_secs;
pub use tolerance::{Tolerance, MAX_BASIS_POINTS};

use crate::clock::Clock;
use crate::store::{Store, StoreError, TransferRecord, Tx};

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

/// How often a transaction that lost a race on PostgreSQL's snapshot
/// (another wrote what it read) runs again before the error is reported:
/// enough for dozens of debits of one account arriving at once.
const CONFLICT_RETRIES: usize = 60;

/// A day: a refund broadcast with a low fee is seen in the mempool long
/// before it is mined, and one never seen in a day was not sent as recorded.
pub const DEFAULT_REFUND_CHECK_SECS: i64 = 86_400;

#[derive(Debug, Clone)]
pub struct Reconciler {
    store: Store,
    clock: Arc<dyn Clock>,
    policy: writer::Policy,
    batch_size: i64,
}

impl Reconciler {
    pub fn new(
        store: Store,
        clock: Arc<dyn Clock>,
        tolerance: HashMap<Method, Tolerance>,
        batch_size: i64,
    ) -> Reconciler {
        Reconciler {
            store,
            clock,
            policy: writer::Policy {
                tolerance,
                confirm_windows: HashMap::new(),
                dust_floors: HashMap::new(),
                refund_check_ms: DEFAULT_REFUND_CHECK_SECS * 1000,
            },
            batch_size,
        }
    }

    /// Confirm windows for intents made before each kept its own deadline.
    pub fn with_confirm_windows(mut self, windows: HashMap<Network, i64>) -> Reconciler {
        self.policy.confirm_windows = windows;
        self
    }

    /// Dust floors per method (`reconcile.dust_floor`), recorded on each
    /// settlement made from now on, which they judge for as long as it
    /// stands.
    pub fn with_dust_floors(
        mut self,
        floors: HashMap<Method, paywatch_core::Amount>,
    ) -> Reconciler {
        self.policy.dust_floors = floors;
        self
    }

    /// How long a refund's transaction may take to be seen paying its
    /// destination (`reconcile.refund_check_secs`), recorded with each
    /// refund when it is sent.
    pub fn with_refund_check_secs(mut self, secs: i64) -> Reconciler {
        self.policy.refund_check_ms = secs.saturating_mul(1000);
        self
    }

    pub fn store(&self) -> &Store {
        &self.store
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
        self.retrying(|| self.pass()).await
    }

    async fn pass(&self) -> Result<PassReport, StoreError> {
        let now = self.clock.now_ms();
        let mut tx = self.store.begin_snapshot().await?;
        let pairs = self.store.claim_queue(&mut tx, self.batch_size).await?;
        let intents = self
            .store
            .lock_intents_at(&mut tx, &pairs, now, self.batch_size)
            .await?;
        if intents.is_empty() {
            // Commit even so: the claimed queue entries had no intent to look at.
            tx.commit().await?;
            return Ok(PassReport {
                claimed: pairs.len(),
                ..PassReport::default()
            });
        }
        let examined = intents.len();
        let facts = self.store.load_facts(&mut tx, intents).await?;
        let written = self.write(&mut tx, &facts, now, Vec::new()).await?;
        tx.commit().await?;
        self.log(&facts, &written);
        Ok(written.report(examined, pairs.len()))
    }

    /// Decides and writes `facts` in `tx`, with `extra` outbox rows (a
    /// decision, a debit) after the writer's own.
    async fn write(
        &self,
        tx: &mut Tx,
        facts: &crate::store::Facts,
        now: i64,
        extra: Vec<crate::store::OutboxEvent>,
    ) -> Result<writer::Written, StoreError> {
        let mut written = writer::write(&self.store, tx, facts, &self.policy, now).await?;
        written.events.extend(extra);
        self.store.insert_outbox(tx, &written.events, now).await?;
        Ok(written)
    }

    fn log(&self, facts: &crate::store::Facts, written: &writer::Written) {
        for i in facts.intents.iter() {
            if written.settled.contains(&i.id) {
                info!(intent = i.id, kind = i.kind.as_str(), reference = %i.reference, account = %i.account,
                      usd_cents = i.usd_cents, "payment final: settled");
            }
            if written.reversed.contains(&i.id) {
                error!(alert = "credit_reversed", intent = i.id, kind = i.kind.as_str(), reference = %i.reference,
                       account = %i.account, "what a settlement stood on is gone; credit reversed, intent needs review");
            }
            if written.recredited.contains(&i.id) {
                warn!(intent = i.id, kind = i.kind.as_str(), reference = %i.reference, account = %i.account,
                      "the money of a reversed settlement is back and final: credited again");
            }
        }
    }

    /// Runs `attempt` again while it loses a race on PostgreSQL's snapshot:
    /// each attempt is a whole transaction that wrote nothing when it failed.
    async fn retrying<T, F, Fut>(&self, attempt: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut tries = 0;
        loop {
            match attempt().await {
                Err(e) if e.is_retryable_conflict() && tries < CONFLICT_RETRIES => {
                    tries += 1;
                    // Spread the retries of racing transactions apart.
                    let jitter = crate::store::now_ms().rem_euclid(7) as u64;
                    let wait = (2u64 << tries.min(6)) + jitter;
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                other => return other,
            }
        }
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

//! What the status machine makes of each payment on a case, for a person:
//! whether it was made after the intent expired, which support decision
//! claims it, and whether the intent's settlement stands on it. Read from
//! the same facts and rules the writer decides by, so a case never tells a
//! story the status does not.

use std::collections::{HashMap, HashSet};

use super::facts::Action;
use super::{writer, Reconciler};
use crate::store::{IntentRecord, StoreError, TransferRecord};

/// One recorded row of a payment, as the status machine reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PaymentReading {
    /// The intent's own money, made after it expired: never what a
    /// settlement or an excess stands on.
    pub(crate) late: bool,
    /// The intent's standing settlement stands on this payment.
    pub(crate) settles: bool,
    /// The support decision that claims this payment, and what it did.
    pub(crate) claimed_by: Option<(i64, Action)>,
}

/// Each row of a case's transfers, by transfer id.
#[derive(Debug, Default)]
pub(crate) struct CaseReading {
    rows: HashMap<i64, PaymentReading>,
}

impl CaseReading {
    pub(crate) fn of(&self, transfer_id: i64) -> PaymentReading {
        self.rows.get(&transfer_id).copied().unwrap_or_default()
    }
}

impl Reconciler {
    /// Reads `intent`'s payments as the next reconcile pass would. Writes
    /// nothing.
    pub(crate) async fn case_reading(
        &self,
        intent: IntentRecord,
    ) -> Result<CaseReading, StoreError> {
        let now = self.clock.now_ms();
        let mut tx = self.store.begin_snapshot().await?;
        let facts = self.store.load_facts(&mut tx, vec![intent]).await?;
        tx.rollback().await?;
        let Some(intent) = facts.intents.first() else {
            return Ok(CaseReading::default());
        };
        let verdict = writer::verdicts(&facts, &self.policy, now)
            .into_iter()
            .find(|(id, _)| *id == intent.id)
            .map(|(_, v)| v);
        let made_late = verdict.as_ref().map_or(&[][..], |v| v.made_late.as_slice());
        // A payment is its chain identity: every row of it (a re-mined
        // copy, a mempool sighting) reads the same. Keyed once, so a case
        // with endless dust costs one pass, not one per pair of rows.
        let late: HashSet<_> = facts
            .transfers
            .iter()
            .filter(|t| made_late.contains(&t.id))
            .map(payment)
            .collect();
        let mut claimed = HashMap::new();
        for d in &facts.decisions {
            for r in facts
                .basis
                .get(&d.id)
                .map_or(&[][..], |b| b.rows.as_slice())
            {
                claimed.entry(payment(r)).or_insert((d.id, d.action));
            }
        }
        let settlement = facts
            .settlements
            .get(&(intent.kind, intent.reference.clone()))
            .filter(|s| s.intent_id == Some(intent.id) && s.reversed_at_ms.is_none());
        // What a settlement by the chain stands on: what the writer names
        // (`settlement_names`), the intent's timely money standing final
        // less what support gave away; what support's settled on: the
        // payments its decision named.
        let stands_on: HashSet<_> = match settlement {
            Some(s) if s.via == "chain" => {
                let standing: HashSet<i64> = verdict
                    .as_ref()
                    .map(|v| v.standing_rows.iter().copied().collect())
                    .unwrap_or_default();
                facts
                    .transfers
                    .iter()
                    .filter(|t| standing.contains(&t.id))
                    .map(payment)
                    .collect()
            }
            Some(s) => s
                .decision_id
                .and_then(|d| facts.basis.get(&d))
                .map_or(&[][..], |b| b.rows.as_slice())
                .iter()
                .map(payment)
                .collect(),
            None => HashSet::new(),
        };

        let mut rows = HashMap::new();
        for t in &facts.transfers {
            let live = t.success && t.orphaned_at_ms.is_none();
            rows.insert(
                t.id,
                PaymentReading {
                    late: late.contains(&payment(t)),
                    settles: live && stands_on.contains(&payment(t)),
                    claimed_by: claimed.get(&payment(t)).copied(),
                },
            );
        }
        Ok(CaseReading { rows })
    }
}

/// A payment's chain identity: its network, transaction and output (or
/// log) index.
fn payment(t: &TransferRecord) -> (paywatch_core::Network, &str, u32) {
    (t.network, t.txid.as_str(), t.index)
}

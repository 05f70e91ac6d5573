//! Which payments each standing settlement stands on, named by their chain
//! identity so a person, `paywatch check` and the next reorg read the same
//! thing the status machine counted. A settlement by the chain stands on
//! the intent's timely money still standing final (less what support gave
//! away); one by support on the payments its decision named. A reversed
//! settlement keeps the names it had: what the reorg took it off.

use std::collections::{HashMap, HashSet};

use super::decide::{MoneyMove, Verdict};
use super::facts::Via;
use crate::store::{DecisionPayment, Facts, PaymentKey, SettlementNames, TransferRecord};

/// The names to write: for every settlement made or credited again in this
/// pass, and every standing one whose money changed.
pub(super) fn to_write(
    facts: &Facts,
    verdicts: &[Verdict],
    made: &HashMap<Option<i64>, i64>,
) -> Vec<SettlementNames> {
    let rows: HashMap<i64, &TransferRecord> = facts.transfers.iter().map(|t| (t.id, t)).collect();
    let mut out = Vec::new();
    for (i, v) in facts.intents.iter().zip(verdicts) {
        let own = facts
            .settlements
            .get(&(i.kind, i.reference.clone()))
            .filter(|s| s.intent_id == Some(i.id));
        let via_of = |via: &str, decision| match via {
            "support" => Via::Support { decision },
            _ => Via::Chain,
        };
        let (via, anew) = match v.money {
            MoneyMove::Settle(via) if made.contains_key(&Some(i.id)) => (via, true),
            MoneyMove::Recredit => match own {
                Some(s) => (via_of(&s.via, s.decision_id), true),
                None => continue,
            },
            MoneyMove::None => match own.filter(|s| s.reversed_at_ms.is_none()) {
                Some(s) => (via_of(&s.via, s.decision_id), false),
                None => continue,
            },
            _ => continue,
        };
        let stands_on: Vec<&TransferRecord> = match via {
            Via::Chain => v
                .standing_rows
                .iter()
                .filter_map(|id| rows.get(id).copied())
                .collect(),
            Via::Support { decision: Some(d) } => facts
                .basis
                .get(&d)
                .map(|b| b.rows.iter().collect())
                .unwrap_or_default(),
            // Made before decisions named their payments: what it covered
            // is not known, and nothing on chain undoes it.
            Via::Support { decision: None } => continue,
        };
        let mut seen = HashSet::new();
        let payments: Vec<DecisionPayment> = stands_on
            .into_iter()
            .filter(|t| seen.insert(t.payment_key()))
            .map(TransferRecord::named_payment)
            .collect();
        let named: HashSet<&PaymentKey> = facts
            .settlement_names
            .get(&i.id)
            .map(|n| n.iter().collect())
            .unwrap_or_default();
        let unchanged =
            named.len() == payments.len() && payments.iter().all(|p| named.contains(&p.key));
        if anew || !unchanged {
            out.push(SettlementNames {
                intent_id: i.id,
                payments,
            });
        }
    }
    out
}

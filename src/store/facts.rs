//! What reconcile reads about a batch of locked intents: their transfers,
//! settlements, support's decisions, the payments those decisions stood on,
//! and each network's final height. Read inside the caller's transaction,
//! which on PostgreSQL is one snapshot (see [`Store::begin_snapshot`]).

use std::collections::HashMap;

use paywatch_core::Network;
use serde::Serialize;
use sqlx::Row;

use super::intents::{intent_from_row, INTENT_COLUMNS};
use super::transfers::{transfer_from_row, TRANSFER_COLUMNS};
use super::{json, Col, IntentRecord, Store, StoreError, TransferRecord, Tx};
use crate::reconcile::{Action, SettledBy};
use crate::IntentKind;

/// A settlement as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettlementRow {
    pub intent_id: Option<i64>,
    pub via: String,
    pub decision_id: Option<i64>,
    pub settled_at_ms: i64,
    pub reversed_at_ms: Option<i64>,
    /// Credits posted so far; the next reversal or credit is keyed by it.
    pub credits: i64,
    /// The tolerance it was made under (basis points, cap in base units);
    /// `None` before settlements kept their terms.
    pub tolerance_bp: Option<i64>,
    pub tolerance_max: Option<String>,
    /// Its dust floor in base units; `None`: no floor.
    pub dust_floor: Option<String>,
}

/// A decision as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecisionRow {
    pub id: i64,
    pub intent_id: i64,
    pub action: Action,
    pub to_intent: Option<i64>,
    pub at_ms: i64,
    pub through: Option<i64>,
    /// The intent's own method's money the decision stood on, base units;
    /// for an accept of an overpayment's excess, the excess.
    pub amount: u128,
}

/// The payments one decision claimed, with every row recorded for them.
#[derive(Debug, Default)]
pub(crate) struct BasisRows {
    pub payments: usize,
    pub rows: Vec<TransferRecord>,
}

/// Everything the status machine needs about `intents`.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    pub intents: Vec<IntentRecord>,
    /// At the intents' addresses and their twins, orphaned rows included.
    pub transfers: Vec<TransferRecord>,
    /// The settlement of each reference in the batch.
    pub settlements: HashMap<(IntentKind, String), SettlementRow>,
    /// By intent, the payments its standing settlement is named as standing
    /// on (`settlement_payments`).
    pub settlement_names: HashMap<i64, Vec<super::PaymentKey>>,
    /// Decisions on the intents, or reassigning to them, in id order.
    pub decisions: Vec<DecisionRow>,
    /// By decision id, for decisions that claim payments: those that settle
    /// (accept, reassign) and those that owe money back (refund_required).
    pub basis: HashMap<i64, BasisRows>,
    pub final_heights: HashMap<Network, u64>,
    /// By intent, its overpayment's excess as the ledger holds it.
    pub excess_ledger: HashMap<i64, ExcessLedger>,
    /// By intent, the refund support required.
    pub refunds: HashMap<i64, super::RefundRow>,
    /// Every row recorded for the refunds' transactions, orphaned included.
    pub refund_rows: Vec<TransferRecord>,
}

/// An intent's excess entries in the ledger (`excess:…`, `excess_reversal:…`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExcessLedger {
    /// Credits less their taking back, in cents: above 0 while credited.
    pub net_cents: i64,
    /// Credits posted so far: the next credit is round `credits + 1`.
    pub credits: i64,
}

impl Facts {
    /// Who holds the reference's standing settlement, if anyone. A reversed
    /// settlement holds nothing: other valid money may pay the reference
    /// again (the status contract's reversed-then-paid policy).
    pub fn settled_by(&self, kind: IntentKind, reference: &str) -> Option<SettledBy> {
        self.settlements
            .get(&(kind, reference.to_owned()))
            .filter(|s| s.reversed_at_ms.is_none())
            .map(|s| match s.intent_id {
                Some(id) => SettledBy::Intent(id),
                None => SettledBy::Balance,
            })
    }
}

#[derive(Serialize)]
struct Id {
    id: i64,
}

impl Store {
    /// Locks the intents at these addresses (and at their twins), then up to
    /// `limit` of those whose expiry passed, skipping any another
    /// reconciler holds; in id order, so two passes never deadlock.
    pub(crate) async fn lock_intents_at(
        &self,
        tx: &mut Tx,
        pairs: &[(String, String)],
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        #[derive(Serialize)]
        struct Pair {
            network: String,
            address: String,
        }
        let mut keys: Vec<Pair> = Vec::with_capacity(pairs.len() * 2);
        for (network, address) in pairs {
            // Money at an address's twin on the other network belongs to the
            // intent of the address (wrong network).
            if let Some((n, a)) = network
                .parse()
                .ok()
                .and_then(|n| crate::twin::twin(n, address))
            {
                keys.push(Pair {
                    network: n.as_str().to_owned(),
                    address: a,
                });
            }
            keys.push(Pair {
                network: network.clone(),
                address: address.clone(),
            });
        }
        keys.sort_unstable_by(|a, b| (&a.network, &a.address).cmp(&(&b.network, &b.address)));
        keys.dedup_by(|a, b| a.network == b.network && a.address == b.address);

        let mut ids: Vec<i64> = Vec::new();
        if !keys.is_empty() {
            let sql = format!(
                "SELECT intents.id FROM intents JOIN {} ON intents.network = v.network AND intents.address = v.address",
                self.dialect().rowset("$1", &[("network", Col::Text), ("address", Col::Text)])
            );
            for r in sqlx::query(&sql)
                .bind(json(&keys)?)
                .fetch_all(&mut **tx)
                .await?
            {
                ids.push(r.try_get("id")?);
            }
        }
        // A reassign's target stands on payments at its source's address,
        // which is what a chain event queues: the target is looked at too.
        if !ids.is_empty() {
            let body: Vec<Id> = ids.iter().map(|id| Id { id: *id }).collect();
            let sql = format!(
                "SELECT DISTINCT to_intent FROM decisions WHERE action = 'reassign' \
                 AND to_intent IS NOT NULL AND intent_id IN (SELECT id FROM {})",
                self.dialect().rowset("$1", &[("id", Col::Int)])
            );
            for r in sqlx::query(&sql)
                .bind(json(&body)?)
                .fetch_all(&mut **tx)
                .await?
            {
                ids.push(r.try_get("to_intent")?);
            }
        }
        // Money at a refund's destination may be the refund's transaction.
        ids.extend(self.intents_refunding_to(tx, pairs).await?);
        ids.extend(self.refunds_past_deadline(tx, now_ms, limit).await?);
        let mut intents = self.lock_intents(tx, &ids).await?;
        let mut rows = Vec::new();
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
        for r in &rows {
            let intent = intent_from_row(r)?;
            if !intents.iter().any(|i| i.id == intent.id) {
                intents.push(intent);
            }
        }
        Ok(intents)
    }

    /// Locks these intents, in id order; missing ids are left out.
    pub(crate) async fn lock_intents(
        &self,
        tx: &mut Tx,
        ids: &[i64],
    ) -> Result<Vec<IntentRecord>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let body: Vec<Id> = ids.iter().map(|id| Id { id: *id }).collect();
        let sql = self.sql(&format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE id IN (SELECT id FROM {}) ORDER BY id FOR_UPDATE",
            self.dialect().rowset("$1", &[("id", Col::Int)])
        ));
        let rows = sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// The open intents of a reference, locked.
    pub(crate) async fn lock_intents_of_reference(
        &self,
        tx: &mut Tx,
        kind: IntentKind,
        reference: &str,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE kind = $1 AND reference = $2 ORDER BY id FOR_UPDATE"
        ));
        let rows = sqlx::query(&sql)
            .bind(kind.as_str())
            .bind(reference)
            .fetch_all(&mut **tx)
            .await?;
        rows.iter().map(intent_from_row).collect()
    }

    /// Everything the status machine reads about `intents` (locked by the caller).
    pub(crate) async fn load_facts(
        &self,
        tx: &mut Tx,
        intents: Vec<IntentRecord>,
    ) -> Result<Facts, StoreError> {
        let mut facts = Facts {
            intents,
            ..Facts::default()
        };
        if facts.intents.is_empty() {
            return Ok(facts);
        }
        let twins: Vec<(Network, String)> = facts
            .intents
            .iter()
            .filter_map(|i| crate::twin::twin(i.method.network(), &i.address))
            .collect();
        let addresses: Vec<(Network, &str)> = facts
            .intents
            .iter()
            .map(|i| (i.method.network(), i.address.as_str()))
            .chain(twins.iter().map(|(n, a)| (*n, a.as_str())))
            .collect();
        facts.transfers = self.transfers_to(tx, &addresses).await?;
        let earliest_expiry = facts.intents.iter().map(|i| i.expires_at_ms).min();
        self.look_up_next_blocks(tx, &mut facts.transfers, earliest_expiry)
            .await?;
        if let Some(pause) = &self.read_pause {
            pause.reached.notify_one();
            pause.resume.notified().await;
        }
        facts.settlements = self.settlements_of(tx, &facts.intents).await?;
        let ids: Vec<i64> = facts.intents.iter().map(|i| i.id).collect();
        // Most passes look at intents nothing has settled: no read here.
        let standing: Vec<i64> = facts
            .intents
            .iter()
            .filter(|i| {
                facts
                    .settlements
                    .get(&(i.kind, i.reference.clone()))
                    .is_some_and(|s| s.intent_id == Some(i.id) && s.reversed_at_ms.is_none())
            })
            .map(|i| i.id)
            .collect();
        facts.settlement_names = self.settlement_names(tx, &standing).await?;
        facts.decisions = self.decisions_on(tx, &ids).await?;
        let settling: Vec<i64> = facts
            .decisions
            .iter()
            .filter(|d| {
                matches!(
                    d.action,
                    Action::Accept | Action::Reassign | Action::RefundRequired
                )
            })
            .map(|d| d.id)
            .chain(facts.settlements.values().filter_map(|s| s.decision_id))
            .collect();
        facts.basis = self.basis_of(tx, &settling).await?;
        // Only an accept can credit an excess: most passes read nothing here.
        let accepted: Vec<i64> = facts
            .decisions
            .iter()
            .filter(|d| d.action == Action::Accept && ids.contains(&d.intent_id))
            .map(|d| d.intent_id)
            .collect();
        if !accepted.is_empty() {
            facts.excess_ledger = self.excess_ledger_of(tx, &accepted).await?;
        }
        // Only intents support required a refund on: most passes read one
        // empty index range here.
        if facts
            .decisions
            .iter()
            .any(|d| d.action == Action::RefundRequired)
        {
            facts.refunds = self.refunds_of(tx, &ids).await?;
            let sent: Vec<(Network, &str)> = facts
                .refunds
                .values()
                .flat_map(|r| r.txids.iter().map(|t| (r.network, t.as_str())))
                .collect();
            facts.refund_rows = self.rows_of_transactions(tx, &sent).await?;
        }
        for row in sqlx::query("SELECT network, final_height FROM chain_state")
            .fetch_all(&mut **tx)
            .await?
        {
            let network: String = row.try_get("network")?;
            let height: Option<i64> = row.try_get("final_height")?;
            if let (Ok(network), Some(height)) = (network.parse::<Network>(), height) {
                facts.final_heights.insert(network, height as u64);
            }
        }
        Ok(facts)
    }

    /// For payments first seen after `seen_after` (an expiry), the time of
    /// the block after theirs on the chain: evidence that a payment seen
    /// late was made in time (see `reconcile::time_policy`).
    async fn look_up_next_blocks(
        &self,
        tx: &mut Tx,
        transfers: &mut [TransferRecord],
        seen_after: Option<i64>,
    ) -> Result<(), StoreError> {
        #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
        struct At {
            network: &'static str,
            height: i64,
        }
        let Some(seen_after) = seen_after else {
            return Ok(());
        };
        let late = |t: &TransferRecord| {
            t.first_seen_ms > seen_after
                && t.orphaned_at_ms.is_none()
                && t.block_hash != super::MEMPOOL_BLOCK
        };
        let mut wanted: Vec<At> = transfers
            .iter()
            .filter(|t| late(t))
            .filter_map(|t| {
                Some(At {
                    network: t.network.as_str(),
                    height: i64::try_from(t.block_height).ok()?.checked_add(1)?,
                })
            })
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        wanted.sort_unstable();
        wanted.dedup();
        let sql = format!(
            "SELECT b.network, b.height, b.block_time FROM blocks b JOIN {} \
             ON b.network = v.network AND b.height = v.height WHERE b.orphaned_at IS NULL",
            self.dialect()
                .rowset("$1", &[("network", Col::Text), ("height", Col::Int)])
        );
        let mut times: HashMap<(String, i64), i64> = HashMap::new();
        for r in sqlx::query(&sql)
            .bind(json(&wanted)?)
            .fetch_all(&mut **tx)
            .await?
        {
            times.insert(
                (r.try_get("network")?, r.try_get("height")?),
                r.try_get("block_time")?,
            );
        }
        for t in transfers.iter_mut().filter(|t| late(t)) {
            let next = i64::try_from(t.block_height)
                .unwrap_or(i64::MAX)
                .saturating_add(1);
            if let Some(time) = times.get(&(t.network.as_str().to_owned(), next)) {
                t.next_block_time_ms = *time;
            }
        }
        Ok(())
    }

    /// The settlement of each of these intents' references, by whichever
    /// intent (or the balance) made it.
    pub(crate) async fn settlements_of(
        &self,
        tx: &mut Tx,
        intents: &[IntentRecord],
    ) -> Result<HashMap<(IntentKind, String), SettlementRow>, StoreError> {
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
            "SELECT s.kind, s.reference, s.intent_id, s.via, s.decision_id, s.settled_at, \
             s.reversed_at, s.credits, s.tolerance_bp, s.tolerance_max, \
             CAST(s.dust_floor AS TEXT) AS dust_floor FROM settlements s \
             JOIN (SELECT DISTINCT kind, reference FROM {}) k ON s.kind = k.kind AND s.reference = k.reference",
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
            out.insert(
                (kind, row.try_get("reference")?),
                SettlementRow {
                    intent_id: row.try_get("intent_id")?,
                    via: row.try_get("via")?,
                    decision_id: row.try_get("decision_id")?,
                    settled_at_ms: row.try_get("settled_at")?,
                    reversed_at_ms: row.try_get("reversed_at")?,
                    credits: row.try_get("credits")?,
                    tolerance_bp: row.try_get("tolerance_bp")?,
                    tolerance_max: row.try_get("tolerance_max")?,
                    dust_floor: row.try_get("dust_floor")?,
                },
            );
        }
        Ok(out)
    }

    /// Decisions on these intents or reassigning to them, in id order.
    async fn decisions_on(&self, tx: &mut Tx, ids: &[i64]) -> Result<Vec<DecisionRow>, StoreError> {
        let body: Vec<Id> = ids.iter().map(|id| Id { id: *id }).collect();
        let sql = format!(
            "SELECT id, intent_id, action, to_intent, at, through, CAST(amount AS TEXT) AS amount FROM decisions \
             WHERE intent_id IN (SELECT id FROM {rows}) OR to_intent IN (SELECT id FROM {rows}) \
             ORDER BY id",
            rows = self.dialect().rowset("$1", &[("id", Col::Int)])
        );
        let rows = sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?;
        rows.iter()
            .map(|r| {
                let action: String = r.try_get("action")?;
                let amount: String = r.try_get("amount")?;
                Ok(DecisionRow {
                    id: r.try_get("id")?,
                    intent_id: r.try_get("intent_id")?,
                    action: action
                        .parse()
                        .map_err(|e| StoreError::Corrupt(format!("decision action: {e}")))?,
                    to_intent: r.try_get("to_intent")?,
                    at_ms: r.try_get("at")?,
                    through: r.try_get("through")?,
                    amount: amount.parse().map_err(|e| {
                        StoreError::Corrupt(format!("decision amount '{amount}': {e}"))
                    })?,
                })
            })
            .collect()
    }

    /// Each intent's excess entries in the ledger, summed.
    async fn excess_ledger_of(
        &self,
        tx: &mut Tx,
        ids: &[i64],
    ) -> Result<HashMap<i64, ExcessLedger>, StoreError> {
        let body: Vec<Id> = ids.iter().map(|id| Id { id: *id }).collect();
        let sql = format!(
            "SELECT intent_id, CAST(SUM(usd_cents) AS BIGINT) AS net, \
                    CAST(SUM(CASE WHEN usd_cents > 0 THEN 1 ELSE 0 END) AS BIGINT) AS credits \
             FROM ledger_entries \
             WHERE entry_kind = 'adjustment' AND entry_key LIKE 'excess%' \
               AND intent_id IN (SELECT id FROM {rows}) \
             GROUP BY intent_id",
            rows = self.dialect().rowset("$1", &[("id", Col::Int)])
        );
        let mut out = HashMap::new();
        for r in sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?
        {
            out.insert(
                r.try_get("intent_id")?,
                ExcessLedger {
                    net_cents: r.try_get("net")?,
                    credits: r.try_get("credits")?,
                },
            );
        }
        Ok(out)
    }

    /// The payments each decision claimed, with every row recorded for them
    /// in any block: a payment mined again elsewhere still stands.
    async fn basis_of(
        &self,
        tx: &mut Tx,
        decisions: &[i64],
    ) -> Result<HashMap<i64, BasisRows>, StoreError> {
        let mut out: HashMap<i64, BasisRows> = HashMap::new();
        if decisions.is_empty() {
            return Ok(out);
        }
        let body: Vec<Id> = decisions.iter().map(|id| Id { id: *id }).collect();
        let rowset = self.dialect().rowset("$1", &[("id", Col::Int)]);
        let sql = format!(
            "SELECT decision_id, COUNT(*) AS n FROM decision_payments \
             WHERE claims = 1 AND decision_id IN (SELECT id FROM {rowset}) GROUP BY decision_id"
        );
        for r in sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?
        {
            let n: i64 = r.try_get("n")?;
            out.entry(r.try_get("decision_id")?).or_default().payments = n as usize;
        }
        let columns = TRANSFER_COLUMNS
            .split(", ")
            .map(|c| match c.rsplit_once(" AS ") {
                Some((expr, name)) => format!("{} AS {name}", expr.replace("amount", "t.amount")),
                None => format!("t.{c}"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT dp.decision_id, {columns} FROM decision_payments dp \
             JOIN transfers t ON t.network = dp.network AND t.txid = dp.txid AND t.idx = dp.idx \
             WHERE dp.claims = 1 AND dp.decision_id IN (SELECT id FROM {rowset})"
        );
        for r in sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?
        {
            let decision: i64 = r.try_get("decision_id")?;
            out.entry(decision)
                .or_default()
                .rows
                .push(transfer_from_row(&r)?);
        }
        Ok(out)
    }
}

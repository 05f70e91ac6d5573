//! Support's decisions as stored: the append-only audit log (who, why),
//! the decision the status machine reads (what, on which payments), and
//! the refund record. Written by `reconcile::support` only, in the same
//! transaction as the verdict they lead to.

use std::collections::HashSet;

use paywatch_core::Network;
use serde::Serialize;
use sqlx::Row;

use super::{json, Col, Store, StoreError, Tx};

/// An earlier action under the same idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EarlierAction {
    pub audit_id: i64,
    pub intent_id: i64,
    pub action: String,
    pub detail: Option<String>,
    pub role: String,
    pub actor: String,
    pub note: String,
}

/// The audit line of an action.
#[derive(Debug, Clone)]
pub(crate) struct NewAudit<'a> {
    pub role: &'a str,
    pub actor: &'a str,
    pub token_name: &'a str,
    pub action: &'a str,
    pub intent_id: i64,
    pub note: &'a str,
    pub detail: Option<&'a str>,
    pub key: &'a str,
}

/// A decision, as the status machine will read it.
#[derive(Debug, Clone)]
pub(crate) struct NewDecision<'a> {
    pub intent_id: i64,
    pub action: &'a str,
    pub to_intent: Option<i64>,
    pub audit_id: i64,
    pub through: Option<i64>,
    /// The intent's own method's money among the payments, base units.
    pub amount: u128,
}

/// A payment a decision stands on, by its chain identity.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Hash)]
pub(crate) struct PaymentKey {
    pub network: String,
    pub txid: String,
    pub idx: i64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct DecisionPayment {
    #[serde(flatten)]
    pub key: PaymentKey,
    pub asset: String,
    pub amount: String,
}

impl super::TransferRecord {
    /// This row's payment, by its chain identity.
    pub(crate) fn payment_key(&self) -> PaymentKey {
        PaymentKey {
            network: self.network.as_str().to_owned(),
            txid: self.txid.clone(),
            idx: i64::from(self.index),
        }
    }

    /// This row's payment, with its asset and amount, as a decision or a
    /// settlement names it.
    pub(crate) fn named_payment(&self) -> DecisionPayment {
        DecisionPayment {
            key: self.payment_key(),
            asset: self.asset.code(),
            amount: self.amount.to_string(),
        }
    }
}

impl Store {
    pub(crate) async fn audit_by_key(
        &self,
        tx: &mut Tx,
        key: &str,
    ) -> Result<Option<EarlierAction>, StoreError> {
        let row = sqlx::query(
            "SELECT id, intent_id, action, detail, role, actor, note FROM audit_log \
             WHERE action_key = $1",
        )
        .bind(key)
        .fetch_optional(&mut **tx)
        .await?;
        row.map(|r| {
            Ok(EarlierAction {
                audit_id: r.try_get("id")?,
                intent_id: r.try_get("intent_id")?,
                action: r.try_get("action")?,
                detail: r.try_get("detail")?,
                role: r.try_get("role")?,
                actor: r.try_get("actor")?,
                note: r.try_get("note")?,
            })
        })
        .transpose()
    }

    pub(crate) async fn insert_audit(
        &self,
        tx: &mut Tx,
        a: &NewAudit<'_>,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query(
            "INSERT INTO audit_log (at, role, actor, action, intent_id, note, detail, action_key, \
             token_name) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        )
        .bind(now_ms)
        .bind(a.role)
        .bind(a.actor)
        .bind(a.action)
        .bind(a.intent_id)
        .bind(a.note)
        .bind(a.detail)
        .bind(a.key)
        .bind(a.token_name)
        .fetch_one(&mut **tx)
        .await?
        .try_get("id")?)
    }

    pub(crate) async fn insert_decision(
        &self,
        tx: &mut Tx,
        d: &NewDecision<'_>,
        payments: &[DecisionPayment],
        claims: bool,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let sql = self.sql(
            "INSERT INTO decisions (intent_id, action, to_intent, audit_id, at, through, amount) \
             VALUES ($1, $2, $3, $4, $5, $6, NUM($7)) RETURNING id",
        );
        let id: i64 = sqlx::query(&sql)
            .bind(d.intent_id)
            .bind(d.action)
            .bind(d.to_intent)
            .bind(d.audit_id)
            .bind(now_ms)
            .bind(d.through)
            .bind(d.amount.to_string())
            .fetch_one(&mut **tx)
            .await?
            .try_get("id")?;
        if !payments.is_empty() {
            let sql = format!(
                "INSERT INTO decision_payments (decision_id, network, txid, idx, asset, amount, claims) \
                 SELECT $2, network, txid, idx, asset, amount, $3 FROM {}",
                self.dialect().rowset(
                    "$1",
                    &[
                        ("network", Col::Text),
                        ("txid", Col::Text),
                        ("idx", Col::Int),
                        ("asset", Col::Text),
                        ("amount", Col::Amount),
                    ]
                )
            );
            sqlx::query(&sql)
                .bind(json(payments)?)
                .bind(id)
                .bind(i64::from(claims))
                .execute(&mut **tx)
                .await?;
        }
        Ok(id)
    }

    /// Which of these payments a decision already claimed (accepted,
    /// reassigned or refunded).
    pub(crate) async fn claimed_payments(
        &self,
        tx: &mut Tx,
        keys: &[PaymentKey],
    ) -> Result<HashSet<PaymentKey>, StoreError> {
        let mut out = HashSet::new();
        if keys.is_empty() {
            return Ok(out);
        }
        let sql = format!(
            "SELECT dp.network, dp.txid, dp.idx FROM decision_payments dp \
             JOIN {} ON dp.network = v.network AND dp.txid = v.txid AND dp.idx = v.idx \
             WHERE dp.claims = 1",
            self.dialect().rowset(
                "$1",
                &[
                    ("network", Col::Text),
                    ("txid", Col::Text),
                    ("idx", Col::Int)
                ]
            )
        );
        for r in sqlx::query(&sql)
            .bind(json(keys)?)
            .fetch_all(&mut **tx)
            .await?
        {
            out.insert(PaymentKey {
                network: r.try_get("network")?,
                txid: r.try_get("txid")?,
                idx: r.try_get("idx")?,
            });
        }
        Ok(out)
    }

    /// Records the refund support owes, going out on `network`; false when
    /// one is recorded already.
    pub(crate) async fn require_refund(
        &self,
        tx: &mut Tx,
        intent_id: i64,
        network: paywatch_core::Network,
        destination: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(sqlx::query(
            "INSERT INTO refunds (intent_id, network, destination, required_at, state) \
             VALUES ($1, $2, $3, $4, 'required') ON CONFLICT DO NOTHING",
        )
        .bind(intent_id)
        .bind(network.as_str())
        .bind(network.normalize_address(destination).as_ref())
        .bind(now_ms)
        .execute(&mut **tx)
        .await?
        .rows_affected()
            > 0)
    }

    /// Records a transaction of the refund, to be seen on chain by
    /// `check_by_ms`; false when the refund is not awaiting one (none
    /// required, or refunded already). A refund not yet paid in full (sent
    /// and unconfirmed, or shown wrong by the chain) takes another: money
    /// owed in two assets, or a first transaction short, is made up by the
    /// next, and the refund is judged on all of them together.
    pub(crate) async fn refund_sent(
        &self,
        tx: &mut Tx,
        intent_id: i64,
        network: Network,
        txid: &str,
        now_ms: i64,
        check_by_ms: i64,
    ) -> Result<bool, StoreError> {
        let awaited = sqlx::query(
            "UPDATE refunds SET txid = $2, sent_at = $3, check_by = $4, \
             state = 'sent_unconfirmed', mismatch = NULL, checked_at = NULL \
             WHERE intent_id = $1 \
               AND (txid IS NULL OR state IN ('sent_unconfirmed', 'mismatch'))",
        )
        .bind(intent_id)
        .bind(txid)
        .bind(now_ms)
        .bind(check_by_ms)
        .execute(&mut **tx)
        .await?
        .rows_affected()
            > 0;
        if awaited {
            sqlx::query(
                "INSERT INTO refund_transactions (intent_id, network, txid, sent_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            )
            .bind(intent_id)
            .bind(network.as_str())
            .bind(txid)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        }
        Ok(awaited)
    }
}

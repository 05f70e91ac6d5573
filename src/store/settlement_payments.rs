//! The payments each intent's settlement stands on, by chain identity: what
//! a person, `paywatch check` and a reorg read to know which money a
//! settlement is made of (issue 36, "payments have identities").

use std::collections::HashMap;

use serde::Serialize;
use sqlx::Row;

use super::decisions::{DecisionPayment, PaymentKey};
use super::{json, Col, Store, StoreError, Tx};

/// The payments one intent's settlement stands on, as the writer names them.
#[derive(Debug, Clone)]
pub(crate) struct SettlementNames {
    pub intent_id: i64,
    pub payments: Vec<DecisionPayment>,
}

#[derive(Serialize)]
struct Named<'a> {
    intent_id: i64,
    #[serde(flatten)]
    payment: &'a DecisionPayment,
}

#[derive(Serialize)]
struct Id {
    id: i64,
}

impl Store {
    /// The payments named for each of these intents' settlements.
    pub(crate) async fn settlement_names(
        &self,
        tx: &mut Tx,
        intent_ids: &[i64],
    ) -> Result<HashMap<i64, Vec<PaymentKey>>, StoreError> {
        let mut out: HashMap<i64, Vec<PaymentKey>> = HashMap::new();
        if intent_ids.is_empty() {
            return Ok(out);
        }
        let body: Vec<Id> = intent_ids.iter().map(|id| Id { id: *id }).collect();
        let sql = format!(
            "SELECT intent_id, network, txid, idx FROM settlement_payments \
             WHERE intent_id IN (SELECT id FROM {})",
            self.dialect().rowset("$1", &[("id", Col::Int)])
        );
        for r in sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?
        {
            out.entry(r.try_get("intent_id")?)
                .or_default()
                .push(PaymentKey {
                    network: r.try_get("network")?,
                    txid: r.try_get("txid")?,
                    idx: r.try_get("idx")?,
                });
        }
        Ok(out)
    }

    /// Replaces what each of these settlements stands on.
    pub(crate) async fn name_settlement_payments(
        &self,
        tx: &mut Tx,
        names: &[SettlementNames],
    ) -> Result<(), StoreError> {
        if names.is_empty() {
            return Ok(());
        }
        let ids: Vec<Id> = names.iter().map(|n| Id { id: n.intent_id }).collect();
        let sql = format!(
            "DELETE FROM settlement_payments WHERE intent_id IN (SELECT id FROM {})",
            self.dialect().rowset("$1", &[("id", Col::Int)])
        );
        sqlx::query(&sql)
            .bind(json(&ids)?)
            .execute(&mut **tx)
            .await?;
        let rows: Vec<Named<'_>> = names
            .iter()
            .flat_map(|n| {
                n.payments.iter().map(|payment| Named {
                    intent_id: n.intent_id,
                    payment,
                })
            })
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO settlement_payments (intent_id, network, txid, idx, asset, amount) \
             SELECT intent_id, network, txid, idx, asset, amount FROM {}",
            self.dialect().rowset(
                "$1",
                &[
                    ("intent_id", Col::Int),
                    ("network", Col::Text),
                    ("txid", Col::Text),
                    ("idx", Col::Int),
                    ("asset", Col::Text),
                    ("amount", Col::Amount),
                ]
            )
        );
        sqlx::query(&sql)
            .bind(json(&rows)?)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

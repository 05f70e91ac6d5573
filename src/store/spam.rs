//! Transfers of tokens that are none of the payment methods' assets
//! (address-poisoning spam, look-alike tokens), and the method's own asset
//! under a settlement's dust floor arriving after it settled. They never
//! move an intent (`SeenTransfer::is_spam`, `decide::is_dust`); they are
//! recorded all the same, and listed here for an operator, newest first.

use super::transfers::{transfer_from_row, TRANSFER_COLUMNS};
use super::{Dialect, Store, StoreError, TransferRecord};

/// SQL that holds when transfer `t`, at the address of intent `i`, is dust
/// under the floor `i`'s settlement was made under: `i`'s own asset and
/// network, recorded after it settled, less than the floor.
pub(super) fn dust_condition(dialect: Dialect) -> String {
    let below = match dialect {
        Dialect::Postgres => "t.amount < s.dust_floor".to_owned(),
        // Integers as TEXT without leading zeros: the shorter is smaller.
        Dialect::Sqlite => "(length(t.amount) < length(s.dust_floor) \
             OR (length(t.amount) = length(s.dust_floor) AND t.amount < s.dust_floor))"
            .to_owned(),
    };
    format!(
        "EXISTS (SELECT 1 FROM settlements s WHERE s.intent_id = i.id \
         AND s.dust_floor IS NOT NULL AND t.asset = i.asset AND t.network = i.network \
         AND i.settled_through IS NOT NULL AND t.id > i.settled_through AND {below})"
    )
}

/// A spam transfer, and the intent whose address it reached, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpamTransfer {
    pub transfer: TransferRecord,
    pub intent_id: Option<i64>,
}

impl SpamTransfer {
    /// Why it moves no intent: `unknown_token` (no method's asset) or
    /// `dust_after_settlement` (the intent's own asset, under the floor its
    /// settlement was made under).
    pub fn reason(&self) -> &'static str {
        match self.transfer.asset {
            paywatch_core::AssetId::Token { .. } => "unknown_token",
            paywatch_core::AssetId::Known(_) => "dust_after_settlement",
        }
    }
}

impl Store {
    /// The newest `limit` transfers of tokens that are no method's asset,
    /// and of dust under a settlement's floor.
    pub async fn spam_transfers(&self, limit: i64) -> Result<Vec<SpamTransfer>, StoreError> {
        // An address is issued once: at most one intent is behind it.
        let sql = format!(
            "SELECT {TRANSFER_COLUMNS}, intent_id FROM ( \
               SELECT * FROM (SELECT t.*, (SELECT MIN(i.id) FROM intents i \
                   WHERE i.network = t.network AND i.address = t.to_address) AS intent_id \
                 FROM transfers t WHERE t.asset LIKE 'token:%' ORDER BY t.id DESC LIMIT $1) a \
               UNION ALL \
               SELECT * FROM (SELECT t.*, d.intent_id FROM dust_transfers d \
                 JOIN transfers t ON t.id = d.transfer_id ORDER BY d.transfer_id DESC LIMIT $1) b \
             ) x ORDER BY id DESC LIMIT $1"
        );
        let rows = sqlx::query(&sql).bind(limit).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|r| {
                Ok(SpamTransfer {
                    transfer: transfer_from_row(r)?,
                    intent_id: sqlx::Row::try_get(r, "intent_id")?,
                })
            })
            .collect()
    }

    /// Records dust the reconciler set aside: (transfer id, intent id).
    pub(crate) async fn mark_dust(
        &self,
        tx: &mut super::Tx,
        rows: &[(i64, i64)],
    ) -> Result<(), StoreError> {
        #[derive(serde::Serialize)]
        struct Row {
            transfer_id: i64,
            intent_id: i64,
        }
        if rows.is_empty() {
            return Ok(());
        }
        let body: Vec<Row> = rows
            .iter()
            .map(|(transfer_id, intent_id)| Row {
                transfer_id: *transfer_id,
                intent_id: *intent_id,
            })
            .collect();
        let sql = format!(
            "INSERT INTO dust_transfers (transfer_id, intent_id) \
             SELECT transfer_id, intent_id FROM {} WHERE true ON CONFLICT DO NOTHING",
            self.dialect().rowset(
                "$1",
                &[
                    ("transfer_id", super::Col::Int),
                    ("intent_id", super::Col::Int)
                ]
            )
        );
        sqlx::query(&sql)
            .bind(super::json(&body)?)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

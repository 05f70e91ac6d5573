//! Transfers of tokens that are none of the payment methods' assets:
//! address-poisoning spam and look-alike dust. They never move an intent
//! (`SeenTransfer::is_spam`); they are recorded all the same, and listed
//! here for an operator, newest first.

use super::transfers::{transfer_from_row, TRANSFER_COLUMNS};
use super::{Store, StoreError, TransferRecord};

/// A spam transfer, and the intent whose address it reached, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpamTransfer {
    pub transfer: TransferRecord,
    pub intent_id: Option<i64>,
}

impl Store {
    /// The newest `limit` transfers of tokens that are no method's asset.
    pub async fn spam_transfers(&self, limit: i64) -> Result<Vec<SpamTransfer>, StoreError> {
        // An address is issued once: at most one intent is behind it.
        let sql = format!(
            "SELECT s.*, (SELECT MIN(i.id) FROM intents i \
                          WHERE i.network = s.network AND i.address = s.to_address) AS intent_id \
             FROM (SELECT {TRANSFER_COLUMNS} FROM transfers WHERE asset LIKE 'token:%' \
                   ORDER BY id DESC LIMIT $1) s ORDER BY s.id DESC"
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
}

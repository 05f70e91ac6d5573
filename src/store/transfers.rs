use paywatch_core::{Amount, AssetId, Network};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::{amount_col, json, Col, Store, StoreError, Tx};
use crate::reconcile::{txid_digest, SeenTransfer};

/// A transfer as recorded by ingest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferRecord {
    pub id: i64,
    pub network: Network,
    pub asset: AssetId,
    pub txid: String,
    pub index: u32,
    pub block_hash: String,
    pub block_height: u64,
    pub block_time_ms: i64,
    pub to: String,
    pub from: Option<String>,
    pub amount: Amount,
    pub success: bool,
    pub first_seen_ms: i64,
    /// When paywatch first counted the row's block final.
    pub final_at_ms: Option<i64>,
    pub orphaned_at_ms: Option<i64>,
    /// The time of the next block on the chain, where reconcile looked it
    /// up (a payment seen only after its intent's expiry); 0 otherwise.
    pub next_block_time_ms: i64,
}

impl TransferRecord {
    /// The plain-data view the status machine works on.
    pub fn seen(&self) -> SeenTransfer<'_> {
        SeenTransfer {
            id: self.id,
            network: self.network,
            asset: match &self.asset {
                AssetId::Known(a) => Some(*a),
                AssetId::Token { .. } => None,
            },
            txid: &self.txid,
            txid_digest: txid_digest(&self.txid),
            index: self.index,
            amount: self.amount,
            success: self.success,
            block_height: self.block_height,
            block_time_ms: self.block_time_ms,
            next_block_time_ms: self.next_block_time_ms,
            first_seen_ms: self.first_seen_ms,
            final_at_ms: self.final_at_ms,
            orphaned: self.orphaned_at_ms.is_some(),
            unmined: self.block_hash == super::MEMPOOL_BLOCK,
        }
    }
}

pub(crate) const TRANSFER_COLUMNS: &str =
    "id, network, asset, txid, idx, block_hash, block_height, block_time, to_address, \
    from_address, CAST(amount AS TEXT) AS amount, tx_status, first_seen_at, final_at, orphaned_at";

pub(crate) fn transfer_from_row(r: &AnyRow) -> Result<TransferRecord, StoreError> {
    let network: String = r.try_get("network")?;
    let asset: String = r.try_get("asset")?;
    let idx: i64 = r.try_get("idx")?;
    let height: i64 = r.try_get("block_height")?;
    let status: String = r.try_get("tx_status")?;
    Ok(TransferRecord {
        id: r.try_get("id")?,
        network: network
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("transfer network: {e}")))?,
        asset: AssetId::from_code(&asset),
        txid: r.try_get("txid")?,
        index: u32::try_from(idx)
            .map_err(|_| StoreError::Corrupt(format!("transfer index {idx}")))?,
        block_hash: r.try_get("block_hash")?,
        block_height: u64::try_from(height)
            .map_err(|_| StoreError::Corrupt(format!("block height {height}")))?,
        block_time_ms: r.try_get("block_time")?,
        to: r.try_get("to_address")?,
        from: r.try_get("from_address")?,
        amount: Amount(amount_col(r, "amount")?),
        success: status == "success",
        first_seen_ms: r.try_get("first_seen_at")?,
        final_at_ms: r.try_get("final_at")?,
        orphaned_at_ms: r.try_get("orphaned_at")?,
        next_block_time_ms: 0,
    })
}

impl Store {
    /// Recorded transfers, newest first, optionally for one network or address.
    pub async fn transfers(
        &self,
        network: Option<Network>,
        address: Option<&str>,
        limit: i64,
    ) -> Result<Vec<TransferRecord>, StoreError> {
        let address = match (network, address) {
            (Some(n), Some(a)) => Some(n.normalize_address(a).into_owned()),
            (None, Some(a)) => Some(a.to_owned()),
            _ => None,
        };
        let sql = format!(
            "SELECT {TRANSFER_COLUMNS} FROM transfers \
             WHERE ($1 IS NULL OR network = $1) AND ($2 IS NULL OR to_address = $2) \
             ORDER BY id DESC LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(network.map(|n| n.as_str()))
            .bind(address)
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(transfer_from_row).collect()
    }

    /// Every transfer ever recorded to these addresses, orphaned ones included.
    pub(crate) async fn transfers_to(
        &self,
        tx: &mut Tx,
        addresses: &[(Network, &str)],
    ) -> Result<Vec<TransferRecord>, StoreError> {
        #[derive(Serialize)]
        struct Key<'a> {
            network: &'a str,
            address: &'a str,
        }
        let keys: Vec<Key<'_>> = addresses
            .iter()
            .map(|(n, a)| Key {
                network: n.as_str(),
                address: a,
            })
            .collect();
        let body = json(&keys)?;
        let sql = format!(
            "SELECT {TRANSFER_COLUMNS} FROM transfers WHERE id IN (SELECT transfers.id FROM transfers \
             JOIN {} ON transfers.network = v.network AND transfers.to_address = v.address)",
            self.dialect().rowset("$1", &[("network", Col::Text), ("address", Col::Text)])
        );
        let rows = sqlx::query(&sql).bind(body).fetch_all(&mut **tx).await?;
        rows.iter().map(transfer_from_row).collect()
    }
}

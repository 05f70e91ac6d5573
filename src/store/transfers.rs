use paywatch_core::{Amount, AssetId, BlockRef, Network, Transfer};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::blocks::to_i64;
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
    /// The final height from which it counts final, when later than its
    /// block's (a coinbase output).
    pub matures_at: Option<u64>,
    /// The time of the next block on the chain, where reconcile looked it
    /// up (a payment seen only after its intent's expiry); 0 otherwise.
    pub next_block_time_ms: i64,
}

impl TransferRecord {
    /// The final height at which the row counts final.
    pub fn final_from(&self) -> u64 {
        self.matures_at
            .map_or(self.block_height, |m| m.max(self.block_height))
    }

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
            final_from: self.final_from(),
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
    from_address, CAST(amount AS TEXT) AS amount, tx_status, first_seen_at, final_at, orphaned_at, matures_at";

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
        matures_at: r
            .try_get::<Option<i64>, _>("matures_at")?
            .map(|m| u64::try_from(m).map_err(|_| StoreError::Corrupt(format!("matures_at {m}"))))
            .transpose()?,
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

impl Store {
    /// Inserts a connected block's transfers. The key (network, txid, index,
    /// block hash) makes a replay a no-op, and a block that comes back after a
    /// reorg revives its rows instead of duplicating them. Returns the rows
    /// written: a live row seen again is left alone, so a rescan of a block
    /// still on the chain counts only what it newly recorded.
    pub(crate) async fn insert_transfers(
        &self,
        tx: &mut Tx,
        block: &BlockRef,
        timestamp_ms: i64,
        transfers: &[Transfer],
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        #[derive(Serialize)]
        struct Row<'a> {
            network: &'a str,
            asset: String,
            txid: &'a str,
            idx: u32,
            to_address: String,
            from_address: Option<&'a str>,
            amount: String,
            tx_status: &'a str,
            matures_at: Option<i64>,
        }
        if transfers.is_empty() {
            return Ok(0);
        }
        // Ethereum token rows recorded before 0011 carry the block-wide log
        // index moved to 2^32 and up: the same log met again in the same
        // block (a rescan) is that row, not a new payment.
        let legacy = if transfers[0].network == Network::Ethereum {
            " AND NOT EXISTS (SELECT 1 FROM transfers l WHERE l.txid = v.txid AND l.network = v.network \
              AND l.block_hash = $2 AND l.idx >= 4294967296 AND l.asset = v.asset \
              AND l.to_address = v.to_address AND l.amount = v.amount)"
        } else {
            ""
        };
        let rows: Vec<Row<'_>> = transfers
            .iter()
            .map(|t| Row {
                network: t.network.as_str(),
                asset: t.asset.code(),
                txid: &t.txid,
                idx: t.index,
                to_address: t.network.normalize_address(&t.to).into_owned(),
                from_address: t.from.as_deref(),
                amount: t.amount.to_string(),
                tx_status: if t.success { "success" } else { "failed" },
                matures_at: t.matures_at.map(to_i64),
            })
            .collect();
        let sql = format!(
            "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
             to_address, from_address, amount, tx_status, first_seen_at, final_at, matures_at) \
             SELECT network, asset, txid, idx, $2, $3, $4, to_address, from_address, amount, tx_status, $5, \
             (SELECT CASE WHEN c.final_height >= COALESCE(v.matures_at, $3) THEN $5 END \
              FROM chain_state c WHERE c.network = v.network), matures_at \
             FROM {} WHERE true{legacy} \
             ON CONFLICT (network, txid, idx, block_hash) DO UPDATE SET orphaned_at = NULL, \
             final_at = (SELECT CASE WHEN c.final_height >= COALESCE(transfers.matures_at, $3) THEN $5 END \
                         FROM chain_state c WHERE c.network = transfers.network) \
             WHERE transfers.orphaned_at IS NOT NULL",
            self.dialect().rowset(
                "$1",
                &[
                    ("network", Col::Text),
                    ("asset", Col::Text),
                    ("txid", Col::Text),
                    ("idx", Col::Int),
                    ("to_address", Col::Text),
                    ("from_address", Col::Text),
                    ("amount", Col::Amount),
                    ("tx_status", Col::Text),
                    ("matures_at", Col::Int),
                ]
            )
        );
        let body = json(&rows)?;
        let written = sqlx::query(&sql)
            .bind(body)
            .bind(block.hash.as_str())
            .bind(to_i64(block.height))
            .bind(timestamp_ms)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        Ok(written.rows_affected())
    }
}

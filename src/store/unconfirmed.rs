//! Transfers waiting in a node's mempool. They are kept in `transfers` beside
//! mined ones, under the pseudo block [`MEMPOOL_BLOCK`] at a height no final
//! height ever reaches, so they count as pending with zero confirmations and
//! never as final. A mempool row is orphaned when its transaction is mined
//! (the block row takes over, keeping the earlier first-seen time) or leaves
//! the pool unmined, and revived if it comes back.

use paywatch_core::{Network, Transfer};
use serde::Serialize;
use sqlx::Row;

use super::{json, Col, Store, StoreError, Tx};

/// The `block_hash` of a transfer seen only in a mempool.
pub const MEMPOOL_BLOCK: &str = "mempool";
/// Its `block_height`: above every height, so never final.
pub const MEMPOOL_HEIGHT: i64 = i64::MAX;

impl Store {
    /// Makes the stored mempool of `network` exactly `transfers` (the node's
    /// whole current pool): new ones are recorded, returning ones revived,
    /// and the ones gone are orphaned. Returns the addresses whose money moved.
    pub(crate) async fn replace_unconfirmed(
        &self,
        tx: &mut Tx,
        network: Network,
        transfers: &[Transfer],
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        #[derive(Serialize)]
        struct Row<'a> {
            asset: String,
            txid: &'a str,
            idx: u32,
            to_address: String,
            from_address: Option<&'a str>,
            amount: String,
        }
        let rows: Vec<Row<'_>> = transfers
            .iter()
            .filter(|t| t.network == network && t.success)
            .map(|t| Row {
                asset: t.asset.code(),
                txid: &t.txid,
                idx: t.index,
                to_address: network.normalize_address(&t.to).into_owned(),
                from_address: t.from.as_deref(),
                amount: t.amount.to_string(),
            })
            .collect();
        let body = json(&rows)?;
        let rowset = |cols: &[(&str, Col)]| self.dialect().rowset("$3", cols);
        let key_cols = [("txid", Col::Text), ("idx", Col::Int)];
        let mut touched = Vec::new();

        // Gone from the pool: mined (already retired at connect) or dropped.
        let sql = self.sql(&format!(
            "UPDATE transfers SET orphaned_at = $2 \
             WHERE network = $1 AND block_hash = '{MEMPOOL_BLOCK}' AND orphaned_at IS NULL \
               AND NOT EXISTS (SELECT 1 FROM {} WHERE v.txid = transfers.txid AND v.idx = transfers.idx) \
             RETURNING to_address",
            rowset(&key_cols)
        ));
        for r in sqlx::query(&sql)
            .bind(network.as_str())
            .bind(now_ms)
            .bind(body.clone())
            .fetch_all(&mut **tx)
            .await?
        {
            touched.push(r.try_get::<String, _>("to_address")?);
        }
        if rows.is_empty() {
            return Ok(touched);
        }

        // New or back in the pool, unless a block on the chain holds it.
        let sql = self.sql(&format!(
            "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
             to_address, from_address, amount, tx_status, first_seen_at) \
             SELECT $1, asset, txid, idx, '{MEMPOOL_BLOCK}', {MEMPOOL_HEIGHT}, $2, to_address, from_address, amount, 'success', $2 \
             FROM {} WHERE NOT EXISTS (SELECT 1 FROM transfers m WHERE m.network = $1 AND m.txid = v.txid \
               AND m.idx = v.idx AND m.block_hash <> '{MEMPOOL_BLOCK}' AND m.orphaned_at IS NULL) \
             ON CONFLICT (network, txid, idx, block_hash) DO UPDATE SET orphaned_at = NULL \
               WHERE transfers.orphaned_at IS NOT NULL \
             RETURNING to_address",
            rowset(&[
                ("asset", Col::Text),
                ("txid", Col::Text),
                ("idx", Col::Int),
                ("to_address", Col::Text),
                ("from_address", Col::Text),
                ("amount", Col::Amount),
            ])
        ));
        for r in sqlx::query(&sql)
            .bind(network.as_str())
            .bind(now_ms)
            .bind(body)
            .fetch_all(&mut **tx)
            .await?
        {
            touched.push(r.try_get::<String, _>("to_address")?);
        }
        Ok(touched)
    }

    /// A block that mines these transfers takes over from their mempool rows,
    /// so nothing counts twice while the next mempool snapshot is awaited.
    pub(crate) async fn retire_unconfirmed(
        &self,
        tx: &mut Tx,
        network: Network,
        transfers: &[Transfer],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Key<'a> {
            txid: &'a str,
            idx: u32,
        }
        if transfers.is_empty() {
            return Ok(());
        }
        let keys: Vec<Key<'_>> = transfers
            .iter()
            .map(|t| Key {
                txid: &t.txid,
                idx: t.index,
            })
            .collect();
        let sql = self.sql(&format!(
            "UPDATE transfers SET orphaned_at = $2 \
             WHERE network = $1 AND block_hash = '{MEMPOOL_BLOCK}' AND orphaned_at IS NULL \
               AND EXISTS (SELECT 1 FROM {} WHERE v.txid = transfers.txid AND v.idx = transfers.idx)",
            self.dialect()
                .rowset("$3", &[("txid", Col::Text), ("idx", Col::Int)])
        ));
        sqlx::query(&sql)
            .bind(network.as_str())
            .bind(now_ms)
            .bind(json(&keys)?)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// The mempool rows of the transactions in a block being disconnected,
    /// revived; the next snapshot orphans those that did not return.
    pub(crate) async fn revive_unconfirmed(
        &self,
        tx: &mut Tx,
        network: Network,
        block_hash: &str,
    ) -> Result<Vec<String>, StoreError> {
        let sql = self.sql(&format!(
            "UPDATE transfers SET orphaned_at = NULL \
             WHERE network = $1 AND block_hash = '{MEMPOOL_BLOCK}' AND orphaned_at IS NOT NULL \
               AND EXISTS (SELECT 1 FROM transfers b WHERE b.network = $1 AND b.block_hash = $2 \
                 AND b.txid = transfers.txid AND b.idx = transfers.idx) \
             RETURNING to_address"
        ));
        let mut touched = Vec::new();
        for r in sqlx::query(&sql)
            .bind(network.as_str())
            .bind(block_hash)
            .fetch_all(&mut **tx)
            .await?
        {
            touched.push(r.try_get::<String, _>("to_address")?);
        }
        Ok(touched)
    }
}

use paywatch_core::{BlockRef, Network, Transfer};
use serde::Serialize;
use sqlx::Row;

use super::{json, Col, Store, StoreError, Tx};

/// What applying one chain event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    Applied,
    /// Another worker applied this very event first; nothing was written.
    AlreadyApplied,
    /// The stored cursor is elsewhere: the caller's view of the chain is stale.
    CursorMismatch {
        stored: Option<String>,
    },
}

/// A watcher's standing, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainStatus {
    pub network: Network,
    pub cursor_height: Option<u64>,
    pub cursor_hash: Option<String>,
    /// The first height this database followed.
    pub start_height: Option<u64>,
    pub tip_height: Option<u64>,
    pub final_height: Option<u64>,
    pub watcher_state: String,
    pub last_error: Option<String>,
    pub updated_at_ms: i64,
}

fn block_ref_from_row(r: &sqlx::any::AnyRow) -> Result<BlockRef, StoreError> {
    let height: i64 = r.try_get("height")?;
    Ok(BlockRef {
        height: u64::try_from(height)
            .map_err(|_| StoreError::Corrupt(format!("block height {height}")))?,
        hash: r.try_get("hash")?,
        parent: r.try_get("parent")?,
    })
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: Option<i64>) -> Option<u64> {
    v.and_then(|v| u64::try_from(v).ok())
}

impl Store {
    pub async fn ensure_chain_state(
        &self,
        network: Network,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        // In a transaction, like every write a watcher makes: on a fenced
        // handle that is where the lease is checked.
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO chain_state (network, updated_at) VALUES ($1, $2) ON CONFLICT (network) DO NOTHING",
        )
        .bind(network.as_str())
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Active blocks connected at or after `since_ms`, ascending, at most `limit`.
    pub(crate) async fn blocks_connected_since(
        &self,
        network: Network,
        since_ms: i64,
        limit: i64,
    ) -> Result<Vec<BlockRef>, StoreError> {
        let rows = sqlx::query(
            "SELECT height, hash, parent FROM blocks \
             WHERE network = $1 AND orphaned_at IS NULL AND connected_at >= $2 ORDER BY height LIMIT $3",
        )
        .bind(network.as_str())
        .bind(since_ms)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(block_ref_from_row).collect()
    }

    /// Active blocks from `from` to `to` (inclusive), ascending, at most `limit`.
    pub(crate) async fn blocks_between(
        &self,
        network: Network,
        from: u64,
        to: u64,
        limit: i64,
    ) -> Result<Vec<BlockRef>, StoreError> {
        let rows = sqlx::query(
            "SELECT height, hash, parent FROM blocks \
             WHERE network = $1 AND orphaned_at IS NULL AND height >= $2 AND height <= $3 \
             ORDER BY height LIMIT $4",
        )
        .bind(network.as_str())
        .bind(to_i64(from))
        .bind(to_i64(to))
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(block_ref_from_row).collect()
    }

    /// The last `depth` connected blocks, ascending: the canonical stream's cursor.
    pub async fn load_cursor(
        &self,
        network: Network,
        depth: usize,
    ) -> Result<Vec<BlockRef>, StoreError> {
        let rows = sqlx::query(
            "SELECT height, hash, parent FROM blocks WHERE network = $1 AND orphaned_at IS NULL \
             ORDER BY height DESC LIMIT $2",
        )
        .bind(network.as_str())
        .bind(i64::try_from(depth).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        let mut cursor = rows
            .iter()
            .map(block_ref_from_row)
            .collect::<Result<Vec<_>, StoreError>>()?;
        cursor.reverse();
        Ok(cursor)
    }

    pub(crate) async fn stored_cursor_hash(
        &self,
        tx: &mut Tx,
        network: Network,
    ) -> Result<Option<String>, StoreError> {
        let sql = self.sql("SELECT cursor_hash FROM chain_state WHERE network = $1 FOR_UPDATE");
        let row = sqlx::query(&sql)
            .bind(network.as_str())
            .fetch_optional(&mut **tx)
            .await?;
        match row {
            Some(r) => Ok(r.try_get("cursor_hash")?),
            None => Err(StoreError::Corrupt(format!(
                "no chain_state row for {network}"
            ))),
        }
    }

    pub(crate) async fn is_block_orphaned(
        &self,
        tx: &mut Tx,
        network: Network,
        hash: &str,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT orphaned_at FROM blocks WHERE network = $1 AND hash = $2")
            .bind(network.as_str())
            .bind(hash)
            .fetch_optional(&mut **tx)
            .await?;
        Ok(match row {
            Some(r) => r.try_get::<Option<i64>, _>("orphaned_at")?.is_some(),
            None => true,
        })
    }

    pub(crate) async fn connect_block(
        &self,
        tx: &mut Tx,
        network: Network,
        block: &BlockRef,
        timestamp_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (network, hash) DO UPDATE SET orphaned_at = NULL, connected_at = $6",
        )
        .bind(network.as_str())
        .bind(&block.hash)
        .bind(to_i64(block.height))
        .bind(&block.parent)
        .bind(timestamp_ms)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
        // The cursor moves, and the first block ever connected marks where
        // this database's history begins: one statement, as this runs per block.
        sqlx::query(
            "UPDATE chain_state SET cursor_height = $2, cursor_hash = $3, updated_at = $4, \
             start_height = COALESCE(start_height, $2) WHERE network = $1",
        )
        .bind(network.as_str())
        .bind(to_i64(block.height))
        .bind(&block.hash)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

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
            })
            .collect();
        let sql = format!(
            "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
             to_address, from_address, amount, tx_status, first_seen_at, final_at) \
             SELECT network, asset, txid, idx, $2, $3, $4, to_address, from_address, amount, tx_status, $5, \
             (SELECT CASE WHEN c.final_height >= $3 THEN $5 END FROM chain_state c WHERE c.network = v.network) \
             FROM {} WHERE true{legacy} \
             ON CONFLICT (network, txid, idx, block_hash) DO UPDATE SET orphaned_at = NULL, \
             final_at = (SELECT CASE WHEN c.final_height >= $3 THEN $5 END FROM chain_state c \
                         WHERE c.network = transfers.network) \
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

    /// Orphans a disconnected block and its transfers; returns the addresses
    /// whose intents must be looked at again.
    pub(crate) async fn disconnect_block(
        &self,
        tx: &mut Tx,
        network: Network,
        block: &BlockRef,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        sqlx::query("UPDATE blocks SET orphaned_at = $3 WHERE network = $1 AND hash = $2")
            .bind(network.as_str())
            .bind(&block.hash)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        let rows = sqlx::query(
            "UPDATE transfers SET orphaned_at = $3, final_at = NULL \
             WHERE network = $1 AND block_hash = $2 AND orphaned_at IS NULL \
             RETURNING to_address",
        )
        .bind(network.as_str())
        .bind(&block.hash)
        .bind(now_ms)
        .fetch_all(&mut **tx)
        .await?;
        let top = sqlx::query(
            "SELECT height, hash FROM blocks WHERE network = $1 AND orphaned_at IS NULL ORDER BY height DESC LIMIT 1",
        )
        .bind(network.as_str())
        .fetch_optional(&mut **tx)
        .await?;
        let top = top
            .map(|r| {
                Ok::<_, StoreError>((
                    r.try_get::<i64, _>("height")? as u64,
                    r.try_get::<String, _>("hash")?,
                ))
            })
            .transpose()?;
        // The replaced heights are final again only when the node says so.
        sqlx::query(
            "UPDATE chain_state SET final_height = $2 WHERE network = $1 AND final_height > $2",
        )
        .bind(network.as_str())
        .bind(to_i64(block.height.saturating_sub(1)))
        .execute(&mut **tx)
        .await?;
        self.set_cursor(
            tx,
            network,
            top.as_ref().map(|(h, s)| (*h, s.as_str())),
            now_ms,
        )
        .await?;
        rows.iter().map(|r| Ok(r.try_get("to_address")?)).collect()
    }

    async fn set_cursor(
        &self,
        tx: &mut Tx,
        network: Network,
        at: Option<(u64, &str)>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE chain_state SET cursor_height = $2, cursor_hash = $3, updated_at = $4 WHERE network = $1")
            .bind(network.as_str())
            .bind(at.map(|(h, _)| to_i64(h)))
            .bind(at.map(|(_, hash)| hash.to_owned()))
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Queues the intents at these addresses for another look by reconcile.
    pub(crate) async fn touch_intents(
        &self,
        tx: &mut Tx,
        network: Network,
        addresses: &[String],
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Row<'a> {
            a: &'a str,
        }
        if addresses.is_empty() {
            return Ok(());
        }
        let mut unique: Vec<&str> = addresses.iter().map(String::as_str).collect();
        unique.sort_unstable();
        unique.dedup();
        let rows: Vec<Row<'_>> = unique.into_iter().map(|a| Row { a }).collect();
        let sql = format!(
            "INSERT INTO reconcile_queue (network, address) SELECT $2, a FROM {}",
            self.dialect().rowset("$1", &[("a", Col::Text)])
        );
        let body = json(&rows)?;
        sqlx::query(&sql)
            .bind(body)
            .bind(network.as_str())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Records the node's tip and final height. The stored final height
    /// only rises here: a block that stays on the chain stays final when a
    /// reorg elsewhere shortens the node's chain. Only a disconnect lowers it
    /// (see `disconnect_block`). When it rises, the intents waiting on
    /// finality are queued for reconcile.
    pub async fn record_chain_progress(
        &self,
        network: Network,
        tip_height: u64,
        final_height: u64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.record_chain_progress_in_state(network, tip_height, final_height, now_ms, None)
            .await
    }

    /// [`record_chain_progress`](Self::record_chain_progress), with the
    /// watcher's state and why when it is not plainly `running` (a watcher
    /// that polls fine but gets no blocks is `stalled`).
    pub async fn record_chain_progress_in_state(
        &self,
        network: Network,
        tip_height: u64,
        final_height: u64,
        now_ms: i64,
        trouble: Option<(&str, &str)>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        self.record_progress_in(&mut tx, network, tip_height, final_height, now_ms, trouble)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`record_chain_progress_in_state`](Self::record_chain_progress_in_state)
    /// inside the caller's transaction: a reorg is written with the final
    /// height it implies, so no reader sees its blocks without it.
    pub(crate) async fn record_progress_in(
        &self,
        tx: &mut Tx,
        network: Network,
        tip_height: u64,
        final_height: u64,
        now_ms: i64,
        trouble: Option<(&str, &str)>,
    ) -> Result<(), StoreError> {
        let sql = self.sql("SELECT final_height FROM chain_state WHERE network = $1 FOR_UPDATE");
        let previous: Option<i64> = sqlx::query(&sql)
            .bind(network.as_str())
            .fetch_optional(&mut **tx)
            .await?
            .map(|r| r.try_get("final_height"))
            .transpose()?
            .flatten();
        let reported = to_i64(final_height);
        let rises = previous.is_none_or(|p| reported > p);
        sqlx::query(
            "UPDATE chain_state SET tip_height = $2, final_height = $3, watcher_state = $5, \
             last_error = $6, updated_at = $4 WHERE network = $1",
        )
        .bind(network.as_str())
        .bind(to_i64(tip_height))
        .bind(if rises { Some(reported) } else { previous })
        .bind(now_ms)
        .bind(trouble.map_or("running", |(state, _)| state))
        .bind(trouble.map(|(_, why)| why))
        .execute(&mut **tx)
        .await?;
        if rises {
            // When each row first counted as final: the confirm-by deadline
            // is read against it.
            sqlx::query(&format!(
                "UPDATE transfers SET final_at = $4 WHERE network = $1 AND block_height > $2 \
                 AND block_height <= $3 AND orphaned_at IS NULL AND final_at IS NULL \
                 AND block_hash <> '{}'",
                super::MEMPOOL_BLOCK
            ))
            .bind(network.as_str())
            .bind(previous.unwrap_or(-1))
            .bind(reported)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
            let sql = self.sql(
                "INSERT INTO reconcile_queue (network, address) SELECT network, address FROM intents \
                 WHERE network = $1 AND (status = 'confirming' OR amount_pending <> NUM($2))",
            );
            sqlx::query(&sql)
                .bind(network.as_str())
                .bind("0")
                .execute(&mut **tx)
                .await?;
            // The intents' status above may be stale: a reconcile that read
            // the old final height may not have committed `confirming` yet.
            // Money that just became final is queued by where it lies.
            sqlx::query(
                "INSERT INTO reconcile_queue (network, address) SELECT DISTINCT network, to_address \
                 FROM transfers WHERE network = $1 AND block_height > $2 AND block_height <= $3 \
                 AND orphaned_at IS NULL",
            )
            .bind(network.as_str())
            .bind(previous.unwrap_or(-1))
            .bind(reported)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Records that a watcher is degraded or halted, and why.
    pub async fn record_watcher_trouble(
        &self,
        network: Network,
        state: &str,
        error: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE chain_state SET watcher_state = $2, last_error = $3, updated_at = $4 WHERE network = $1")
            .bind(network.as_str())
            .bind(state)
            .bind(error)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn chain_status(&self, network: Network) -> Result<Option<ChainStatus>, StoreError> {
        let row = sqlx::query(
            "SELECT cursor_height, cursor_hash, start_height, tip_height, final_height, watcher_state, last_error, updated_at \
             FROM chain_state WHERE network = $1",
        )
        .bind(network.as_str())
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(ChainStatus {
                network,
                cursor_height: to_u64(r.try_get("cursor_height")?),
                cursor_hash: r.try_get("cursor_hash")?,
                start_height: to_u64(r.try_get("start_height")?),
                tip_height: to_u64(r.try_get("tip_height")?),
                final_height: to_u64(r.try_get("final_height")?),
                watcher_state: r.try_get("watcher_state")?,
                last_error: r.try_get("last_error")?,
                updated_at_ms: r.try_get("updated_at")?,
            })
        })
        .transpose()
    }
}

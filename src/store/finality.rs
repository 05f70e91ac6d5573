//! Finality as the node reports it: the stored final height only rises
//! here, stamping when each transfer first counted as final and queueing
//! the intents whose money just became final.

use paywatch_core::Network;
use sqlx::Row;

use super::blocks::to_i64;
use super::{Store, StoreError, Tx};

/// Queues the intents whose money is not yet final. The predicate is the
/// partial index `intents_money_open`'s, spelled as it is, so years of
/// settled intents are not read.
pub(super) fn queue_money_open_sql(dialect: super::Dialect) -> String {
    let zero = match dialect {
        super::Dialect::Postgres => "0",
        super::Dialect::Sqlite => "'0'",
    };
    format!(
        "INSERT INTO reconcile_queue (network, address) SELECT network, address FROM intents \
         WHERE network = $1 AND (status = 'confirming' OR amount_pending <> {zero})"
    )
}

impl Store {
    /// Lowers the stored final height by `blocks`, in `tx`: finality made
    /// stricter by the operator. Beside a disconnect, the only way it falls;
    /// money already settled keeps standing (`SeenTransfer::stands_final`).
    pub(crate) async fn lower_final_height(
        &self,
        tx: &mut Tx,
        network: Network,
        blocks: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE chain_state SET final_height = final_height - $2 \
             WHERE network = $1 AND final_height IS NOT NULL",
        )
        .bind(network.as_str())
        .bind(blocks)
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
                 AND block_hash <> '{}' AND (matures_at IS NULL OR matures_at <= $3)",
                super::MEMPOOL_BLOCK
            ))
            .bind(network.as_str())
            .bind(previous.unwrap_or(-1))
            .bind(reported)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
            // Coinbase outputs whose 100 blocks just passed.
            sqlx::query(&format!(
                "UPDATE transfers SET final_at = $4 WHERE network = $1 AND matures_at > $2 \
                 AND matures_at <= $3 AND orphaned_at IS NULL AND final_at IS NULL \
                 AND block_hash <> '{}'",
                super::MEMPOOL_BLOCK
            ))
            .bind(network.as_str())
            .bind(previous.unwrap_or(-1))
            .bind(reported)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
            sqlx::query(&queue_money_open_sql(self.dialect()))
                .bind(network.as_str())
                .execute(&mut **tx)
                .await?;
            // The intents' status above may be stale: a reconcile that read
            // the old final height may not have committed `confirming` yet.
            // Money that just became final is queued by where it lies.
            for column in ["block_height", "matures_at"] {
                sqlx::query(&format!(
                    "INSERT INTO reconcile_queue (network, address) SELECT DISTINCT network, to_address \
                     FROM transfers WHERE network = $1 AND {column} > $2 AND {column} <= $3 \
                     AND orphaned_at IS NULL"
                ))
                .bind(network.as_str())
                .bind(previous.unwrap_or(-1))
                .bind(reported)
                .execute(&mut **tx)
                .await?;
            }
        }
        Ok(())
    }
}

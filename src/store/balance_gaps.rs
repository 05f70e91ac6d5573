//! The balance backstop's findings: money a node holds at an issued address
//! beyond what paywatch recorded arriving there. Listed for operators beside
//! the lost window's payments; nothing here touches an intent.

use paywatch_core::{Asset, Network};
use sqlx::Row;

use super::{amount_col, Store, StoreError};

/// Longest an intent stays open after it was made, as far as the backstop
/// looks: it reads intents made within this plus its own bound.
const LONGEST_OPEN_MS: i64 = 7 * 24 * 3_600_000;

/// An address the backstop compares, and the intent it was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WatchedAddress {
    pub(crate) intent_id: i64,
    pub(crate) address: String,
}

/// A difference found, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceGap {
    pub id: i64,
    pub network: Network,
    pub address: String,
    pub intent_id: Option<i64>,
    /// The final height the balance was read at (on Tron: at or below the
    /// solidified state read).
    pub height: u64,
    pub node_balance: u128,
    pub counted: u128,
    /// `node_balance - counted`: money no recorded transfer explains.
    pub unexplained: u128,
    pub found_at_ms: i64,
    pub handled_at_ms: Option<i64>,
    pub handled_by: Option<String>,
    /// What the person who handled it did, in their words.
    pub handled_note: Option<String>,
}

/// What comparing one address found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Finding<'a> {
    pub(crate) network: Network,
    pub(crate) address: &'a str,
    pub(crate) intent_id: i64,
    pub(crate) height: u64,
    pub(crate) node_balance: u128,
    pub(crate) counted: u128,
}

impl Store {
    /// A page of the addresses the backstop compares on `network`, by intent
    /// id after `after`: intents made at or before `issued_before`, open
    /// (awaiting payment, confirming) or changed since `ended_since_ms`
    /// (ended within the bound).
    pub(crate) async fn backstop_addresses(
        &self,
        network: Network,
        ended_since_ms: i64,
        issued_before: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<WatchedAddress>, StoreError> {
        // Made within the bound and the longest an intent stays open: the
        // intents_by_created index keeps the look at the recent ones.
        let rows = sqlx::query(
            "SELECT id, address FROM intents \
             WHERE created_at >= $1 AND created_at <= $2 AND network = $3 AND id > $4 \
               AND (status IN ('awaiting_payment', 'confirming') OR updated_at >= $5) \
             ORDER BY id LIMIT $6",
        )
        .bind(ended_since_ms.saturating_sub(LONGEST_OPEN_MS))
        .bind(issued_before)
        .bind(network.as_str())
        .bind(after)
        .bind(ended_since_ms)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(WatchedAddress {
                    intent_id: r.try_get("id")?,
                    address: r.try_get("address")?,
                })
            })
            .collect()
    }

    /// The native coin (`asset`) recorded arriving at `address` on `network`
    /// in successful transactions of blocks at or below `upto`, not
    /// orphaned. Tokens, failed transactions and the mempool do not count.
    pub(crate) async fn counted_native(
        &self,
        network: Network,
        asset: Asset,
        address: &str,
        upto: u64,
    ) -> Result<u128, StoreError> {
        let upto = i64::try_from(upto).unwrap_or(i64::MAX - 1);
        // Summed here, not in SQL: SQLite keeps amounts as text.
        let rows = sqlx::query(
            "SELECT CAST(amount AS TEXT) AS amount FROM transfers \
             WHERE network = $1 AND to_address = $2 AND asset = $3 \
               AND tx_status = 'success' AND orphaned_at IS NULL AND block_height <= $4",
        )
        .bind(network.as_str())
        .bind(address)
        .bind(asset.as_str())
        .bind(upto)
        .fetch_all(self.pool())
        .await?;
        let mut sum: u128 = 0;
        for r in &rows {
            sum = sum.checked_add(amount_col(r, "amount")?).ok_or_else(|| {
                StoreError::Corrupt(format!("{asset} at {address} sums beyond u128"))
            })?;
        }
        Ok(sum)
    }

    /// Records a difference, once per address and unexplained amount.
    /// Whether it is new.
    pub(crate) async fn record_balance_gap(
        &self,
        f: &Finding<'_>,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let unexplained = f.node_balance.saturating_sub(f.counted);
        let sql = self.sql(
            "INSERT INTO balance_gaps \
               (network, address, intent_id, height, node_balance, counted, unexplained, found_at) \
             VALUES ($1, $2, $3, $4, NUM($5), NUM($6), NUM($7), $8) \
             ON CONFLICT (network, address, unexplained) DO NOTHING RETURNING id",
        );
        let id: Option<i64> = sqlx::query_scalar(&sql)
            .bind(f.network.as_str())
            .bind(f.address)
            .bind(f.intent_id)
            .bind(i64::try_from(f.height).unwrap_or(i64::MAX))
            .bind(f.node_balance.to_string())
            .bind(f.counted.to_string())
            .bind(unexplained.to_string())
            .bind(now_ms)
            .fetch_optional(self.pool())
            .await?;
        Ok(id)
    }

    /// Differences nobody has marked handled, oldest first.
    pub async fn open_balance_gaps(&self, limit: i64) -> Result<Vec<BalanceGap>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, network, address, intent_id, height, \
                    CAST(node_balance AS TEXT) AS node_balance, CAST(counted AS TEXT) AS counted, \
                    CAST(unexplained AS TEXT) AS unexplained, found_at, handled_at, handled_by, \
                    handled_note \
             FROM balance_gaps WHERE handled_at IS NULL ORDER BY found_at, id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(gap_from_row).collect()
    }

    /// How many differences on `network` nobody has marked handled.
    pub async fn open_balance_gap_count(&self, network: Network) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM balance_gaps WHERE network = $1 AND handled_at IS NULL",
        )
        .bind(network.as_str())
        .fetch_one(self.pool())
        .await?)
    }

    /// Open differences per network, for every network with any: what the
    /// database holds, the same for every process that reads it.
    pub(crate) async fn open_balance_gap_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT network, COUNT(*) AS n FROM balance_gaps WHERE handled_at IS NULL \
             GROUP BY network",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("network")?, r.try_get("n")?)))
            .collect()
    }

    /// One difference, handled or not.
    pub async fn balance_gap(&self, id: i64) -> Result<Option<BalanceGap>, StoreError> {
        let row = sqlx::query(
            "SELECT id, network, address, intent_id, height, \
                    CAST(node_balance AS TEXT) AS node_balance, CAST(counted AS TEXT) AS counted, \
                    CAST(unexplained AS TEXT) AS unexplained, found_at, handled_at, handled_by, \
                    handled_note \
             FROM balance_gaps WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(gap_from_row).transpose()
    }

    /// A person looked at the difference (credited the customer by hand,
    /// refunded, found it was the merchant's own money): it leaves the queue.
    /// Whether it was open.
    pub async fn mark_balance_gap_handled(
        &self,
        id: i64,
        by: &str,
        note: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE balance_gaps SET handled_at = $1, handled_by = $2, handled_note = $3 \
             WHERE id = $4 AND handled_at IS NULL",
        )
        .bind(now_ms)
        .bind(by)
        .bind(note)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }
}

fn gap_from_row(r: &sqlx::any::AnyRow) -> Result<BalanceGap, StoreError> {
    let network: String = r.try_get("network")?;
    let height: i64 = r.try_get("height")?;
    Ok(BalanceGap {
        id: r.try_get("id")?,
        network: network
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("balance gap network: {e}")))?,
        address: r.try_get("address")?,
        intent_id: r.try_get("intent_id")?,
        height: u64::try_from(height)
            .map_err(|_| StoreError::Corrupt(format!("balance gap height {height}")))?,
        node_balance: amount_col(r, "node_balance")?,
        counted: amount_col(r, "counted")?,
        unexplained: amount_col(r, "unexplained")?,
        found_at_ms: r.try_get("found_at")?,
        handled_at_ms: r.try_get("handled_at")?,
        handled_by: r.try_get("handled_by")?,
        handled_note: r.try_get("handled_note")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fresh_sqlite() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("gaps.db").display());
        let store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        (store, dir)
    }

    /// A recorded transfer: `n` names its transaction, `state` says whether
    /// it succeeded and when it was orphaned.
    async fn transfer(
        store: &Store,
        n: i64,
        asset: &str,
        to: &str,
        amount: &str,
        height: i64,
        (status, orphaned): (&str, Option<i64>),
    ) {
        sqlx::query(
            "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
               to_address, amount, tx_status, first_seen_at, orphaned_at) \
             VALUES ('ethereum', $1, $2, 0, $3, $4, 0, $5, $6, $7, 0, $8)",
        )
        .bind(asset)
        .bind(format!("0x{n:064x}"))
        .bind(format!("0xb{height:063x}"))
        .bind(height)
        .bind(to)
        .bind(amount)
        .bind(status)
        .bind(orphaned)
        .execute(store.pool())
        .await
        .unwrap();
    }

    /// Only the native coin in successful, live transactions at or below the
    /// height counts; a difference is recorded once per address and amount.
    #[tokio::test]
    async fn only_native_money_counts_and_a_gap_is_recorded_once() {
        let (store, _dir) = fresh_sqlite().await;
        let a = "0x00000000000000000000000000000000000000aa";
        transfer(&store, 1, "ETH", a, "1000", 10, ("success", None)).await;
        transfer(&store, 2, "USDT", a, "5000", 10, ("success", None)).await;
        transfer(&store, 3, "token:0xdead", a, "7", 10, ("success", None)).await;
        transfer(&store, 4, "ETH", a, "300", 11, ("failed", None)).await;
        transfer(&store, 5, "ETH", a, "400", 11, ("success", Some(1))).await;
        transfer(&store, 6, "ETH", a, "20", 12, ("success", None)).await;
        transfer(&store, 7, "ETH", "0xother", "90", 10, ("success", None)).await;
        let counted = |upto| store.counted_native(Network::Ethereum, Asset::Eth, a, upto);
        assert_eq!(counted(9).await.unwrap(), 0);
        assert_eq!(counted(11).await.unwrap(), 1000);
        assert_eq!(counted(12).await.unwrap(), 1020);

        let found = Finding {
            network: Network::Ethereum,
            address: a,
            intent_id: 1,
            height: 12,
            node_balance: 1_520,
            counted: 1_020,
        };
        let first = store.record_balance_gap(&found, 1).await.unwrap();
        assert!(first.is_some());
        let later = Finding {
            height: 13,
            ..found
        };
        assert_eq!(
            store.record_balance_gap(&later, 2).await.unwrap(),
            None,
            "once"
        );
        let open = store.open_balance_gaps(10).await.unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!((open[0].unexplained, open[0].height), (500, 12));
        // Another amount at the same address is another difference.
        let grown = Finding {
            node_balance: 2_020,
            height: 14,
            ..found
        };
        assert!(store.record_balance_gap(&grown, 3).await.unwrap().is_some());
        assert!(store
            .mark_balance_gap_handled(first.unwrap(), "ops", "refunded", 4)
            .await
            .unwrap());
        assert!(!store
            .mark_balance_gap_handled(first.unwrap(), "ops", "again", 5)
            .await
            .unwrap());
        let open = store.open_balance_gaps(10).await.unwrap();
        assert_eq!(
            open.iter().map(|g| g.unexplained).collect::<Vec<_>>(),
            vec![1_000]
        );
    }
}

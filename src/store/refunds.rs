//! Refunds as reconcile checks them on chain (see `reconcile::refund_check`):
//! which are open, where their destinations are (the watcher watches
//! them), the rows of their transactions, and the verdict written back.

use std::collections::HashMap;

use paywatch_core::Network;
use serde::Serialize;
use sqlx::Row;

use super::transfers::{transfer_from_row, TRANSFER_COLUMNS};
use super::{json, Col, Store, StoreError, TransferRecord, Tx};
use crate::reconcile::RefundState;

/// Refund states whose transaction may yet come, or come again.
const OPEN: &str = "('required', 'sent_unconfirmed', 'mismatch')";

/// Refund states a change at the destination is judged again for: a
/// refunded one too, as a reorg past finality can take its transaction out.
const WATCHED: &str = "('required', 'sent_unconfirmed', 'mismatch', 'refunded')";

/// How long a refunded refund's destination stays in a fresh watch set:
/// long enough for a reorg past finality to re-mine its transaction and
/// have it recorded, short of following a customer's (often busy)
/// address for ever.
pub(crate) const REFUNDED_WATCH_MS: i64 = 7 * 86_400_000;

/// A refund as reconcile reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRow {
    pub intent_id: i64,
    /// Where it goes out: where the money came.
    pub network: Network,
    pub destination: String,
    /// The latest transaction support recorded.
    pub txid: Option<String>,
    /// Every transaction support recorded for it, oldest first: the refund
    /// is judged on all of them together.
    pub txids: Vec<String>,
    pub state: RefundState,
    /// The refund's transaction must be seen paying the destination by
    /// then, or it is a mismatch.
    pub check_by_ms: Option<i64>,
    /// When reconcile last wrote a verdict on it.
    pub checked_at_ms: Option<i64>,
    pub mismatch: Option<String>,
    /// False for a refund the previous release recorded during a rolling
    /// upgrade, without its network and state: read here as it meant them
    /// (the network the money came on; `required`), and written back at
    /// the first look so the watcher finds its destination.
    pub placed: bool,
}

/// A verdict on a refund, to be written.
#[derive(Debug, Clone)]
pub(crate) struct RefundCheckWrite<'a> {
    pub intent_id: i64,
    pub network: Network,
    /// As the watcher records it.
    pub destination: &'a str,
    pub state: RefundState,
    pub mismatch: Option<&'a str>,
}

/// The network a refund goes out on, for a row without one (written by the
/// previous release): where the money came, the wrong network's twin for
/// `wrong_network` money, as `reconcile::refund_network` says.
const NETWORK_OR_WHERE_THE_MONEY_CAME: &str = "COALESCE(r.network, \
    CASE WHEN i.exception = 'wrong_network' AND i.network = 'ethereum' THEN 'tron' \
         WHEN i.exception = 'wrong_network' AND i.network = 'tron' THEN 'ethereum' \
         ELSE i.network END)";

#[derive(Serialize)]
struct Id {
    id: i64,
}

/// A refund's transactions, oldest first: those recorded in
/// `refund_transactions` (by when sent), then `refunds.txid`, the latest,
/// which the previous release writes alone.
pub(super) fn in_order(latest: Option<&str>, recorded: Vec<String>) -> Vec<String> {
    let mut txids: Vec<String> = recorded
        .into_iter()
        .filter(|t| Some(t.as_str()) != latest)
        .collect();
    txids.dedup();
    txids.extend(latest.map(str::to_owned));
    txids
}

impl Store {
    /// The refunds of these intents.
    pub(crate) async fn refunds_of(
        &self,
        tx: &mut Tx,
        ids: &[i64],
    ) -> Result<HashMap<i64, RefundRow>, StoreError> {
        let body: Vec<Id> = ids.iter().map(|id| Id { id: *id }).collect();
        let sql = format!(
            "SELECT r.intent_id, {NETWORK_OR_WHERE_THE_MONEY_CAME} AS network, \
             CAST(CASE WHEN r.network IS NULL THEN 0 ELSE 1 END AS BIGINT) AS placed, r.destination, r.txid, r.state, r.check_by, \
             r.checked_at, r.mismatch FROM refunds r JOIN intents i ON i.id = r.intent_id \
             WHERE r.intent_id IN (SELECT id FROM {})",
            self.dialect().rowset("$1", &[("id", Col::Int)])
        );
        let mut out = HashMap::new();
        for r in sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?
        {
            let network: Network = r
                .try_get::<Option<String>, _>("network")?
                .as_deref()
                .unwrap_or_default()
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("refund network: {e}")))?;
            // The previous release kept the spelling support pasted (an
            // Ethereum checksum's capitals): compared as the watcher
            // records addresses.
            let destination: String = r.try_get("destination")?;
            let state: Option<String> = r.try_get("state")?;
            let placed: i64 = r.try_get("placed")?;
            let row = RefundRow {
                intent_id: r.try_get("intent_id")?,
                network,
                destination: network.normalize_address(&destination).into_owned(),
                txids: Vec::new(),
                txid: r.try_get("txid")?,
                state: state
                    .as_deref()
                    .unwrap_or("required")
                    .parse()
                    .map_err(|e| StoreError::Corrupt(format!("refund state: {e}")))?,
                check_by_ms: r.try_get("check_by")?,
                checked_at_ms: r.try_get("checked_at")?,
                mismatch: r.try_get("mismatch")?,
                placed: placed == 1,
            };
            out.insert(row.intent_id, row);
        }
        // The transactions recorded before the latest. The previous release
        // records only `refunds.txid`, which is read above whatever this
        // table holds.
        let sql = format!(
            "SELECT intent_id, txid FROM refund_transactions \
             WHERE intent_id IN (SELECT id FROM {}) ORDER BY sent_at, txid",
            self.dialect().rowset("$1", &[("id", Col::Int)])
        );
        for r in sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?
        {
            let intent_id: i64 = r.try_get("intent_id")?;
            let txid: String = r.try_get("txid")?;
            if let Some(refund) = out.get_mut(&intent_id) {
                refund.txids.push(txid);
            }
        }
        for refund in out.values_mut() {
            refund.txids = in_order(refund.txid.as_deref(), std::mem::take(&mut refund.txids));
        }
        Ok(out)
    }

    /// Every row recorded for these transactions, orphaned ones included.
    pub(crate) async fn rows_of_transactions(
        &self,
        tx: &mut Tx,
        txids: &[(Network, &str)],
    ) -> Result<Vec<TransferRecord>, StoreError> {
        #[derive(Serialize)]
        struct Key<'a> {
            network: &'a str,
            txid: &'a str,
        }
        if txids.is_empty() {
            return Ok(Vec::new());
        }
        let body: Vec<Key<'_>> = txids
            .iter()
            .map(|(n, t)| Key {
                network: n.as_str(),
                txid: t,
            })
            .collect();
        let sql = format!(
            "SELECT {TRANSFER_COLUMNS} FROM transfers WHERE txid IN (SELECT txid FROM {v}) \
             AND network IN (SELECT network FROM {v}) ORDER BY id",
            v = self
                .dialect()
                .rowset("$1", &[("network", Col::Text), ("txid", Col::Text)])
        );
        let rows = sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?;
        let mut out: Vec<TransferRecord> = rows
            .iter()
            .map(transfer_from_row)
            .collect::<Result<_, _>>()?;
        out.retain(|t| txids.iter().any(|(n, x)| *n == t.network && *x == t.txid));
        Ok(out)
    }

    /// The intents whose open refund goes to one of these addresses.
    pub(crate) async fn intents_refunding_to(
        &self,
        tx: &mut Tx,
        pairs: &[(String, String)],
    ) -> Result<Vec<i64>, StoreError> {
        #[derive(Serialize)]
        struct Pair<'a> {
            network: &'a str,
            address: &'a str,
        }
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        let body: Vec<Pair<'_>> = pairs
            .iter()
            .map(|(network, address)| Pair { network, address })
            .collect();
        let sql = format!(
            "SELECT refunds.intent_id FROM refunds JOIN {} ON refunds.network = v.network \
             AND refunds.destination = v.address WHERE refunds.state IN {WATCHED}",
            self.dialect()
                .rowset("$1", &[("network", Col::Text), ("address", Col::Text)])
        );
        let mut ids = Vec::new();
        for r in sqlx::query(&sql)
            .bind(json(&body)?)
            .fetch_all(&mut **tx)
            .await?
        {
            ids.push(r.try_get("intent_id")?);
        }
        Ok(ids)
    }

    /// The intents of up to `limit` refunds sent and still unconfirmed past
    /// their deadline, not judged since: each is judged once more (a
    /// mismatch, unless its transaction was seen meanwhile).
    pub(crate) async fn refunds_past_deadline(
        &self,
        tx: &mut Tx,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let rows = sqlx::query(
            "SELECT intent_id FROM refunds WHERE state = 'sent_unconfirmed' AND check_by < $1 \
             AND (checked_at IS NULL OR checked_at <= check_by) ORDER BY intent_id LIMIT $2",
        )
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&mut **tx)
        .await?;
        rows.iter()
            .map(|r| r.try_get("intent_id").map_err(StoreError::from))
            .collect()
    }

    /// Writes what the chain says of each refund.
    pub(crate) async fn write_refund_checks(
        &self,
        tx: &mut Tx,
        checks: &[RefundCheckWrite<'_>],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        for c in checks {
            sqlx::query(
                "UPDATE refunds SET state = $2, mismatch = $3, checked_at = $4, \
                 network = COALESCE(network, $5), destination = $6 WHERE intent_id = $1",
            )
            .bind(c.intent_id)
            .bind(c.state.as_str())
            .bind(c.mismatch)
            .bind(now_ms)
            .bind(c.network.as_str())
            .bind(c.destination)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// The destinations of `network`'s open refunds required at or after
    /// `since_ms`, and of those refunded in the last `REFUNDED_WATCH_MS`
    /// before `now_ms`, with when required: the watcher watches them as it
    /// watches issued addresses, so the refund's transaction is recorded
    /// when it comes, or comes again after a reorg.
    pub async fn refund_destinations(
        &self,
        network: Network,
        since_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        // Three parts, each able to use its index; the third finds refunds
        // the previous release recorded without a network.
        let rows = sqlx::query(&format!(
            "SELECT destination, required_at FROM refunds \
             WHERE network = $1 AND state IN {OPEN} AND required_at >= $2 \
             UNION ALL SELECT destination, required_at FROM refunds \
             WHERE network = $1 AND state = 'refunded' AND required_at >= $2 \
             AND checked_at >= $3 \
             UNION ALL SELECT r.destination, r.required_at FROM refunds r \
             JOIN intents i ON i.id = r.intent_id \
             WHERE r.network IS NULL AND {NETWORK_OR_WHERE_THE_MONEY_CAME} = $1 \
             AND r.required_at >= $2"
        ))
        .bind(network.as_str())
        .bind(since_ms)
        .bind(now_ms - REFUNDED_WATCH_MS)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let destination: String = r.try_get("destination")?;
                Ok((
                    network.normalize_address(&destination).into_owned(),
                    r.try_get("required_at")?,
                ))
            })
            .collect()
    }

    /// The other intent whose refund already names transaction `txid` on
    /// `network`, as its latest or an earlier one, if any.
    pub(crate) async fn refund_with_txid(
        &self,
        tx: &mut Tx,
        network: Network,
        txid: &str,
        intent_id: i64,
    ) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT intent_id FROM refunds WHERE txid = $1 AND network = $2 \
             AND intent_id <> $3 \
             UNION ALL SELECT intent_id FROM refund_transactions WHERE txid = $1 \
             AND network = $2 AND intent_id <> $3 LIMIT 1",
        )
        .bind(txid)
        .bind(network.as_str())
        .bind(intent_id)
        .fetch_optional(&mut **tx)
        .await?;
        row.map(|r| r.try_get("intent_id").map_err(StoreError::from))
            .transpose()
    }
}

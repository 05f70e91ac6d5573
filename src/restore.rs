//! `paywatch restore-check`: what must happen after a database is restored
//! from a copy older than its last write, before any instance starts.
//!
//! Everything after the copy was taken is gone from the database, but not
//! from the world: customers hold addresses it handed out, storefronts and
//! webhook receivers hold ids and cursors it gave. So, in one transaction:
//! every pool and derived address the lost window could have issued is
//! marked issued (watched, never issued again; payments to it are listed for
//! a person, since no intent here knows them); every id a third party keeps
//! and the feed's cursor jump far past anything the window could have used;
//! and an event on the feed tells the storefront the window is lost.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use paywatch_core::Network;
use serde::Serialize;

use crate::intents::AddressDeriver;
use crate::store::{OutboxEvent, Store, StoreError};

/// How far every kept id and the feed's cursor jump at each restore-check:
/// more than any lost window could use (10,000 intents a day, each with
/// a dozen events, would take 20 years), and still a number a JavaScript
/// storefront reads exactly (below 2^53) after millions of restores.
pub const ID_GAP: i64 = 1_000_000_000;

/// At least this many addresses are marked per network, however quiet its
/// history: a wallet's gap limit is 20.
pub const MIN_MARKED: i64 = 20;

const HOUR_MS: i64 = 3_600_000;

/// What the operator knows about the restore.
#[derive(Debug, Clone, Default)]
pub struct RestorePlan {
    /// When the restored copy was taken; by default the newest moment the
    /// database holds a trace of (an intent, event, ledger entry or issued
    /// address), which can only be earlier.
    pub lost_since_ms: Option<i64>,
    /// Addresses to mark per network instead of the estimate: the issuing
    /// the operator knows happened (from the storefront's own records, say).
    pub addresses_per_network: Option<i64>,
    pub now_ms: i64,
    /// The caller holds SQLite's run lock, so no instance runs on the file,
    /// and the leases in the copy are those of the instance it was taken
    /// beside: stale, not a sign of life.
    pub holds_run_lock: bool,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "{holders} still hold a watcher lease: stop every paywatch instance before restore-check \
         (it must run before any instance issues an address from the restored database); a lease \
         restored with the copy runs out leases.ttl_ms after the copy was taken"
    )]
    InstancesRunning { holders: String },
    #[error("the {network} key failed to derive index {index}: {why}")]
    Derivation {
        network: Network,
        index: i64,
        why: String,
    },
    #[error("the database holds nothing: there is no lost window to move past")]
    Empty,
}

/// What one network's issuing was moved past.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct MarkedAddresses {
    pub network: String,
    /// The most it issued in any hour before the copy.
    pub peak_per_hour: i64,
    /// How many the lost window could have issued, by the estimate or as told.
    pub wanted: i64,
    /// Pool addresses marked issued in the lost window.
    pub pool_marked: i64,
    /// Fewer pool addresses were free than wanted: the pool is empty now.
    pub pool_short: bool,
    /// Derived addresses recorded as issued in the lost window.
    pub derived_marked: i64,
    /// Where the derivation counter moved from and to.
    pub derivation_from: Option<i64>,
    pub derivation_to: Option<i64>,
    /// The counter moved, but no key is configured here to derive (and
    /// watch) the addresses it skipped: payments to them reach the wallet
    /// unseen by paywatch.
    pub derived_unwatched: bool,
}

/// Everything restore-check did, printed and kept in `restores.report`.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport {
    pub restore_id: i64,
    pub lost_since_ms: i64,
    pub checked_at_ms: i64,
    pub id_gap: i64,
    pub networks: Vec<MarkedAddresses>,
    /// Each kept table's next id.
    pub next_ids: BTreeMap<String, i64>,
    /// The feed's cursor of the event announcing the restore.
    pub feed_cursor: i64,
}

/// Runs the restore procedure in one transaction: on any error nothing is
/// written, and it may simply run again. Each run moves counters further; a
/// second run is harmless (it marks more addresses and jumps again).
pub async fn restore_check(
    store: &Store,
    derivers: &HashMap<Network, Arc<dyn AddressDeriver>>,
    plan: RestorePlan,
) -> Result<RestoreReport, RestoreError> {
    let now = plan.now_ms;
    let mut tx = store.begin().await?;
    let live = if plan.holds_run_lock {
        Vec::new()
    } else {
        store.live_leases(&mut tx).await?
    };
    if !live.is_empty() {
        let holders = live
            .iter()
            .map(|(network, holder)| format!("{holder} ({network})"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(RestoreError::InstancesRunning { holders });
    }
    let lost_since = match plan.lost_since_ms {
        Some(at) => at,
        None => store
            .newest_trace(&mut tx)
            .await?
            .ok_or(RestoreError::Empty)?,
    };
    // Hours the window may span, counted generously: a part hour is an hour,
    // and the hour the copy was taken in counts again.
    let window_hours = ((now - lost_since).max(0) + HOUR_MS - 1) / HOUR_MS + 1;

    let mut networks = Vec::new();
    for issuing in store.issuing(&mut tx).await? {
        let wanted = plan
            .addresses_per_network
            .unwrap_or_else(|| (issuing.peak_per_hour * window_hours * 2).max(MIN_MARKED));
        let pool = store
            .mark_pool_lost(&mut tx, issuing.network, wanted, now)
            .await?;
        let pool_marked = pool.len() as i64;
        let mut marked = MarkedAddresses {
            network: issuing.network.as_str().to_owned(),
            peak_per_hour: issuing.peak_per_hour,
            wanted,
            pool_marked,
            pool_short: issuing.free_pool > 0 && pool_marked < wanted,
            derived_marked: 0,
            derivation_from: issuing.next_index,
            derivation_to: None,
            derived_unwatched: false,
        };
        if let Some(from) = issuing.next_index {
            let to = from + wanted;
            match derivers.get(&issuing.network) {
                Some(deriver) => {
                    let fingerprint = crate::keys::fingerprint(issuing.network, deriver.as_ref())
                        .map_err(|e| RestoreError::Derivation {
                        network: issuing.network,
                        index: 0,
                        why: e.to_string(),
                    })?;
                    for index in from..to {
                        let child = u32::try_from(index).map_err(|_| RestoreError::Derivation {
                            network: issuing.network,
                            index,
                            why: "past the last child index".into(),
                        })?;
                        let address =
                            deriver
                                .derive(child)
                                .map_err(|why| RestoreError::Derivation {
                                    network: issuing.network,
                                    index,
                                    why,
                                })?;
                        let address = issuing.network.normalize_address(&address);
                        if store
                            .insert_lost_derived_address(
                                &mut tx,
                                issuing.network,
                                &address,
                                index,
                                &fingerprint,
                                now,
                            )
                            .await?
                        {
                            marked.derived_marked += 1;
                        }
                    }
                }
                None => marked.derived_unwatched = true,
            }
            store
                .raise_derivation_index(&mut tx, issuing.network, to)
                .await?;
            marked.derivation_to = Some(to);
        }
        networks.push(marked);
    }

    let mut next_ids = BTreeMap::new();
    for table in crate::store::KEPT_IDS {
        next_ids.insert(
            table.to_owned(),
            store.jump_ids(&mut tx, table, ID_GAP).await?,
        );
    }
    let feed_cursor = store.jump_feed(&mut tx, ID_GAP).await?;

    let mut report = RestoreReport {
        restore_id: 0,
        lost_since_ms: lost_since,
        checked_at_ms: now,
        id_gap: ID_GAP,
        networks,
        next_ids,
        feed_cursor,
    };
    let json = serde_json::to_string(&report).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    report.restore_id = store
        .record_restore(&mut tx, now, lost_since, ID_GAP, &json)
        .await?;
    store
        .insert_outbox_from(&mut tx, &[announcement(&report)], now, feed_cursor)
        .await?;
    tx.commit().await.map_err(StoreError::from)?;
    Ok(report)
}

/// The feed's `restore.checked` event: what a storefront needs to find the
/// orders, top-ups and debits the restore lost on its side.
fn announcement(report: &RestoreReport) -> OutboxEvent {
    let mut payload = serde_json::Map::new();
    payload.insert("event".into(), "restore.checked".into());
    payload.insert("restore_id".into(), report.restore_id.into());
    payload.insert("lost_since_ms".into(), report.lost_since_ms.into());
    payload.insert("checked_at_ms".into(), report.checked_at_ms.into());
    payload.insert("id_gap".into(), report.id_gap.into());
    let addresses: serde_json::Map<String, serde_json::Value> = report
        .networks
        .iter()
        .map(|m| (m.network.clone(), (m.pool_marked + m.derived_marked).into()))
        .collect();
    payload.insert("addresses_marked".into(), addresses.into());
    OutboxEvent {
        topic: "restore",
        intent_id: None,
        kind: None,
        reference: None,
        payload,
    }
}

impl RestoreReport {
    /// The lines `paywatch restore-check` prints.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "restore {}: the lost window starts at {} ms; every kept id and the feed jumped by {}",
            self.restore_id, self.lost_since_ms, self.id_gap
        )];
        for m in &self.networks {
            let mut line = format!(
                "{}: {} addresses could have been issued (peak {} an hour); marked {} pool",
                m.network, m.wanted, m.peak_per_hour, m.pool_marked
            );
            if let (Some(from), Some(to)) = (m.derivation_from, m.derivation_to) {
                line.push_str(&format!(
                    ", {} derived (derivation index {from} → {to})",
                    m.derived_marked
                ));
            }
            if m.pool_short {
                line.push_str("; the pool is empty now: import addresses before taking orders");
            }
            if m.derived_unwatched {
                line.push_str(
                    "; no key is configured to derive the skipped addresses: they are not watched",
                );
            }
            out.push(line);
        }
        for (table, next) in &self.next_ids {
            out.push(format!("{table}: next id {next}"));
        }
        out.push(format!(
            "feed: restore.checked at cursor {}; payments to the marked addresses: paywatch transfers list --lost-window",
            self.feed_cursor
        ));
        out
    }
}

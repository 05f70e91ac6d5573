//! Operators' rescan requests: read a network's connected blocks again from
//! a height. The API queues one; the network's watcher takes it between
//! polls, records its progress (so a restart carries on) and finishes it.

use paywatch_core::Network;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Store, StoreError};

/// One request, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RescanRequest {
    pub id: i64,
    pub network: Network,
    pub from_height: u64,
    pub requested_at_ms: i64,
    /// The API role that asked.
    pub requested_by: String,
    pub started_at_ms: Option<i64>,
    /// Where it ends: the watcher's cursor when it started.
    pub to_height: Option<u64>,
    /// The next height to read, once started.
    pub next_height: Option<u64>,
    pub blocks_read: u64,
    /// Transfers to watched addresses the node showed in the blocks read.
    pub transfers_seen: u64,
    /// Of those, the ones not recorded before.
    pub transfers_added: u64,
    pub finished_at_ms: Option<i64>,
    pub error: Option<String>,
}

impl RescanRequest {
    /// `pending`, `running`, `done` or `failed`.
    pub fn state(&self) -> &'static str {
        match (self.started_at_ms, self.finished_at_ms, &self.error) {
            (_, Some(_), Some(_)) => "failed",
            (_, Some(_), None) => "done",
            (Some(_), None, _) => "running",
            (None, None, _) => "pending",
        }
    }
}

/// What asking for a rescan did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RescanOutcome {
    Queued(RescanRequest),
    /// One was already waiting or running for the network: that one, and
    /// nothing new was queued.
    Pending(RescanRequest),
    Refused(RescanRefusal),
}

/// Why a rescan was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RescanRefusal {
    #[error(
        "from_height {from_height} is outside what the {network} watcher has read: \
         its history here starts at height {start_height} and the chain's tip is {tip_height}"
    )]
    OutOfRange {
        network: Network,
        from_height: u64,
        start_height: u64,
        tip_height: u64,
    },
    #[error("the {network} watcher has read no block yet: there is nothing to rescan")]
    NothingRead { network: Network },
    #[error(
        "from_height {from_height} is below height {pruned_below}, under which the {network} \
         blocks were pruned (blocks.retention_days): a rescan reads stored blocks only; start \
         at {pruned_below} or above"
    )]
    Pruned {
        network: Network,
        from_height: u64,
        pruned_below: u64,
    },
}

/// Counts from one stretch of a rescan, added to the request's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RescanProgress {
    pub(crate) next_height: u64,
    pub(crate) blocks_read: u64,
    pub(crate) transfers_seen: u64,
    pub(crate) transfers_added: u64,
}

const COLUMNS: &str =
    "id, network, from_height, requested_at, requested_by, started_at, to_height, \
     next_height, blocks_read, transfers_seen, transfers_added, finished_at, error";

fn height(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("rescan {what} {v}")))
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn request_from_row(r: &AnyRow) -> Result<RescanRequest, StoreError> {
    let network: String = r.try_get("network")?;
    let optional = |col: &str| -> Result<Option<u64>, StoreError> {
        r.try_get::<Option<i64>, _>(col)?
            .map(|v| height(v, col))
            .transpose()
    };
    Ok(RescanRequest {
        id: r.try_get("id")?,
        network: network
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("rescan network: {e}")))?,
        from_height: height(r.try_get("from_height")?, "from_height")?,
        requested_at_ms: r.try_get("requested_at")?,
        requested_by: r.try_get("requested_by")?,
        started_at_ms: r.try_get("started_at")?,
        to_height: optional("to_height")?,
        next_height: optional("next_height")?,
        blocks_read: height(r.try_get("blocks_read")?, "blocks_read")?,
        transfers_seen: height(r.try_get("transfers_seen")?, "transfers_seen")?,
        transfers_added: height(r.try_get("transfers_added")?, "transfers_added")?,
        finished_at_ms: r.try_get("finished_at")?,
        error: r.try_get("error")?,
    })
}

impl Store {
    /// Queues a rescan of `network` from `from_height`, which must lie
    /// between the first height this database followed and the chain's
    /// tip. While one is unfinished for the network, that one is the answer.
    pub async fn request_rescan(
        &self,
        network: Network,
        from_height: u64,
        requested_by: &str,
        now_ms: i64,
    ) -> Result<RescanOutcome, StoreError> {
        let status = self.chain_status(network).await?;
        // The highest block read counts as well as the recorded tip: the tip
        // is written after the blocks it covers, so right after a catch-up
        // it may still name a lower height than blocks already read.
        let Some((start_height, tip_height)) = status.and_then(|s| {
            let top = match (s.tip_height, s.cursor_height) {
                (Some(t), Some(c)) => Some(t.max(c)),
                (t, c) => t.or(c),
            };
            s.start_height.zip(top)
        }) else {
            return Ok(RescanOutcome::Refused(RescanRefusal::NothingRead {
                network,
            }));
        };
        if from_height < start_height || from_height > tip_height {
            return Ok(RescanOutcome::Refused(RescanRefusal::OutOfRange {
                network,
                from_height,
                start_height,
                tip_height,
            }));
        }
        if let Some(pruned_below) = self
            .blocks_pruned_below(network)
            .await?
            .and_then(|p| u64::try_from(p).ok())
            .filter(|p| from_height < *p)
        {
            return Ok(RescanOutcome::Refused(RescanRefusal::Pruned {
                network,
                from_height,
                pruned_below,
            }));
        }
        // The partial unique index settles a race between two askers; the
        // pending one can finish between the insert and the read, so try again.
        for _ in 0..3 {
            let inserted = sqlx::query(
                "INSERT INTO rescan_requests (network, from_height, requested_at, requested_by) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (network) WHERE finished_at IS NULL DO NOTHING \
                 RETURNING id",
            )
            .bind(network.as_str())
            .bind(to_i64(from_height))
            .bind(now_ms)
            .bind(requested_by)
            .fetch_optional(self.pool())
            .await?;
            if let Some(row) = inserted {
                let id: i64 = row.try_get("id")?;
                return match self.rescan(id).await? {
                    Some(r) => Ok(RescanOutcome::Queued(r)),
                    None => Err(StoreError::Corrupt(format!("rescan {id} vanished"))),
                };
            }
            if let Some(pending) = self.pending_rescan(network).await? {
                return Ok(RescanOutcome::Pending(pending));
            }
        }
        Err(StoreError::Corrupt(format!(
            "no rescan of {network} could be queued nor found pending"
        )))
    }

    pub(crate) async fn rescan(&self, id: i64) -> Result<Option<RescanRequest>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM rescan_requests WHERE id = $1");
        sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.pool())
            .await?
            .as_ref()
            .map(request_from_row)
            .transpose()
    }

    /// The network's unfinished request, if any.
    pub(crate) async fn pending_rescan(
        &self,
        network: Network,
    ) -> Result<Option<RescanRequest>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM rescan_requests WHERE network = $1 AND finished_at IS NULL \
             ORDER BY id LIMIT 1"
        );
        sqlx::query(&sql)
            .bind(network.as_str())
            .fetch_optional(self.pool())
            .await?
            .as_ref()
            .map(request_from_row)
            .transpose()
    }

    /// The network's requests, newest first.
    pub async fn rescans(
        &self,
        network: Network,
        limit: i64,
    ) -> Result<Vec<RescanRequest>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM rescan_requests WHERE network = $1 ORDER BY id DESC LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(network.as_str())
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(request_from_row).collect()
    }

    /// Marks the request started, ending at `to_height`. A request already
    /// started (by a watcher since restarted) keeps its end and progress.
    pub(crate) async fn start_rescan(
        &self,
        id: i64,
        to_height: u64,
        now_ms: i64,
    ) -> Result<RescanRequest, StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE rescan_requests SET started_at = $2, to_height = $3, next_height = from_height \
             WHERE id = $1 AND started_at IS NULL",
        )
        .bind(id)
        .bind(now_ms)
        .bind(to_i64(to_height))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.rescan(id)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("rescan {id} vanished")))
    }

    /// Records how far the request got and what it found on the way.
    pub(crate) async fn advance_rescan(
        &self,
        id: i64,
        progress: RescanProgress,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE rescan_requests SET next_height = $2, blocks_read = blocks_read + $3, \
             transfers_seen = transfers_seen + $4, transfers_added = transfers_added + $5 \
             WHERE id = $1",
        )
        .bind(id)
        .bind(to_i64(progress.next_height))
        .bind(to_i64(progress.blocks_read))
        .bind(to_i64(progress.transfers_seen))
        .bind(to_i64(progress.transfers_added))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Ends the request, with why it stopped short if it did.
    pub(crate) async fn finish_rescan(
        &self,
        id: i64,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE rescan_requests SET finished_at = $2, error = $3 \
             WHERE id = $1 AND finished_at IS NULL",
        )
        .bind(id)
        .bind(now_ms)
        .bind(error)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

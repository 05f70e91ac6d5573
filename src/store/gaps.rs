//! Gaps an operator accepted: heights a halted watcher skips because its
//! node no longer serves them and no node with that history is at hand.
//! Payments in them were never seen, so each gap stays on record.
//!
//! Accepting one is the only way a watcher's history gets a hole, and it
//! is refused unless the watcher halted: a running watcher never skips.

use paywatch_core::Network;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::blocks::{to_i64, to_u64};
use super::{Store, StoreError};

/// One accepted gap, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainGap {
    pub id: i64,
    pub network: Network,
    /// The first and last height skipped.
    pub from_height: u64,
    pub to_height: u64,
    pub accepted_at_ms: i64,
    pub accepted_by: String,
    pub reason: String,
}

/// Why a gap was not accepted; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GapRefusal {
    #[error(
        "the {network} watcher is {state}, not halted: a gap is only accepted for a watcher \
         that halted because its node lacks the blocks"
    )]
    NotHalted { network: Network, state: String },
    #[error(
        "the {network} watcher has read no block yet: there is nothing to skip from \
         (set networks.{network}.start_height instead)"
    )]
    NothingRead { network: Network },
    #[error("resume_at {resume_at} skips nothing: the {network} watcher's next height is {next}")]
    NothingSkipped {
        network: Network,
        resume_at: u64,
        next: u64,
    },
    #[error(
        "a gap up to height {} was accepted already and the {network} watcher has not \
         resumed: restart paywatch to resume at {resume_at}", resume_at - 1
    )]
    NotResumedYet { network: Network, resume_at: u64 },
    #[error("who accepts the gap and why must both be given")]
    Unexplained,
}

const COLUMNS: &str = "id, network, from_height, to_height, accepted_at, accepted_by, reason";

/// The first height past `network`'s newest accepted gap, if it has one.
async fn resume_height_in<'e, E>(e: E, network: Network) -> Result<Option<u64>, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let top: Option<i64> =
        sqlx::query_scalar("SELECT MAX(to_height) FROM chain_gaps WHERE network = $1")
            .bind(network.as_str())
            .fetch_one(e)
            .await?;
    Ok(to_u64(top).map(|h| h + 1))
}

fn gap_from_row(r: &AnyRow) -> Result<ChainGap, StoreError> {
    let network: String = r.try_get("network")?;
    let height = |col: &str| -> Result<u64, StoreError> {
        to_u64(r.try_get::<Option<i64>, _>(col)?)
            .ok_or_else(|| StoreError::Corrupt(format!("chain gap without {col}")))
    };
    Ok(ChainGap {
        id: r.try_get("id")?,
        network: network
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("chain gap network: {e}")))?,
        from_height: height("from_height")?,
        to_height: height("to_height")?,
        accepted_at_ms: r.try_get("accepted_at")?,
        accepted_by: r.try_get("accepted_by")?,
        reason: r.try_get("reason")?,
    })
}

impl Store {
    /// Records that the halted `network` watcher skips every height from
    /// its next one up to `resume_at - 1`, and clears its cursor so that it
    /// starts at `resume_at` when paywatch runs again.
    pub async fn accept_gap(
        &self,
        network: Network,
        resume_at: u64,
        accepted_by: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<Result<ChainGap, GapRefusal>, StoreError> {
        if accepted_by.trim().is_empty() || reason.trim().is_empty() {
            return Ok(Err(GapRefusal::Unexplained));
        }
        let mut tx = self.begin().await?;
        let sql = self.sql(
            "SELECT cursor_height, watcher_state FROM chain_state WHERE network = $1 FOR_UPDATE",
        );
        let row = sqlx::query(&sql)
            .bind(network.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            return Ok(Err(GapRefusal::NothingRead { network }));
        };
        let state: String = row.try_get("watcher_state")?;
        if state != "halted" {
            return Ok(Err(GapRefusal::NotHalted { network, state }));
        }
        let Some(cursor) = to_u64(row.try_get("cursor_height")?) else {
            return Ok(Err(match resume_height_in(&mut *tx, network).await? {
                Some(resume_at) => GapRefusal::NotResumedYet { network, resume_at },
                None => GapRefusal::NothingRead { network },
            }));
        };
        let next = cursor + 1;
        if resume_at <= next {
            return Ok(Err(GapRefusal::NothingSkipped {
                network,
                resume_at,
                next,
            }));
        }
        let row = sqlx::query(&format!(
            "INSERT INTO chain_gaps (network, from_height, to_height, accepted_at, accepted_by, reason) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {COLUMNS}"
        ))
        .bind(network.as_str())
        .bind(to_i64(next))
        .bind(to_i64(resume_at - 1))
        .bind(now_ms)
        .bind(accepted_by)
        .bind(reason)
        .fetch_one(&mut *tx)
        .await?;
        let gap = gap_from_row(&row)?;
        // No cursor: the first block at or past `resume_at` fits, as on a
        // first start; the blocks below stay, never loaded again.
        sqlx::query(
            "UPDATE chain_state SET cursor_height = NULL, cursor_hash = NULL, last_error = $2, \
             updated_at = $3 WHERE network = $1",
        )
        .bind(network.as_str())
        .bind(format!(
            "heights {}..={} skipped, accepted by {accepted_by}: {reason}; restart paywatch \
             to resume at {resume_at}",
            gap.from_height, gap.to_height
        ))
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(gap))
    }

    /// Every gap accepted for `network`, oldest first.
    pub async fn chain_gaps(&self, network: Network) -> Result<Vec<ChainGap>, StoreError> {
        sqlx::query(&format!(
            "SELECT {COLUMNS} FROM chain_gaps WHERE network = $1 ORDER BY id"
        ))
        .bind(network.as_str())
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(gap_from_row)
        .collect()
    }

    /// The first height past the newest accepted gap: nothing below it is
    /// part of the watcher's chain any more.
    pub(crate) async fn resume_height(&self, network: Network) -> Result<Option<u64>, StoreError> {
        resume_height_in(self.pool(), network).await
    }
}

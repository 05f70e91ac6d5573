//! Watcher leases: which instance watches a network, and the fence that
//! keeps a former holder from writing. No consensus of our own: the lease is
//! a row, the fence a token read under a share lock in the same transaction
//! as the write it guards, so a takeover (which updates the row) waits for
//! a write in flight and every later write of the old holder sees the new
//! token.

use paywatch_core::Network;
use sqlx::Row;

use super::{Store, StoreError, Tx};

/// 1 when the lease has run out by the database's clock (an integer, which
/// both dialects decode alike).
const EXPIRED: &str =
    "CAST(CASE WHEN expires_at < DB_NOW_MS THEN 1 ELSE 0 END AS BIGINT) AS expired";

/// A lease held: the network and the token this holder's writes carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub network: Network,
    pub token: i64,
}

/// A network's lease row as every instance sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub network: Network,
    pub holder: String,
    pub token: i64,
    /// The database's clock, Unix milliseconds.
    pub acquired_at: i64,
    pub expires_at: i64,
    /// Whether the lease had run out when read.
    pub expired: bool,
}

impl Store {
    /// Takes `network`'s lease for `holder` if nobody holds it or the
    /// holder's has run out; `None` while another instance holds it. Every
    /// acquisition gets a new token, even by the same holder.
    pub async fn try_acquire_lease(
        &self,
        network: Network,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Option<Lease>, StoreError> {
        // A plain read first: standbys asking every second must not lock the
        // row the holder's writes take a share lock on.
        let sql = self.sql(&format!(
            "SELECT {EXPIRED} FROM watcher_leases WHERE network = $1"
        ));
        let held = sqlx::query(&sql)
            .bind(network.as_str())
            .fetch_optional(self.pool())
            .await?;
        if let Some(row) = held {
            if row.try_get::<i64, _>("expired")? == 0 {
                return Ok(None);
            }
        }
        self.grant_lease(network, holder, ttl_ms, true).await
    }

    /// Takes `network`'s lease whoever holds it, with a new token. Only for
    /// an instance that knows it is the only one (it holds an SQLite file's
    /// run lock): a holder whose lease has not run out can then only be
    /// this file's previous process, which died without handing it back.
    pub async fn take_lease(
        &self,
        network: Network,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Lease, StoreError> {
        self.grant_lease(network, holder, ttl_ms, false)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("no {network} lease row after taking it")))
    }

    /// Writes `holder` into the lease row with the next token: always, or
    /// `only_if_expired`. `None` when it was not expired.
    async fn grant_lease(
        &self,
        network: Network,
        holder: &str,
        ttl_ms: i64,
        only_if_expired: bool,
    ) -> Result<Option<Lease>, StoreError> {
        let condition = if only_if_expired {
            "WHERE watcher_leases.expires_at < excluded.acquired_at"
        } else {
            ""
        };
        let sql = self.sql(&format!(
            "INSERT INTO watcher_leases (network, holder, token, acquired_at, expires_at) \
             VALUES ($1, $2, 1, DB_NOW_MS, DB_NOW_MS + $3) \
             ON CONFLICT (network) DO UPDATE SET holder = excluded.holder, \
             token = watcher_leases.token + 1, acquired_at = excluded.acquired_at, \
             expires_at = excluded.expires_at {condition} \
             RETURNING token"
        ));
        let row = sqlx::query(&sql)
            .bind(network.as_str())
            .bind(holder)
            .bind(ttl_ms)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| {
            Ok(Lease {
                network,
                token: r.try_get("token")?,
            })
        })
        .transpose()
    }

    /// Extends a held lease by `ttl_ms` from now. `false`: it was taken over
    /// (the token moved on), and this holder must stop writing.
    pub async fn renew_lease(&self, lease: &Lease, ttl_ms: i64) -> Result<bool, StoreError> {
        let sql = self.sql(
            "UPDATE watcher_leases SET expires_at = DB_NOW_MS + $3 \
             WHERE network = $1 AND token = $2",
        );
        let done = sqlx::query(&sql)
            .bind(lease.network.as_str())
            .bind(lease.token)
            .bind(ttl_ms)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives a held lease up at once, so another instance need not wait for
    /// it to run out (a clean shutdown).
    pub async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        sqlx::query("UPDATE watcher_leases SET expires_at = 0 WHERE network = $1 AND token = $2")
            .bind(lease.network.as_str())
            .bind(lease.token)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Moves the network's lease token on and lets it run out, in `tx`: its
    /// holder's next fenced write and renewal fail, and whoever asks next
    /// gets a new token.
    pub(crate) async fn fence_out_lease(
        &self,
        tx: &mut Tx,
        network: Network,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE watcher_leases SET token = token + 1, expires_at = 0 WHERE network = $1",
        )
        .bind(network.as_str())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Every network's lease, by network.
    pub async fn lease_holders(&self) -> Result<Vec<LeaseHolder>, StoreError> {
        let sql = self.sql(&format!(
            "SELECT network, holder, token, acquired_at, expires_at, {EXPIRED} \
             FROM watcher_leases ORDER BY network"
        ));
        let rows = sqlx::query(&sql).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|r| {
                let name: String = r.try_get("network")?;
                Ok(LeaseHolder {
                    network: name.parse().map_err(|_| {
                        StoreError::Corrupt(format!("watcher_leases names network '{name}'"))
                    })?,
                    holder: r.try_get("holder")?,
                    token: r.try_get("token")?,
                    acquired_at: r.try_get("acquired_at")?,
                    expires_at: r.try_get("expires_at")?,
                    expired: r.try_get::<i64, _>("expired")? != 0,
                })
            })
            .collect()
    }

    /// A handle whose every write transaction first checks `lease`, and
    /// fails with [`StoreError::LeaseLost`] once it is no longer current.
    /// Reads are not fenced: a stale read can only lead to a write, and that
    /// write is.
    pub fn fenced(&self, lease: Lease) -> Store {
        Store {
            fence: Some(lease),
            ..self.clone()
        }
    }

    /// The fence check, first in every transaction of a fenced handle. The
    /// share lock is held to the commit: a takeover waits for this write,
    /// and this write never lands after one.
    pub(super) async fn check_fence(&self, tx: &mut Tx, lease: &Lease) -> Result<(), StoreError> {
        let sql = match self.dialect() {
            // A watcher's transaction waits on nothing but its own CPU
            // between statements. Left open longer, its process is frozen
            // with the share lock held, and a takeover would wait on it:
            // the server ends such a session after two seconds.
            super::Dialect::Postgres => {
                "SELECT token, set_config('idle_in_transaction_session_timeout', '2s', true) AS t \
                 FROM watcher_leases WHERE network = $1 FOR SHARE"
            }
            super::Dialect::Sqlite => "SELECT token FROM watcher_leases WHERE network = $1",
        };
        let current: Option<i64> = sqlx::query(sql)
            .bind(lease.network.as_str())
            .fetch_optional(&mut **tx)
            .await?
            .map(|r| r.try_get("token"))
            .transpose()?;
        if current == Some(lease.token) {
            Ok(())
        } else {
            Err(StoreError::LeaseLost {
                network: lease.network,
                token: lease.token,
                current,
            })
        }
    }
}

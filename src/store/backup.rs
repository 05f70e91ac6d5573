//! `paywatch backup`: a consistent copy of a SQLite database, taken beside a
//! running daemon. PostgreSQL has better tools of its own (continuous
//! archiving for point-in-time recovery), so it is pointed to them.

use std::path::Path;

use super::{Dialect, Store, StoreError};

impl Store {
    /// Writes a copy of the database to `to`, a file that must not exist yet,
    /// and returns its size. SQLite's `VACUUM INTO` reads one snapshot in a
    /// read transaction: writers go on, and the copy holds every committed
    /// transaction up to its start, none half.
    pub async fn backup_to(&self, to: &Path) -> Result<u64, StoreError> {
        if self.dialect() == Dialect::Postgres {
            return Err(StoreError::BackupRefused(
                "paywatch backup copies SQLite databases only; back PostgreSQL up with its own \
                 tools: continuous WAL archiving with pg_basebackup for point-in-time recovery, \
                 or pg_dump for a logical copy (README, \"Backups and restores\")"
                    .into(),
            ));
        }
        if to.exists() {
            return Err(StoreError::BackupRefused(format!(
                "{} exists: paywatch backup writes a new file and never overwrites one",
                to.display()
            )));
        }
        let target = to.to_str().ok_or_else(|| {
            StoreError::BackupRefused(format!("{} is not a UTF-8 path", to.display()))
        })?;
        sqlx::query("VACUUM INTO $1")
            .bind(target)
            .execute(self.pool())
            .await?;
        let written = std::fs::metadata(to).map_err(|e| {
            StoreError::BackupRefused(format!("{} was not written: {e}", to.display()))
        })?;
        Ok(written.len())
    }
}

//! The console's sessions: a random id's hash, the role and the configured
//! token hash it was signed in with, and its end. Written by
//! `console::session` only.

use sqlx::Row;

use super::{Store, StoreError};

/// A session that has not ended or expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConsoleSession {
    pub role: String,
    pub token_hash: String,
}

/// Expired sessions are kept this long after their end, then deleted.
const KEEP_EXPIRED_MS: i64 = 24 * 3600 * 1000;

impl Store {
    pub(crate) async fn start_console_session(
        &self,
        id_hash: &str,
        role: &str,
        token_hash: &str,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        // Signing in is rare and the table small: pruning here needs no
        // task of its own.
        sqlx::query("DELETE FROM console_sessions WHERE expires_at < $1")
            .bind(now_ms - KEEP_EXPIRED_MS)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO console_sessions (id_hash, role, token_hash, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id_hash)
        .bind(role)
        .bind(token_hash)
        .bind(now_ms)
        .bind(expires_at_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn console_session(
        &self,
        id_hash: &str,
        now_ms: i64,
    ) -> Result<Option<ConsoleSession>, StoreError> {
        let row = sqlx::query(
            "SELECT role, token_hash FROM console_sessions \
             WHERE id_hash = $1 AND ended_at IS NULL AND expires_at > $2",
        )
        .bind(id_hash)
        .bind(now_ms)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(ConsoleSession {
                role: r.try_get("role")?,
                token_hash: r.try_get("token_hash")?,
            })
        })
        .transpose()
    }

    pub(crate) async fn end_console_session(
        &self,
        id_hash: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE console_sessions SET ended_at = $2 WHERE id_hash = $1 AND ended_at IS NULL",
        )
        .bind(id_hash)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }
}

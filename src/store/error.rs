#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database url '{0}': use postgres://… or sqlite://…")]
    UnsupportedUrl(String),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    /// A command that only reads met a schema older than this binary's: it
    /// upgrades nothing behind an operator's back.
    #[error(
        "the database schema is at migration {}, and this paywatch needs migration {need}: \
         run `paywatch migrate` first (only `paywatch migrate` upgrades a schema in use, and \
         `paywatch run` on SQLite, under its run lock; README, Upgrades)",
        at.map_or_else(|| "none".to_owned(), |v| v.to_string())
    )]
    SchemaBehind { at: Option<i64>, need: i64 },
    /// `paywatch backup` cannot write the copy asked for.
    #[error("{0}")]
    BackupRefused(String),
    /// A fenced write after its lease was taken over: nothing was written.
    #[error("the {network} watcher lease (token {token}) is no longer held{}: nothing was written", current.map(|t| format!("; token {t} holds it now")).unwrap_or_default())]
    LeaseLost {
        network: paywatch_core::Network,
        token: i64,
        current: Option<i64>,
    },
}

impl StoreError {
    /// Another transaction changed what this one read (PostgreSQL's
    /// serialization failure or a deadlock): nothing was written, and the
    /// whole transaction may simply run again.
    pub fn is_retryable_conflict(&self) -> bool {
        match self {
            StoreError::Db(sqlx::Error::Database(e)) => {
                matches!(e.code().as_deref(), Some("40001") | Some("40P01"))
            }
            _ => false,
        }
    }

    /// A unique-constraint violation: somebody else already wrote this fact.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            StoreError::Db(sqlx::Error::Database(e)) => e.is_unique_violation(),
            _ => false,
        }
    }
}

-- Restores. `paywatch restore-check` marks the pool and derived addresses
-- that could have been handed out after the backup was taken as issued to an
-- intent this database never saw: watched, never issued again, and their
-- payments listed for review.
ALTER TABLE addresses ADD COLUMN lost_window_at INTEGER;

-- What each restore-check did, for the audit and `paywatch status`.
CREATE TABLE restores (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    checked_at INTEGER NOT NULL,
    lost_since INTEGER NOT NULL,
    id_gap     INTEGER NOT NULL,
    report     TEXT    NOT NULL
);

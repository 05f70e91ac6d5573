SET LOCAL lock_timeout = '5s';
-- Restores (issue 21, found 1). `paywatch restore-check` marks the pool and
-- derived addresses that could have been handed out after the backup was
-- taken as issued to an intent this database never saw: watched, never
-- issued again, and their payments listed for review. Adding a nullable
-- column without a default changes only the catalog.
ALTER TABLE addresses ADD COLUMN lost_window_at BIGINT;

-- What each restore-check did, for the audit and `paywatch status`.
CREATE TABLE restores (
    id             BIGSERIAL PRIMARY KEY,
    checked_at     BIGINT NOT NULL,
    -- The newest moment the restored copy holds: the lost window starts here.
    lost_since     BIGINT NOT NULL,
    -- How far every id a third party may keep jumped.
    id_gap         BIGINT NOT NULL,
    -- The report printed, as JSON: addresses marked per network, ids.
    report         TEXT   NOT NULL
);

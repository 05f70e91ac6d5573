-- Configuration agreement. The settings that decide when money counts are
-- pinned per network: the first instance pins its own, and only
-- `paywatch config apply` changes them.
CREATE TABLE money_settings (
    network     TEXT    PRIMARY KEY,
    fingerprint TEXT    NOT NULL,
    settings    TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL,
    applied_by  TEXT    NOT NULL
);

-- Each instance as it last started: its version and a hash of its
-- effective configuration (secrets redacted).
CREATE TABLE instances (
    name        TEXT    PRIMARY KEY,
    version     TEXT    NOT NULL,
    config_hash TEXT    NOT NULL,
    started_at  INTEGER NOT NULL
);

SET LOCAL lock_timeout = '5s';
-- Configuration agreement (issue 21, found 8). The settings that decide when
-- money counts (confirmations, finality, tolerances, deadlines, token
-- contracts) are pinned per network: the first instance pins its own, and
-- only `paywatch config apply` changes them. An instance configured
-- otherwise refuses to start, and one already running never takes the
-- network's lease, so no stale instance settles at another depth.
CREATE TABLE money_settings (
    network     TEXT   PRIMARY KEY,
    fingerprint TEXT   NOT NULL,
    -- The settings as JSON, for the message naming what differs.
    settings    TEXT   NOT NULL,
    applied_at  BIGINT NOT NULL,
    applied_by  TEXT   NOT NULL
);

-- Each instance as it last started: its version and a hash of its
-- effective configuration (secrets redacted).
CREATE TABLE instances (
    name        TEXT   PRIMARY KEY,
    version     TEXT   NOT NULL,
    config_hash TEXT   NOT NULL,
    started_at  BIGINT NOT NULL
);

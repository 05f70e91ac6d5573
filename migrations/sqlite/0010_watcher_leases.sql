-- Which instance runs each network's watcher. Any number of instances share
-- one database; each network is watched by the holder of its row alone.
-- `token` rises at every change of holder, and every write of a watcher
-- first reads it under a share lock: a former holder that was stalled while
-- its lease ran out finds another token and writes nothing. Times are the
-- database's clock, so instances' clocks never have to agree.
CREATE TABLE watcher_leases (
    network     TEXT   PRIMARY KEY,
    holder      TEXT   NOT NULL,
    token       BIGINT NOT NULL CHECK (token >= 1),
    acquired_at BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);

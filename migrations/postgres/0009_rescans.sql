-- Operators' requests to read a network's connected blocks again from a
-- height (a node served bad data, an address was imported late). The
-- network's watcher carries the oldest unfinished one on between polls.
CREATE TABLE rescan_requests (
    id              BIGSERIAL PRIMARY KEY,
    network         TEXT   NOT NULL,
    from_height     BIGINT NOT NULL CHECK (from_height >= 0),
    requested_at    BIGINT NOT NULL,
    -- The API role that asked.
    requested_by    TEXT   NOT NULL,
    started_at      BIGINT,
    -- The watcher's cursor when it started: blocks above it were read with
    -- everything the rescan knows, so it ends there.
    to_height       BIGINT,
    -- Where a watcher restarted mid-rescan carries on.
    next_height     BIGINT,
    blocks_read     BIGINT NOT NULL DEFAULT 0,
    transfers_seen  BIGINT NOT NULL DEFAULT 0,
    transfers_added BIGINT NOT NULL DEFAULT 0,
    finished_at     BIGINT,
    error           TEXT
);
-- One unfinished request per network: asking again while it waits gets it,
-- even when two requests race.
CREATE UNIQUE INDEX rescan_one_pending ON rescan_requests (network) WHERE finished_at IS NULL;
CREATE INDEX rescans_by_network ON rescan_requests (network, id);

-- Heights an operator accepted that a watcher skips: its node no longer
-- serves them (past a Solana node's retention) and no node with that
-- history was at hand. A payment in them was never seen, so each gap stays
-- on record, shown by `paywatch status`.
CREATE TABLE chain_gaps (
    id          BIGSERIAL PRIMARY KEY,
    network     TEXT   NOT NULL,
    -- The first and last height skipped.
    from_height BIGINT NOT NULL CHECK (from_height >= 0),
    to_height   BIGINT NOT NULL CHECK (to_height >= from_height),
    accepted_at BIGINT NOT NULL,
    -- Who accepted it, and why, in their words.
    accepted_by TEXT   NOT NULL,
    reason      TEXT   NOT NULL
);
CREATE INDEX chain_gaps_by_network ON chain_gaps (network, to_height);

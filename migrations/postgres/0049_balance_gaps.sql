SET LOCAL lock_timeout = '5s';
-- The balance backstop (issue 37): money a node holds at an issued address
-- that no recorded transfer explains (ETH a contract sent without traces,
-- TRX a contract sent on a node that keeps no internal transactions). One
-- row per address and unexplained amount: a later height that finds the
-- same difference records nothing new. A person marks it handled; nothing
-- here ever settles an intent or changes its status.
CREATE TABLE IF NOT EXISTS balance_gaps (
    id           BIGSERIAL PRIMARY KEY,
    network      TEXT   NOT NULL,
    address      TEXT   NOT NULL,
    intent_id    BIGINT,
    height       BIGINT NOT NULL,
    node_balance NUMERIC(78,0) NOT NULL CHECK (node_balance >= 0),
    counted      NUMERIC(78,0) NOT NULL CHECK (counted >= 0),
    unexplained  NUMERIC(78,0) NOT NULL CHECK (unexplained > 0),
    found_at     BIGINT NOT NULL,
    handled_at   BIGINT,
    handled_by   TEXT,
    handled_note TEXT,
    CONSTRAINT balance_gaps_once UNIQUE (network, address, unexplained)
);
CREATE INDEX IF NOT EXISTS balance_gaps_open ON balance_gaps (found_at, id) WHERE handled_at IS NULL;

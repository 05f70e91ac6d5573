-- The balance backstop (issue 37): money a node holds at an issued address
-- that no recorded transfer explains (ETH a contract sent without traces,
-- TRX a contract sent on a node that keeps no internal transactions). One
-- row per address and unexplained amount: a later height that finds the
-- same difference records nothing new. A person marks it handled; nothing
-- here ever settles an intent or changes its status. Amounts are TEXT
-- integers in base units, as everywhere on SQLite.
CREATE TABLE IF NOT EXISTS balance_gaps (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    network      TEXT    NOT NULL,
    address      TEXT    NOT NULL,
    intent_id    INTEGER,
    height       INTEGER NOT NULL,
    node_balance TEXT    NOT NULL,
    counted      TEXT    NOT NULL,
    unexplained  TEXT    NOT NULL CHECK (length(unexplained) > 0 AND unexplained <> '0'),
    found_at     INTEGER NOT NULL,
    handled_at   INTEGER,
    handled_by   TEXT,
    handled_note TEXT,
    CONSTRAINT balance_gaps_once UNIQUE (network, address, unexplained)
);
CREATE INDEX IF NOT EXISTS balance_gaps_open ON balance_gaps (found_at, id) WHERE handled_at IS NULL;

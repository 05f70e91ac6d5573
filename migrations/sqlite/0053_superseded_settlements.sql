-- A reversed settlement frees its reference (issue 36, found 4): other
-- valid money may pay it again (a sibling intent's timely payment, a
-- payment from the balance, support's accept or reassign, a new intent).
-- The reversed row moves here when that happens, so `settlements` keeps
-- one row per reference, the one that stands or last stood, and the
-- history of what was credited and taken back is never lost.
CREATE TABLE IF NOT EXISTS settlements_superseded (
    kind          TEXT    NOT NULL,
    reference     TEXT    NOT NULL,
    intent_id     INTEGER,
    account       TEXT    NOT NULL,
    usd_cents     INTEGER NOT NULL,
    settled_at    INTEGER NOT NULL,
    via           TEXT    NOT NULL,
    decision_id   INTEGER,
    debit_key     TEXT,
    credits       INTEGER NOT NULL,
    reversed_at   INTEGER NOT NULL,
    tolerance_bp  INTEGER,
    tolerance_max TEXT,
    rate_usd      TEXT,
    superseded_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS settlements_superseded_by_reference
    ON settlements_superseded (kind, reference);
CREATE INDEX IF NOT EXISTS settlements_superseded_by_intent
    ON settlements_superseded (intent_id) WHERE intent_id IS NOT NULL;

-- Support's actions on a case: who, when, what, why. Append-only; the
-- caller's idempotency key makes a replayed action a no-op.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         BIGINT NOT NULL,
    role       TEXT   NOT NULL,
    actor      TEXT   NOT NULL,
    action     TEXT   NOT NULL CHECK (action IN ('accept', 'refund_required', 'refund_sent', 'reassign', 'dismiss')),
    intent_id  BIGINT NOT NULL REFERENCES intents (id),
    note       TEXT   NOT NULL,
    detail     TEXT,
    action_key TEXT   NOT NULL UNIQUE
);
CREATE INDEX audit_by_intent ON audit_log (intent_id, id);

CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;

-- A refund support owes a payer: the destination when required, the
-- refund's transaction id once sent.
CREATE TABLE refunds (
    intent_id    BIGINT PRIMARY KEY REFERENCES intents (id),
    destination  TEXT   NOT NULL,
    required_at  BIGINT NOT NULL,
    txid         TEXT,
    sent_at      BIGINT
);

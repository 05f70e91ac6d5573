-- Support's actions on a case: who, when, what, why. Append-only; the
-- caller's idempotency key makes a replayed action a no-op.
CREATE TABLE audit_log (
    id         BIGSERIAL PRIMARY KEY,
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

CREATE FUNCTION paywatch_audit_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END;
$$;
CREATE TRIGGER audit_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION paywatch_audit_is_append_only();

-- A refund support owes a payer: the destination when required, the
-- refund's transaction id once sent.
CREATE TABLE refunds (
    intent_id    BIGINT PRIMARY KEY REFERENCES intents (id),
    destination  TEXT   NOT NULL,
    required_at  BIGINT NOT NULL,
    txid         TEXT,
    sent_at      BIGINT
);

-- Webhook delivery of the outbox: one row per outbox row, holding only the
-- delivery's own state.
--
-- A table of its own rather than columns on `outbox`: the outbox stays as
-- reconcile writes it (its `delivered_at` is left to consumers reading the
-- database), every retry rewrites only this small row, and webhook state can
-- be inspected or reset without touching the events themselves.
--
-- Rows are enrolled by a trigger, in the transaction that writes the outbox
-- row, so no outbox row can be missed whatever order transactions commit in.
-- Outbox rows written before this migration predate webhooks and are not
-- enrolled; POST /v1/webhooks/deliveries/{id}/redeliver sends any of them.
CREATE TABLE webhook_deliveries (
    outbox_id       INTEGER PRIMARY KEY REFERENCES outbox (id),
    -- Copied from the outbox so "the oldest open row of its intent" needs
    -- no join: an intent's rows are sent one at a time, in order.
    intent_id       BIGINT,
    -- Sends begun, ever (a crash mid-send counts: the row was sent).
    attempts        BIGINT NOT NULL DEFAULT 0,
    -- Failures since the last success or redelivery: the backoff exponent.
    failures        BIGINT NOT NULL DEFAULT 0,
    -- When the row may be sent; while a send is in flight, the end of its
    -- lease, after which this instance, restarted, resends it.
    next_attempt_at BIGINT NOT NULL,
    last_attempt_at BIGINT,
    -- The last answer's HTTP status; NULL when none came (timeout, refused).
    last_status     BIGINT,
    last_error      TEXT,
    delivered_at    BIGINT
);
-- Partial: delivered rows, nearly all of them, add nothing to either index.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, outbox_id)
    WHERE delivered_at IS NULL;
CREATE INDEX webhook_deliveries_open_by_intent ON webhook_deliveries (intent_id, outbox_id)
    WHERE delivered_at IS NULL;

CREATE TRIGGER outbox_enrol_webhook AFTER INSERT ON outbox
BEGIN
    INSERT INTO webhook_deliveries (outbox_id, intent_id, next_attempt_at)
    VALUES (NEW.id, NEW.intent_id, NEW.created_at);
END;

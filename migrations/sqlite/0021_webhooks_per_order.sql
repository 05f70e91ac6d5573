-- Webhooks in order per order or top-up, not only per intent (issue 20,
-- found 9): two tabs give one order two intents, and the events of one
-- could overtake the other's while it was being retried. Each delivery now
-- carries its event's feed cursor and reference; an open delivery waits for
-- every open one of the same order or top-up with a lower cursor.
ALTER TABLE webhook_deliveries ADD COLUMN seq BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN kind TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN reference TEXT;
UPDATE webhook_deliveries
SET seq = (SELECT o.seq FROM outbox o WHERE o.id = webhook_deliveries.outbox_id),
    kind = (SELECT o.kind FROM outbox o WHERE o.id = webhook_deliveries.outbox_id),
    reference = (SELECT o.reference FROM outbox o WHERE o.id = webhook_deliveries.outbox_id)
WHERE delivered_at IS NULL;
CREATE INDEX webhook_deliveries_open_by_reference ON webhook_deliveries (kind, reference, seq)
    WHERE delivered_at IS NULL;

DROP TRIGGER outbox_enrol_webhook;
CREATE TRIGGER outbox_enrol_webhook AFTER INSERT ON outbox
BEGIN
    INSERT INTO webhook_deliveries (outbox_id, intent_id, seq, kind, reference, next_attempt_at)
    VALUES (NEW.id, NEW.intent_id, NEW.seq, NEW.kind, NEW.reference, NEW.created_at);
END;

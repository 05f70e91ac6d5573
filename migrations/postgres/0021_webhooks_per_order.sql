-- Webhooks in order per order or top-up, not only per intent (issue 20,
-- found 9): two tabs give one order two intents, and the events of one
-- could overtake the other's while it was being retried. Each delivery now
-- carries its event's feed cursor and reference; an open delivery waits for
-- every open one of the same order or top-up with a lower cursor (commit
-- order, which outbox ids are not).
ALTER TABLE webhook_deliveries ADD COLUMN seq BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN kind TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN reference TEXT;
-- Open rows only: delivered ones order nothing, and a redelivery fills its
-- row in again.
UPDATE webhook_deliveries d SET seq = o.seq, kind = o.kind, reference = o.reference
FROM outbox o WHERE o.id = d.outbox_id AND d.delivered_at IS NULL;
CREATE INDEX webhook_deliveries_open_by_reference ON webhook_deliveries (kind, reference, seq)
    WHERE delivered_at IS NULL;

CREATE OR REPLACE FUNCTION paywatch_outbox_enrol_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (outbox_id, intent_id, seq, kind, reference, next_attempt_at)
    VALUES (NEW.id, NEW.intent_id, NEW.seq, NEW.kind, NEW.reference, NEW.created_at);
    RETURN NULL;
END;
$$;

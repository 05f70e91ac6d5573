-- Webhooks deliver only events made after an endpoint was configured
-- (issue 21, found 6): see the PostgreSQL migration of the same number.
CREATE TABLE webhook_endpoint (
    one           INTEGER PRIMARY KEY CHECK (one = 1),
    since_seq     BIGINT NOT NULL,
    configured_at BIGINT NOT NULL
);
INSERT INTO webhook_endpoint (one, since_seq, configured_at)
SELECT 1, 0, 0
WHERE EXISTS (SELECT 1 FROM webhook_deliveries WHERE attempts > 0 OR delivered_at IS NOT NULL);
-- One that never has holds only rows enrolled with no URL set: nobody will
-- send them, and they would keep their events from retention for ever.
DELETE FROM webhook_deliveries
WHERE NOT EXISTS (SELECT 1 FROM webhook_endpoint) AND attempts = 0 AND delivered_at IS NULL;

DROP TRIGGER outbox_enrol_webhook;
CREATE TRIGGER outbox_enrol_webhook AFTER INSERT ON outbox
WHEN EXISTS (SELECT 1 FROM webhook_endpoint)
BEGIN
    INSERT INTO webhook_deliveries (outbox_id, intent_id, seq, kind, reference, next_attempt_at)
    VALUES (NEW.id, NEW.intent_id, NEW.seq, NEW.kind, NEW.reference, NEW.created_at);
END;

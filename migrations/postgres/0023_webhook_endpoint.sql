-- Webhooks deliver only events made after an endpoint was configured
-- (issue 21, found 6). Every outbox row used to be enrolled for delivery
-- even while `webhooks.url` was empty, so turning webhooks on later sent a
-- receiver the whole history, and retention could prune nothing (an
-- undelivered row keeps its event).
--
-- `webhook_endpoint` holds one row once any instance has run with a URL
-- (`Store::register_webhook_endpoint`, at the sender's start): the feed
-- cursor at that moment, taken under the feed's lock, and when. Rows are
-- enrolled only while it exists.
CREATE TABLE webhook_endpoint (
    one           SMALLINT PRIMARY KEY CHECK (one = 1),
    since_seq     BIGINT NOT NULL,
    configured_at BIGINT NOT NULL
);
-- An installation that has delivered before had an endpoint all along.
INSERT INTO webhook_endpoint (one, since_seq, configured_at)
SELECT 1, 0, 0
WHERE EXISTS (SELECT 1 FROM webhook_deliveries WHERE attempts > 0 OR delivered_at IS NOT NULL);
-- One that never has holds only rows enrolled with no URL set: nobody will
-- send them, and they would keep their events from retention for ever.
DELETE FROM webhook_deliveries
WHERE NOT EXISTS (SELECT 1 FROM webhook_endpoint) AND attempts = 0 AND delivered_at IS NULL;

CREATE OR REPLACE FUNCTION paywatch_outbox_enrol_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM webhook_endpoint) THEN
        INSERT INTO webhook_deliveries (outbox_id, intent_id, seq, kind, reference, next_attempt_at)
        VALUES (NEW.id, NEW.intent_id, NEW.seq, NEW.kind, NEW.reference, NEW.created_at);
    END IF;
    RETURN NULL;
END;
$$;

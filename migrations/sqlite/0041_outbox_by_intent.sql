-- An intent's live status stream reads its events from the feed, after a
-- cursor (a reconnect's Last-Event-ID).
CREATE INDEX IF NOT EXISTS outbox_by_intent ON outbox (intent_id, seq) WHERE seq IS NOT NULL;

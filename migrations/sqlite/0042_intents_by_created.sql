-- The console's overview counts the intents made today and this week: by
-- time, never the years before.
CREATE INDEX IF NOT EXISTS intents_by_created ON intents (created_at);

-- A view token finds its one intent.
CREATE UNIQUE INDEX IF NOT EXISTS intents_by_view_token ON intents (view_token) WHERE view_token IS NOT NULL;

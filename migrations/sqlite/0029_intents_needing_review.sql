-- The review queue, oldest first: only the intents waiting for a person.
CREATE INDEX IF NOT EXISTS intents_needing_review ON intents (updated_at, id) WHERE status = 'needs_review';

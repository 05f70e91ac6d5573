-- Support's search by a reference alone, without its kind.
CREATE INDEX IF NOT EXISTS intents_by_reference_alone ON intents (reference);

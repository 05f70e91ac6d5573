-- paywatch: no-transaction
-- Support's search by a reference alone, without its kind; the (kind,
-- reference) index cannot serve it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS intents_by_reference_alone ON intents (reference);

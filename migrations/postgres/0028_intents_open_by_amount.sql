-- paywatch: no-transaction
-- The review queue's candidates for a transfer: open intents of the same
-- network and asset, due exactly its amount.
CREATE INDEX CONCURRENTLY IF NOT EXISTS intents_open_by_amount ON intents (network, asset, amount_due) WHERE status IN ('awaiting_payment', 'expired', 'needs_review');

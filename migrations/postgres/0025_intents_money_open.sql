-- paywatch: no-transaction
-- Intents whose money is not yet final, read on every rise of a network's
-- final height to queue them for reconcile (issue 21, found 5): the
-- predicate is the query's own, so only open money is indexed, not years
-- of settled intents.
CREATE INDEX CONCURRENTLY IF NOT EXISTS intents_money_open ON intents (network) WHERE status = 'confirming' OR amount_pending <> 0;

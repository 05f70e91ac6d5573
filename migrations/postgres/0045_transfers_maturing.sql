-- paywatch: no-transaction
-- Finality rising stamps and queues the coinbase rows that just matured:
-- few, and found without reading the rest.
CREATE INDEX CONCURRENTLY IF NOT EXISTS transfers_maturing ON transfers (network, matures_at) WHERE matures_at IS NOT NULL;

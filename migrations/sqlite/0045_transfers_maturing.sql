-- Finality rising stamps and queues the coinbase rows that just matured:
-- few, and found without reading the rest.
CREATE INDEX IF NOT EXISTS transfers_maturing ON transfers (network, matures_at) WHERE matures_at IS NOT NULL;

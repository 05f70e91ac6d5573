-- paywatch: no-transaction
-- Support's search by a pasted address alone, on any network; the unique
-- (network, address) index cannot serve it without the network.
CREATE INDEX CONCURRENTLY IF NOT EXISTS intents_by_address ON intents (address);

-- paywatch: no-transaction
-- A watcher taking a network over loads only the live addresses.
CREATE INDEX CONCURRENTLY IF NOT EXISTS addresses_live ON addresses (network, issued_at) WHERE issued_at IS NOT NULL AND dormant_at IS NULL;

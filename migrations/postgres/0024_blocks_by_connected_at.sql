-- paywatch: no-transaction
-- The blocks connected since an address was issued, read whenever the
-- watcher learns of an address another instance issued (issue 21, found
-- 5). From this migration on, an index on a table in use is built
-- CONCURRENTLY, alone, outside a transaction: the daemon's writers and the
-- storefront's readers go on while it builds (README, "Upgrades").
CREATE INDEX CONCURRENTLY IF NOT EXISTS blocks_by_connected_at ON blocks (network, connected_at) WHERE orphaned_at IS NULL;

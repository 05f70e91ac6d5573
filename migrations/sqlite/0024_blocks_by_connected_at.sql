-- The blocks connected since an address was issued, read whenever the
-- watcher learns of an address another instance issued.
CREATE INDEX IF NOT EXISTS blocks_by_connected_at ON blocks (network, connected_at) WHERE orphaned_at IS NULL;

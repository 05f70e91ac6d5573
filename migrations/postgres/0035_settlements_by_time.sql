-- paywatch: no-transaction
-- The accounting export pages settlements by time (issue 19): a page reads
-- its own rows, never the year before them.
CREATE INDEX CONCURRENTLY IF NOT EXISTS settlements_by_time ON settlements (settled_at, kind, reference);

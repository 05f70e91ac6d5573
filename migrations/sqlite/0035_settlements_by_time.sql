-- The accounting export pages settlements by time.
CREATE INDEX IF NOT EXISTS settlements_by_time ON settlements (settled_at, kind, reference);

SET LOCAL lock_timeout = '5s';
-- A bounded watch set (issue 21, found 2). An address whose intent ended
-- and that saw no money for a while leaves the watch set of a source that
-- can look addresses up (Electrum): `dormant_at` says since when, and
-- `dormant_height` the last block read while it was watched, which the
-- sweep's look-ups start after. `woke_at`: when a sweep found money there
-- and put it back. Nullable columns without a default change only the catalog.
ALTER TABLE addresses ADD COLUMN dormant_at BIGINT;
ALTER TABLE addresses ADD COLUMN dormant_height BIGINT;
ALTER TABLE addresses ADD COLUMN woke_at BIGINT;

-- A bounded watch set: addresses whose intents ended and that saw no money
-- for a while leave the watch set of a source that can look addresses up
-- (Electrum), and a sweep looks them up after `dormant_height`.
ALTER TABLE addresses ADD COLUMN dormant_at INTEGER;
ALTER TABLE addresses ADD COLUMN dormant_height INTEGER;
ALTER TABLE addresses ADD COLUMN woke_at INTEGER;

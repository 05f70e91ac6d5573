-- Block pruning: below this height only blocks that hold a transfer, and the
-- block after each, remain.
ALTER TABLE chain_state ADD COLUMN pruned_below INTEGER;

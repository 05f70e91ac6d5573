SET LOCAL lock_timeout = '5s';
-- Block pruning (issue 21, found 5). Blocks below the reorg window and
-- older than `blocks.retention_days` are deleted, except those that hold a
-- transfer and the block after each (its time may prove a payment made in
-- time). Below this height only those remain: a rescan from under it is
-- refused.
ALTER TABLE chain_state ADD COLUMN pruned_below BIGINT;

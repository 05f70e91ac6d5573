-- When a network's final height rises, the intents paid in the blocks that
-- just became final are queued for reconcile: found by height, not by the
-- intent's status, which a concurrent reconcile may not have committed yet.
CREATE INDEX transfers_by_height ON transfers (network, block_height);

-- The watcher's and reconcile's question: which refunds, open or
-- refunded, go to this address on this network (a reorg past finality can
-- take a refunded one's transaction out). `unchecked` refunds are never
-- judged, so never asked for.
CREATE INDEX IF NOT EXISTS refunds_watched ON refunds (network, destination) WHERE state IN ('required', 'sent_unconfirmed', 'mismatch', 'refunded');

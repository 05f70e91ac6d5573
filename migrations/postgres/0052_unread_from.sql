SET LOCAL lock_timeout = '5s';
-- Where a restart must read the chain again from (issue 37): the lowest
-- block a source handed out without every transfer in it (an Ethereum
-- block the node could not trace) and still reads again. The source keeps
-- that wait in memory; this keeps it through a crash, so a restart queues
-- a rescan from here rather than forgetting ETH sent by contracts.
ALTER TABLE chain_state ADD COLUMN IF NOT EXISTS unread_from BIGINT;

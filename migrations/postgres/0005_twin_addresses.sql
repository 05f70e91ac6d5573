-- Ethereum and Tron addresses are two spellings of one key hash. Each
-- Ethereum or Tron intent keeps its address's spelling on the other network,
-- so money sent there by mistake (wrong_network) shows among the intent's
-- transfers, never counting toward it.
ALTER TABLE intents ADD COLUMN twin_address TEXT;
CREATE INDEX intents_by_twin ON intents (twin_address) WHERE twin_address IS NOT NULL;

CREATE OR REPLACE VIEW paywatch_intent_transfers AS
SELECT i.id AS intent_id, t.id AS transfer_id, t.network, t.asset, t.txid, t.idx AS transfer_index,
       t.to_address, t.from_address, t.amount,
       CASE WHEN t.asset = i.asset AND t.network = i.network AND t.tx_status = 'success'
            THEN 1 ELSE 0 END AS counts_toward_intent,
       t.tx_status,
       CASE WHEN t.block_hash = 'mempool' THEN NULL ELSE t.block_hash END AS block_hash,
       CASE WHEN t.block_hash = 'mempool' THEN NULL ELSE t.block_height END AS block_height,
       CASE WHEN t.block_hash = 'mempool' THEN NULL ELSE t.block_time END AS block_time,
       t.first_seen_at, t.orphaned_at,
       CASE WHEN t.orphaned_at IS NULL AND t.block_hash <> 'mempool' AND c.tip_height >= t.block_height
            THEN c.tip_height - t.block_height + 1 ELSE 0 END AS confirmations,
       CASE WHEN t.orphaned_at IS NULL AND t.block_hash <> 'mempool' AND c.final_height >= t.block_height
            THEN 1 ELSE 0 END AS is_final,
       CASE WHEN t.block_hash = 'mempool' THEN 1 ELSE 0 END AS in_mempool
FROM intents i
JOIN transfers t ON t.network = i.network AND t.to_address = i.address
LEFT JOIN chain_state c ON c.network = t.network
UNION ALL
SELECT i.id AS intent_id, t.id AS transfer_id, t.network, t.asset, t.txid, t.idx AS transfer_index,
       t.to_address, t.from_address, t.amount,
       CASE WHEN t.asset = i.asset AND t.network = i.network AND t.tx_status = 'success'
            THEN 1 ELSE 0 END AS counts_toward_intent,
       t.tx_status,
       CASE WHEN t.block_hash = 'mempool' THEN NULL ELSE t.block_hash END AS block_hash,
       CASE WHEN t.block_hash = 'mempool' THEN NULL ELSE t.block_height END AS block_height,
       CASE WHEN t.block_hash = 'mempool' THEN NULL ELSE t.block_time END AS block_time,
       t.first_seen_at, t.orphaned_at,
       CASE WHEN t.orphaned_at IS NULL AND t.block_hash <> 'mempool' AND c.tip_height >= t.block_height
            THEN c.tip_height - t.block_height + 1 ELSE 0 END AS confirmations,
       CASE WHEN t.orphaned_at IS NULL AND t.block_hash <> 'mempool' AND c.final_height >= t.block_height
            THEN 1 ELSE 0 END AS is_final,
       CASE WHEN t.block_hash = 'mempool' THEN 1 ELSE 0 END AS in_mempool
FROM intents i
JOIN transfers t ON t.network = CASE i.network WHEN 'ethereum' THEN 'tron' WHEN 'tron' THEN 'ethereum' END
                AND t.to_address = i.twin_address
LEFT JOIN chain_state c ON c.network = t.network;

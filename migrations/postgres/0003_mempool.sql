-- Payments waiting in a node's mempool (Bitcoin, Litecoin) are transfers in
-- the pseudo block 'mempool'. The storefront sees them with no block (NULL
-- block_hash, block_height and block_time), zero confirmations and
-- in_mempool = 1; the columns of paywatch_intent_transfers only grow.
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
LEFT JOIN chain_state c ON c.network = t.network;

-- Each mempool snapshot compares against the live mempool rows only.
CREATE INDEX transfers_in_mempool ON transfers (network, txid, idx)
    WHERE block_hash = 'mempool' AND orphaned_at IS NULL;

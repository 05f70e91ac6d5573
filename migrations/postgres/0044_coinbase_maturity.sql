SET LOCAL lock_timeout = '5s';
-- A coinbase output cannot be spent for 100 blocks and an orphaned one
-- never comes back (issue 37): it counts final only once the final height
-- reaches `matures_at`, not its block's height. NULL for every other row.
ALTER TABLE transfers ADD COLUMN matures_at BIGINT;

-- The storefront's view of a payment says it is final, and how many
-- confirmations it needs, by the same rule.
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
       CASE WHEN t.orphaned_at IS NULL AND t.block_hash <> 'mempool' AND c.final_height >= COALESCE(t.matures_at, t.block_height)
            THEN 1 ELSE 0 END AS is_final,
       CASE WHEN t.block_hash = 'mempool' THEN 1 ELSE 0 END AS in_mempool,
       CASE WHEN t.orphaned_at IS NULL AND c.tip_height >= c.final_height
            THEN c.tip_height - c.final_height + 1 + COALESCE(t.matures_at - t.block_height, 0)
            END AS confirmations_required,
       t.first_seen_at AS first_seen_at_ms, t.orphaned_at AS orphaned_at_ms
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
       CASE WHEN t.orphaned_at IS NULL AND t.block_hash <> 'mempool' AND c.final_height >= COALESCE(t.matures_at, t.block_height)
            THEN 1 ELSE 0 END AS is_final,
       CASE WHEN t.block_hash = 'mempool' THEN 1 ELSE 0 END AS in_mempool,
       CASE WHEN t.orphaned_at IS NULL AND c.tip_height >= c.final_height
            THEN c.tip_height - c.final_height + 1 + COALESCE(t.matures_at - t.block_height, 0)
            END AS confirmations_required,
       t.first_seen_at AS first_seen_at_ms, t.orphaned_at AS orphaned_at_ms
FROM intents i
JOIN transfers t ON t.network = CASE i.network WHEN 'ethereum' THEN 'tron' WHEN 'tron' THEN 'ethereum' END
                AND t.to_address = i.twin_address
LEFT JOIN chain_state c ON c.network = t.network;

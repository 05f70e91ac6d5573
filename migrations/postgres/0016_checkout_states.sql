-- States a checkout page can show (issue 20, found 2).
--
-- `reason_code`: a stable, customer-safe code for why an intent stands
-- where it does (`reason` is a sentence for support). NULL only for an
-- intent whose verdict has not been written since codes exist; it is
-- written the next time the intent is looked at.
--
-- A reversed intent never reads as paid: `paid_at` is NULL while
-- `reversed_at` is set (the settlement keeps when it was first paid).
--
-- Refunds support required or sent, beside the intent they return.
--
-- `confirmations_required`: the confirmations at which a transfer on that
-- network counts as final right now (tip - final height + 1): a page shows
-- "2 of 6". Under node finality (Ethereum, Solana, Tron) it follows the
-- node, so it may move by a block or two.
ALTER TABLE intents ADD COLUMN reason_code TEXT;

-- Columns only grow: appended at the end.
CREATE OR REPLACE VIEW paywatch_intents AS
SELECT i.id AS intent_id, i.kind, i.reference, i.account, i.asset, i.network, i.address,
       i.decimals, i.amount_due, i.usd_cents, i.rate_usd, i.rate_source, i.rate_at,
       i.status, i.exception, i.reason,
       i.amount_final AS amount_received_final,
       i.amount_pending AS amount_received_pending,
       i.amount_excess,
       i.created_at, i.expires_at,
       CASE WHEN i.reversed_at IS NULL THEN i.paid_at END AS paid_at, i.reversed_at, i.declared_paid_at, i.updated_at,
       i.outcome,
       COALESCE(i.amount_short, i.amount_due) AS amount_outstanding,
       CASE WHEN COALESCE(i.amount_short, i.amount_due) = 0 THEN 1 ELSE 0 END AS received_in_full,
       COALESCE(i.reason_code,
                CASE WHEN i.status = 'awaiting_payment' THEN 'awaiting_payment' END) AS reason_code,
       CASE WHEN r.intent_id IS NULL THEN NULL
            WHEN r.sent_at IS NULL THEN 'required' ELSE 'sent' END AS refund_status,
       r.destination AS refund_destination, r.txid AS refund_txid,
       r.required_at AS refund_required_at, r.sent_at AS refund_sent_at
FROM intents i
LEFT JOIN refunds r ON r.intent_id = i.id;

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
       CASE WHEN t.block_hash = 'mempool' THEN 1 ELSE 0 END AS in_mempool,
       CASE WHEN t.orphaned_at IS NULL AND c.tip_height >= c.final_height
            THEN c.tip_height - c.final_height + 1 END AS confirmations_required
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
       CASE WHEN t.block_hash = 'mempool' THEN 1 ELSE 0 END AS in_mempool,
       CASE WHEN t.orphaned_at IS NULL AND c.tip_height >= c.final_height
            THEN c.tip_height - c.final_height + 1 END AS confirmations_required
FROM intents i
JOIN transfers t ON t.network = CASE i.network WHEN 'ethereum' THEN 'tron' WHEN 'tron' THEN 'ethereum' END
                AND t.to_address = i.twin_address
LEFT JOIN chain_state c ON c.network = t.network;

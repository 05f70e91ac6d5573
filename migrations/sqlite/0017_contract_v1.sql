-- The storefront's contract, version 1 (issue 20, found 5): every view
-- and column is specified in contract/storefront.json (type, nullability,
-- meaning, example), checked by tests/storefront_contract.rs, and written as
-- database comments at each migrate (PostgreSQL). Within a version columns
-- only grow; a column is never renamed or removed.
--
-- Names aligned with the API: each view now also offers the API's name
-- where the two differed (`amount_final`, `created_at_ms`, ...). The older
-- names stay, with the same values, for integrations written before.

-- The contract's version, for a storefront to check at start.
CREATE VIEW paywatch_contract AS
SELECT CAST(1 AS BIGINT) AS version;

DROP VIEW IF EXISTS paywatch_intents;
CREATE VIEW paywatch_intents AS
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
       CASE WHEN COALESCE(i.amount_short, i.amount_due) = '0' THEN 1 ELSE 0 END AS received_in_full,
       COALESCE(i.reason_code,
                CASE WHEN i.status = 'awaiting_payment' THEN 'awaiting_payment' END) AS reason_code,
       CASE WHEN r.intent_id IS NULL THEN NULL
            WHEN r.sent_at IS NULL THEN 'required' ELSE 'sent' END AS refund_status,
       r.destination AS refund_destination, r.txid AS refund_txid,
       r.required_at AS refund_required_at, r.sent_at AS refund_sent_at,
       i.amount_final AS amount_final, i.amount_pending AS amount_pending,
       i.created_at AS created_at_ms, i.expires_at AS expires_at_ms,
       CASE WHEN i.reversed_at IS NULL THEN i.paid_at END AS paid_at_ms,
       i.reversed_at AS reversed_at_ms, i.declared_paid_at AS declared_paid_at_ms,
       i.updated_at AS updated_at_ms
FROM intents i
LEFT JOIN refunds r ON r.intent_id = i.id;

DROP VIEW IF EXISTS paywatch_payment_status;
CREATE VIEW paywatch_payment_status AS
WITH per_reference AS (
    SELECT kind, reference, MAX(id) AS latest_id, COUNT(*) AS intent_count,
           SUM(CASE WHEN status = 'needs_review' THEN 1 ELSE 0 END) AS needs_review_count
    FROM intents
    GROUP BY kind, reference
)
SELECT r.kind, r.reference, COALESCE(s.account, li.account) AS account,
       CASE WHEN s.kind IS NULL THEN li.status
            WHEN s.reversed_at IS NOT NULL THEN 'reversed'
            ELSE 'paid' END AS payment_status,
       s.intent_id AS paid_intent_id, s.settled_at AS paid_at, s.usd_cents AS paid_usd_cents,
       r.latest_id AS latest_intent_id, li.status AS latest_status, li.exception AS latest_exception,
       CAST(r.intent_count AS BIGINT) AS intent_count,
       CAST(r.needs_review_count AS BIGINT) AS needs_review_count,
       s.via AS paid_via,
       CASE WHEN s.reversed_at IS NULL THEN s.settled_at END AS paid_at_ms
FROM per_reference r
JOIN intents li ON li.id = r.latest_id
LEFT JOIN settlements s ON s.kind = r.kind AND s.reference = r.reference
UNION ALL
SELECT s.kind, s.reference, s.account, 'paid', s.intent_id, s.settled_at, s.usd_cents,
       NULL, NULL, NULL, 0, 0, s.via,
       CASE WHEN s.reversed_at IS NULL THEN s.settled_at END
FROM settlements s
WHERE s.intent_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.kind = s.kind AND i.reference = s.reference);

DROP VIEW IF EXISTS paywatch_intent_transfers;
CREATE VIEW paywatch_intent_transfers AS
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
            THEN c.tip_height - c.final_height + 1 END AS confirmations_required,
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
       CASE WHEN t.orphaned_at IS NULL AND t.block_hash <> 'mempool' AND c.final_height >= t.block_height
            THEN 1 ELSE 0 END AS is_final,
       CASE WHEN t.block_hash = 'mempool' THEN 1 ELSE 0 END AS in_mempool,
       CASE WHEN t.orphaned_at IS NULL AND c.tip_height >= c.final_height
            THEN c.tip_height - c.final_height + 1 END AS confirmations_required,
       t.first_seen_at AS first_seen_at_ms, t.orphaned_at AS orphaned_at_ms
FROM intents i
JOIN transfers t ON t.network = CASE i.network WHEN 'ethereum' THEN 'tron' WHEN 'tron' THEN 'ethereum' END
                AND t.to_address = i.twin_address
LEFT JOIN chain_state c ON c.network = t.network;

DROP VIEW IF EXISTS paywatch_balances;
CREATE VIEW paywatch_balances AS
SELECT account,
       CAST(SUM(usd_cents) AS BIGINT) AS available_usd_cents,
       CAST(COUNT(*) AS BIGINT) AS entries,
       MAX(created_at) AS last_entry_at,
       MAX(created_at) AS last_entry_at_ms
FROM ledger_entries
GROUP BY account;

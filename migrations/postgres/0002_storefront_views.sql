-- The storefront's read contract. These views are documented in README.md;
-- the tables behind them may change, the views' columns only grow.

-- One row per intent.
CREATE VIEW paywatch_intents AS
SELECT i.id AS intent_id, i.kind, i.reference, i.account, i.asset, i.network, i.address,
       i.decimals, i.amount_due, i.usd_cents, i.rate_usd, i.rate_source, i.rate_at,
       i.status, i.exception, i.reason,
       i.amount_final AS amount_received_final,
       i.amount_pending AS amount_received_pending,
       i.amount_excess,
       i.created_at, i.expires_at, i.paid_at, i.reversed_at, i.declared_paid_at, i.updated_at
FROM intents i;

-- One row per order or top-up reference: is it paid?
CREATE VIEW paywatch_payment_status AS
WITH per_reference AS (
    SELECT kind, reference, MAX(id) AS latest_id, COUNT(*) AS intent_count,
           SUM(CASE WHEN status = 'needs_review' THEN 1 ELSE 0 END) AS needs_review_count
    FROM intents
    GROUP BY kind, reference
)
SELECT r.kind, r.reference, li.account,
       CASE WHEN s.intent_id IS NULL THEN li.status
            WHEN si.reversed_at IS NOT NULL THEN 'reversed'
            ELSE 'paid' END AS payment_status,
       s.intent_id AS paid_intent_id, s.settled_at AS paid_at, s.usd_cents AS paid_usd_cents,
       r.latest_id AS latest_intent_id, li.status AS latest_status, li.exception AS latest_exception,
       CAST(r.intent_count AS BIGINT) AS intent_count,
       CAST(r.needs_review_count AS BIGINT) AS needs_review_count
FROM per_reference r
JOIN intents li ON li.id = r.latest_id
LEFT JOIN settlements s ON s.kind = r.kind AND s.reference = r.reference
LEFT JOIN intents si ON si.id = s.intent_id;

-- Every transfer seen at an intent's address, with its standing on chain.
CREATE VIEW paywatch_intent_transfers AS
SELECT i.id AS intent_id, t.id AS transfer_id, t.network, t.asset, t.txid, t.idx AS transfer_index,
       t.to_address, t.from_address, t.amount,
       CASE WHEN t.asset = i.asset AND t.network = i.network AND t.tx_status = 'success'
            THEN 1 ELSE 0 END AS counts_toward_intent,
       t.tx_status, t.block_hash, t.block_height, t.block_time, t.first_seen_at, t.orphaned_at,
       CASE WHEN t.orphaned_at IS NULL AND c.tip_height >= t.block_height
            THEN c.tip_height - t.block_height + 1 ELSE 0 END AS confirmations,
       CASE WHEN t.orphaned_at IS NULL AND c.final_height >= t.block_height
            THEN 1 ELSE 0 END AS is_final
FROM intents i
JOIN transfers t ON t.network = i.network AND t.to_address = i.address
LEFT JOIN chain_state c ON c.network = t.network;

-- Available USD balance per account: posted ledger entries only, so a
-- top-up still confirming does not count.
CREATE VIEW paywatch_balances AS
SELECT account,
       CAST(SUM(usd_cents) AS BIGINT) AS available_usd_cents,
       CAST(COUNT(*) AS BIGINT) AS entries,
       MAX(created_at) AS last_entry_at
FROM ledger_entries
GROUP BY account;

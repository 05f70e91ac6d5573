-- Amounts a storefront never compares itself (issue 20, found 6): on SQLite
-- amounts are decimal text, and `amount_received_final >= amount_due` is
-- true for '99999999' against '100000000'. paywatch works the difference
-- out exactly (in Rust, as integers) and stores it beside the amounts.
--
-- The final money still missing, never below zero. NULL until the intent's
-- figures are first written: nothing is final yet, so all of `amount_due`.
ALTER TABLE intents ADD COLUMN amount_short NUMERIC(78,0);
UPDATE intents SET amount_short = GREATEST(amount_due - amount_final, 0)
WHERE amount_final <> 0;

-- Columns only grow: appended at the end. `received_in_full` is 1 or 0, as
-- `counts_toward_intent` and `is_final` are.
CREATE OR REPLACE VIEW paywatch_intents AS
SELECT i.id AS intent_id, i.kind, i.reference, i.account, i.asset, i.network, i.address,
       i.decimals, i.amount_due, i.usd_cents, i.rate_usd, i.rate_source, i.rate_at,
       i.status, i.exception, i.reason,
       i.amount_final AS amount_received_final,
       i.amount_pending AS amount_received_pending,
       i.amount_excess,
       i.created_at, i.expires_at, i.paid_at, i.reversed_at, i.declared_paid_at, i.updated_at,
       i.outcome,
       COALESCE(i.amount_short, i.amount_due) AS amount_outstanding,
       CASE WHEN COALESCE(i.amount_short, i.amount_due) = 0 THEN 1 ELSE 0 END AS received_in_full
FROM intents i;

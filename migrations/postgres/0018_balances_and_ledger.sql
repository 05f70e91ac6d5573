-- Balances a storefront can show (issue 20, found 7): what is pending
-- beside what is available, and the ledger behind them.
--
-- `pending_usd_cents`: top-ups whose whole price is seen and not final yet
-- (a top-up with only part of its price seen counts nothing); they become
-- available once final. Only accounts with ledger entries have a
-- row here; the API answers for any account (zero when it has nothing).
CREATE OR REPLACE VIEW paywatch_balances AS
SELECT account,
       CAST(SUM(usd_cents) AS BIGINT) AS available_usd_cents,
       CAST(COUNT(*) AS BIGINT) AS entries,
       MAX(created_at) AS last_entry_at,
       MAX(created_at) AS last_entry_at_ms,
       (SELECT CAST(COALESCE(SUM(i.usd_cents), 0) AS BIGINT) FROM intents i
        WHERE i.account = ledger_entries.account AND i.kind = 'topup'
          AND i.status = 'confirming'
          AND COALESCE(i.reason_code, '') <> 'partly_unconfirmed') AS pending_usd_cents
FROM ledger_entries
GROUP BY account;

-- Every ledger entry, oldest first by `entry_id`: credits of final top-ups,
-- debits with the order they paid, reversals of credits a reorg took back.
-- Append-only, so a reader may page by `entry_id`.
CREATE VIEW paywatch_ledger AS
SELECT l.id AS entry_id, l.account, l.usd_cents, l.entry_kind, l.entry_key, l.intent_id,
       COALESCE(i.kind, s.kind) AS kind, COALESCE(i.reference, s.reference) AS reference,
       l.created_at AS created_at_ms
FROM ledger_entries l
LEFT JOIN intents i ON i.id = l.intent_id
LEFT JOIN settlements s ON l.entry_kind = 'debit' AND s.debit_key = l.entry_key;
CREATE INDEX ledger_by_account_entry ON ledger_entries (account, id);
CREATE INDEX settlements_by_debit_key ON settlements (debit_key) WHERE debit_key IS NOT NULL;

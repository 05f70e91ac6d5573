-- paywatch: no-transaction
-- A credit back sums what its debit already returned.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ledger_by_returns_entry ON ledger_entries (returns_entry) WHERE returns_entry IS NOT NULL;

-- A credit back to the balance names the debit it returns (issue 36): its
-- credits together never exceed that debit.
ALTER TABLE ledger_entries ADD COLUMN returns_entry TEXT;

-- Reconcile reads an intent's excess entries (credited, taken back) in each
-- pass that looks at an accepted overpayment: by intent, never the whole ledger.
CREATE INDEX IF NOT EXISTS ledger_by_intent ON ledger_entries (intent_id) WHERE intent_id IS NOT NULL;

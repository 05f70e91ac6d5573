-- The storefront's idempotency key for creating an intent: a retried create
-- finds the intent made the first time instead of taking a second address.
ALTER TABLE intents ADD COLUMN create_key TEXT;
CREATE UNIQUE INDEX intents_by_create_key ON intents (create_key);

-- One row per account that has ever been debited, locked for the length of a
-- debit so two concurrent debits cannot both spend the same balance.
CREATE TABLE account_locks (
    account TEXT PRIMARY KEY
);

SET LOCAL lock_timeout = '5s';
-- Live status for checkout pages (issue 19): each intent gets an
-- unguessable view token at creation, which lets a customer's browser read
-- that intent's status and payment instructions, and nothing else, without
-- a storefront token. Kept as issued, not hashed: a retried create under
-- the same Idempotency-Key answers with the same token, and whoever reads
-- this table already reads the intents it guards. Intents made before have
-- none (NULL), and gain none.
ALTER TABLE intents ADD COLUMN view_token TEXT;

-- Intents whose money is not yet final, read on every rise of a network's
-- final height to queue them for reconcile.
CREATE INDEX IF NOT EXISTS intents_money_open ON intents (network) WHERE status = 'confirming' OR amount_pending <> '0';

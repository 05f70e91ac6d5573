-- Operators list the tokens that are no method's asset (address-poisoning
-- spam, look-alike dust), newest first, without reading every transfer.
CREATE INDEX IF NOT EXISTS transfers_spam ON transfers (id) WHERE asset LIKE 'token:%';

-- Support's search by a pasted address alone, on any network.
CREATE INDEX IF NOT EXISTS intents_by_address ON intents (address);

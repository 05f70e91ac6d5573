SET LOCAL lock_timeout = '5s';
-- Keys (issue 21, found 7). The derivation counter belongs to one key at a
-- time, named by its fingerprint (a hash of the first addresses it
-- derives); each derived address records the key that derived it. A
-- rotation retires the key with its last index and starts the new key at 0,
-- so a wallet importing it finds its addresses within its gap limit.
ALTER TABLE address_derivation ADD COLUMN key_fingerprint TEXT;
ALTER TABLE addresses ADD COLUMN key_fingerprint TEXT;

CREATE TABLE retired_keys (
    network         TEXT   NOT NULL,
    key_fingerprint TEXT   NOT NULL,
    -- The first index the key never derived.
    next_index      BIGINT NOT NULL,
    retired_at      BIGINT NOT NULL,
    PRIMARY KEY (network, key_fingerprint)
);

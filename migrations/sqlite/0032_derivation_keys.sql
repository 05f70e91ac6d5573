-- Keys. The derivation counter belongs to one key at a time, named by its
-- fingerprint (a hash of the first addresses it derives); each derived
-- address records the key that derived it. A rotation retires the key with
-- its last index and starts the new key at 0.
ALTER TABLE address_derivation ADD COLUMN key_fingerprint TEXT;
ALTER TABLE addresses ADD COLUMN key_fingerprint TEXT;

CREATE TABLE retired_keys (
    network         TEXT    NOT NULL,
    key_fingerprint TEXT    NOT NULL,
    next_index      INTEGER NOT NULL,
    retired_at      INTEGER NOT NULL,
    PRIMARY KEY (network, key_fingerprint)
);

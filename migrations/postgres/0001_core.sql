-- paywatch core schema (PostgreSQL). Times are unix milliseconds (BIGINT) so
-- the storefront reads the same values from PostgreSQL and SQLite.
-- Chain amounts are integers in base units, NUMERIC(78,0) (room for a U256).
-- USD amounts are integer cents.

-- Every address that can be or has been handed out. Rows are never deleted,
-- and issued_at is set exactly once, under a row lock: no address is issued twice.
CREATE TABLE addresses (
    id               BIGSERIAL PRIMARY KEY,
    network          TEXT   NOT NULL,
    address          TEXT   NOT NULL,
    origin           TEXT   NOT NULL CHECK (origin IN ('pool', 'derived')),
    derivation_index BIGINT,
    added_at         BIGINT NOT NULL,
    issued_at        BIGINT,
    intent_id        BIGINT UNIQUE,
    CONSTRAINT addresses_once UNIQUE (network, address)
);
CREATE INDEX addresses_free ON addresses (network, id) WHERE issued_at IS NULL;
CREATE INDEX addresses_issued ON addresses (network, issued_at) WHERE issued_at IS NOT NULL;

-- Next BIP32 child index per network, for address sources that derive.
CREATE TABLE address_derivation (
    network    TEXT PRIMARY KEY,
    next_index BIGINT NOT NULL
);

CREATE TABLE intents (
    id               BIGSERIAL PRIMARY KEY,
    kind             TEXT   NOT NULL CHECK (kind IN ('order', 'topup')),
    reference        TEXT   NOT NULL,
    account          TEXT   NOT NULL,
    asset            TEXT   NOT NULL,
    network          TEXT   NOT NULL,
    address          TEXT   NOT NULL,
    decimals         BIGINT NOT NULL,
    amount_due       NUMERIC(78,0) NOT NULL CHECK (amount_due > 0),
    usd_cents        BIGINT NOT NULL CHECK (usd_cents > 0),
    rate_usd         TEXT   NOT NULL,
    rate_source      TEXT   NOT NULL,
    rate_at          BIGINT NOT NULL,
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    status           TEXT   NOT NULL CHECK (status IN ('awaiting_payment', 'confirming', 'paid', 'expired', 'needs_review', 'resolved')),
    exception        TEXT   CHECK (exception IN ('underpaid', 'overpaid', 'paid_late', 'wrong_asset', 'wrong_network', 'duplicate', 'reversed')),
    reason           TEXT,
    amount_final     NUMERIC(78,0) NOT NULL DEFAULT 0,
    amount_pending   NUMERIC(78,0) NOT NULL DEFAULT 0,
    amount_excess    NUMERIC(78,0) NOT NULL DEFAULT 0,
    paid_at          BIGINT,
    -- The highest transfer row id reconcile had seen at the address when it
    -- settled: money recorded later is a second payment, whatever its clock says.
    settled_through  BIGINT,
    reversed_at      BIGINT,
    declared_paid_at BIGINT,
    updated_at       BIGINT NOT NULL,
    CONSTRAINT intents_one_per_address UNIQUE (network, address)
);
CREATE INDEX intents_by_reference ON intents (kind, reference);
CREATE INDEX intents_by_account ON intents (account);
-- Partial: an intent leaving awaiting_payment adds no entry here.
CREATE INDEX intents_expiring ON intents (expires_at) WHERE status = 'awaiting_payment';

-- Addresses whose intents reconcile must look at again: written by ingest in
-- the same transaction as the transfers, consumed by reconcile in the same
-- transaction as its verdict. An insert-only queue keeps ingest from
-- rewriting intent rows (and their indexes) on every transfer.
CREATE TABLE reconcile_queue (
    id      BIGSERIAL PRIMARY KEY,
    network TEXT NOT NULL,
    address TEXT NOT NULL
);

-- What happened to an intent, in order: creation, status changes, declarations.
CREATE TABLE intent_events (
    id        BIGSERIAL PRIMARY KEY,
    intent_id BIGINT NOT NULL REFERENCES intents (id),
    at        BIGINT NOT NULL,
    kind      TEXT   NOT NULL,
    status    TEXT,
    exception TEXT,
    detail    TEXT
);
CREATE INDEX intent_events_by_intent ON intent_events (intent_id, id);

-- A customer's "I have paid". Recorded, never taken as proof.
CREATE TABLE payment_declarations (
    id          BIGSERIAL PRIMARY KEY,
    intent_id   BIGINT NOT NULL REFERENCES intents (id),
    declared_at BIGINT NOT NULL,
    note        TEXT
);

-- An order marked paid or a top-up credited: at most once per reference.
CREATE TABLE settlements (
    kind       TEXT   NOT NULL,
    reference  TEXT   NOT NULL,
    intent_id  BIGINT NOT NULL UNIQUE REFERENCES intents (id),
    account    TEXT   NOT NULL,
    usd_cents  BIGINT NOT NULL,
    settled_at BIGINT NOT NULL,
    PRIMARY KEY (kind, reference)
);

-- The USD balance ledger. Append-only: a reversal is a new entry.
CREATE TABLE ledger_entries (
    id         BIGSERIAL PRIMARY KEY,
    account    TEXT   NOT NULL,
    usd_cents  BIGINT NOT NULL,
    entry_kind TEXT   NOT NULL CHECK (entry_kind IN ('topup_credit', 'reversal', 'debit', 'adjustment')),
    entry_key  TEXT   NOT NULL UNIQUE,
    intent_id  BIGINT REFERENCES intents (id),
    created_at BIGINT NOT NULL,
    memo       TEXT
);
CREATE INDEX ledger_by_account ON ledger_entries (account);

CREATE FUNCTION paywatch_ledger_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger_entries is append-only: post a new entry instead';
END;
$$;
CREATE TRIGGER ledger_no_update BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION paywatch_ledger_is_append_only();

-- Events for the storefront, written in the same transaction as the change.
CREATE TABLE outbox (
    id           BIGSERIAL PRIMARY KEY,
    topic        TEXT   NOT NULL,
    intent_id    BIGINT,
    payload      TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    delivered_at BIGINT
);

-- One row per network: where the watcher is and how it is doing.
CREATE TABLE chain_state (
    network       TEXT PRIMARY KEY,
    cursor_height BIGINT,
    cursor_hash   TEXT,
    -- The first height this database followed: where to resume when a reorg
    -- has disconnected every block it holds.
    start_height  BIGINT,
    tip_height    BIGINT,
    final_height  BIGINT,
    watcher_state TEXT   NOT NULL DEFAULT 'starting',
    last_error    TEXT,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE blocks (
    network      TEXT   NOT NULL,
    hash         TEXT   NOT NULL,
    height       BIGINT NOT NULL,
    parent       TEXT   NOT NULL,
    block_time   BIGINT NOT NULL,
    connected_at BIGINT NOT NULL,
    orphaned_at  BIGINT,
    PRIMARY KEY (network, hash)
);
CREATE INDEX blocks_active ON blocks (network, height) WHERE orphaned_at IS NULL;

-- Every transfer to an issued address, as the chain showed it. Orphaned rows
-- stay: the history of a reorg is evidence.
CREATE TABLE transfers (
    id            BIGSERIAL PRIMARY KEY,
    network       TEXT   NOT NULL,
    asset         TEXT   NOT NULL,
    txid          TEXT   NOT NULL,
    idx           BIGINT NOT NULL,
    block_hash    TEXT   NOT NULL,
    block_height  BIGINT NOT NULL,
    block_time    BIGINT NOT NULL,
    to_address    TEXT   NOT NULL,
    from_address  TEXT,
    amount        NUMERIC(78,0) NOT NULL CHECK (amount >= 0),
    tx_status     TEXT   NOT NULL CHECK (tx_status IN ('success', 'failed')),
    first_seen_at BIGINT NOT NULL,
    orphaned_at   BIGINT,
    CONSTRAINT transfers_once UNIQUE (network, txid, idx, block_hash)
);
CREATE INDEX transfers_by_address ON transfers (network, to_address);
CREATE INDEX transfers_by_block ON transfers (network, block_hash);
CREATE INDEX transfers_by_txid ON transfers (txid);

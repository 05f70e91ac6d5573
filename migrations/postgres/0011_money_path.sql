-- The money path (issue 16): support's decisions become inputs the status
-- machine reads, an order may be paid from the balance, a reversed credit
-- whose money comes back is credited again, and finality has a time.

-- A settlement is made by the chain (the intent's own money, automatically),
-- by support (an accept, or the target of a reassign: it stands on the
-- payments its decision names) or by the balance (an order paid from the
-- account's USD balance: no intent, a debit instead).
ALTER TABLE settlements ALTER COLUMN intent_id DROP NOT NULL;
ALTER TABLE settlements ADD COLUMN via TEXT NOT NULL DEFAULT 'chain'
    CHECK (via IN ('chain', 'support', 'balance'));
ALTER TABLE settlements ADD COLUMN decision_id BIGINT;
ALTER TABLE settlements ADD COLUMN debit_key TEXT;
-- Credits posted so far: a credit reversed by a reorg whose money comes back
-- is credited again, as a new ledger entry under a new key.
ALTER TABLE settlements ADD COLUMN credits BIGINT NOT NULL DEFAULT 1;
ALTER TABLE settlements ADD COLUMN reversed_at BIGINT;
ALTER TABLE settlements ADD CONSTRAINT settlements_source
    CHECK ((via = 'balance') = (intent_id IS NULL));
UPDATE settlements s SET reversed_at = i.reversed_at FROM intents i WHERE i.id = s.intent_id;
-- Settled by support before decisions were recorded: they name no payments,
-- so nothing on chain can reverse them (see README, "Support's decisions").
UPDATE settlements s SET via = 'support'
WHERE EXISTS (SELECT 1 FROM audit_log a WHERE a.action IN ('accept', 'reassign')
              AND (a.intent_id = s.intent_id
                   OR a.detail = 'to intent ' || CAST(s.intent_id AS TEXT)));

-- What support decided on a case: read by the status machine like any other
-- input. Append-only, one row per action, beside its audit entry.
CREATE TABLE decisions (
    id          BIGSERIAL PRIMARY KEY,
    intent_id   BIGINT NOT NULL REFERENCES intents (id),
    action      TEXT   NOT NULL
        CHECK (action IN ('accept', 'refund_required', 'refund_sent', 'reassign', 'dismiss')),
    to_intent   BIGINT REFERENCES intents (id),
    audit_id    BIGINT NOT NULL REFERENCES audit_log (id),
    at          BIGINT NOT NULL,
    -- The highest transfer row id at the intent's address (or its twin)
    -- when decided: money recorded later is new, and goes to review.
    through     BIGINT,
    -- The intent's own method's money the decision stood on, base units.
    amount      NUMERIC(78,0) NOT NULL DEFAULT 0
);
CREATE INDEX decisions_by_intent ON decisions (intent_id, id);
CREATE INDEX decisions_by_target ON decisions (to_intent) WHERE to_intent IS NOT NULL;

-- The payments a decision stood on, by their chain identity (a payment
-- re-mined in another block is the same payment). A payment is claimed by
-- at most one decision that moves money (accept, reassign, refund), so it
-- settles or is refunded once.
CREATE TABLE decision_payments (
    decision_id BIGINT NOT NULL REFERENCES decisions (id),
    network     TEXT   NOT NULL,
    txid        TEXT   NOT NULL,
    idx         BIGINT NOT NULL,
    asset       TEXT   NOT NULL,
    amount      NUMERIC(78,0) NOT NULL,
    claims      SMALLINT NOT NULL CHECK (claims IN (0, 1)),
    PRIMARY KEY (decision_id, network, txid, idx)
);
CREATE UNIQUE INDEX decision_payments_claimed_once ON decision_payments (network, txid, idx)
    WHERE claims = 1;

-- How support closed an intent, for the storefront: paid_by_support,
-- dismissed, refund_required, refunded, reassigned.
ALTER TABLE intents ADD COLUMN outcome TEXT
    CHECK (outcome IN ('paid_by_support', 'dismissed', 'refund_required', 'refunded', 'reassigned'));
-- Money seen in time must be final by then to settle without a person:
-- the expiry plus the network's confirm window, fixed when the intent is
-- made (NULL before: the configured window applies).
ALTER TABLE intents ADD COLUMN confirm_by BIGINT;

-- When a transfer's block first counted as final (the database's clock):
-- money seen in time but final only after the intent's confirm-by deadline
-- goes to review instead of settling.
ALTER TABLE transfers ADD COLUMN final_at BIGINT;
UPDATE transfers t SET final_at = t.first_seen_at
FROM chain_state c
WHERE c.network = t.network AND t.orphaned_at IS NULL AND t.block_hash <> 'mempool'
  AND t.block_height <= c.final_height;

-- Ethereum token transfers were keyed by the block-wide log index, which
-- changes when a transaction is mined again in another block. They are now
-- keyed by the log's position among its transaction's Transfer logs. Rows
-- recorded before move out of the new key's range (2^32 and up), so a rescan
-- over their blocks recognises them instead of recording them twice.
UPDATE transfers SET idx = idx + 4294967296
WHERE network = 'ethereum' AND asset <> 'ETH' AND idx < 2147483648;

CREATE OR REPLACE VIEW paywatch_intents AS
SELECT i.id AS intent_id, i.kind, i.reference, i.account, i.asset, i.network, i.address,
       i.decimals, i.amount_due, i.usd_cents, i.rate_usd, i.rate_source, i.rate_at,
       i.status, i.exception, i.reason,
       i.amount_final AS amount_received_final,
       i.amount_pending AS amount_received_pending,
       i.amount_excess,
       i.created_at, i.expires_at, i.paid_at, i.reversed_at, i.declared_paid_at, i.updated_at,
       i.outcome
FROM intents i;

-- An order paid from the balance has a row here even with no intent.
CREATE OR REPLACE VIEW paywatch_payment_status AS
WITH per_reference AS (
    SELECT kind, reference, MAX(id) AS latest_id, COUNT(*) AS intent_count,
           SUM(CASE WHEN status = 'needs_review' THEN 1 ELSE 0 END) AS needs_review_count
    FROM intents
    GROUP BY kind, reference
)
SELECT r.kind, r.reference, COALESCE(s.account, li.account) AS account,
       CASE WHEN s.kind IS NULL THEN li.status
            WHEN s.reversed_at IS NOT NULL THEN 'reversed'
            ELSE 'paid' END AS payment_status,
       s.intent_id AS paid_intent_id, s.settled_at AS paid_at, s.usd_cents AS paid_usd_cents,
       r.latest_id AS latest_intent_id, li.status AS latest_status, li.exception AS latest_exception,
       CAST(r.intent_count AS BIGINT) AS intent_count,
       CAST(r.needs_review_count AS BIGINT) AS needs_review_count,
       s.via AS paid_via
FROM per_reference r
JOIN intents li ON li.id = r.latest_id
LEFT JOIN settlements s ON s.kind = r.kind AND s.reference = r.reference
UNION ALL
SELECT s.kind, s.reference, s.account, 'paid', s.intent_id, s.settled_at, s.usd_cents,
       CAST(NULL AS BIGINT), CAST(NULL AS TEXT), CAST(NULL AS TEXT),
       CAST(0 AS BIGINT), CAST(0 AS BIGINT), s.via
FROM settlements s
WHERE s.intent_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.kind = s.kind AND i.reference = s.reference);

-- The money path (issue 16): see the PostgreSQL migration of the same
-- number for why. SQLite cannot drop a NOT NULL, so settlements is rebuilt.

DROP VIEW IF EXISTS paywatch_payment_status;
DROP VIEW IF EXISTS paywatch_intents;

CREATE TABLE settlements_rebuilt (
    kind        TEXT   NOT NULL,
    reference   TEXT   NOT NULL,
    intent_id   BIGINT UNIQUE REFERENCES intents (id),
    account     TEXT   NOT NULL,
    usd_cents   BIGINT NOT NULL,
    settled_at  BIGINT NOT NULL,
    via         TEXT   NOT NULL DEFAULT 'chain' CHECK (via IN ('chain', 'support', 'balance')),
    decision_id BIGINT,
    debit_key   TEXT,
    credits     BIGINT NOT NULL DEFAULT 1,
    reversed_at BIGINT,
    PRIMARY KEY (kind, reference),
    CONSTRAINT settlements_source CHECK ((via = 'balance') = (intent_id IS NULL))
);
INSERT INTO settlements_rebuilt (kind, reference, intent_id, account, usd_cents, settled_at, via, reversed_at)
SELECT s.kind, s.reference, s.intent_id, s.account, s.usd_cents, s.settled_at,
       CASE WHEN EXISTS (SELECT 1 FROM audit_log a WHERE a.action IN ('accept', 'reassign')
                         AND (a.intent_id = s.intent_id
                              OR a.detail = 'to intent ' || CAST(s.intent_id AS TEXT)))
            THEN 'support' ELSE 'chain' END,
       (SELECT i.reversed_at FROM intents i WHERE i.id = s.intent_id)
FROM settlements s;
DROP TABLE settlements;
ALTER TABLE settlements_rebuilt RENAME TO settlements;

CREATE TABLE decisions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    intent_id   BIGINT NOT NULL REFERENCES intents (id),
    action      TEXT   NOT NULL
        CHECK (action IN ('accept', 'refund_required', 'refund_sent', 'reassign', 'dismiss')),
    to_intent   BIGINT REFERENCES intents (id),
    audit_id    BIGINT NOT NULL REFERENCES audit_log (id),
    at          BIGINT NOT NULL,
    through     BIGINT,
    amount      TEXT   NOT NULL DEFAULT '0'
);
CREATE INDEX decisions_by_intent ON decisions (intent_id, id);
CREATE INDEX decisions_by_target ON decisions (to_intent) WHERE to_intent IS NOT NULL;

CREATE TABLE decision_payments (
    decision_id BIGINT NOT NULL REFERENCES decisions (id),
    network     TEXT   NOT NULL,
    txid        TEXT   NOT NULL,
    idx         BIGINT NOT NULL,
    asset       TEXT   NOT NULL,
    amount      TEXT   NOT NULL CHECK (amount NOT GLOB '*[^0-9]*'),
    claims      BIGINT NOT NULL CHECK (claims IN (0, 1)),
    PRIMARY KEY (decision_id, network, txid, idx)
);
CREATE UNIQUE INDEX decision_payments_claimed_once ON decision_payments (network, txid, idx)
    WHERE claims = 1;

ALTER TABLE intents ADD COLUMN outcome TEXT
    CHECK (outcome IN ('paid_by_support', 'dismissed', 'refund_required', 'refunded', 'reassigned'));
ALTER TABLE intents ADD COLUMN confirm_by BIGINT;

ALTER TABLE transfers ADD COLUMN final_at BIGINT;
UPDATE transfers SET final_at = first_seen_at
WHERE orphaned_at IS NULL AND block_hash <> 'mempool'
  AND block_height <= (SELECT c.final_height FROM chain_state c WHERE c.network = transfers.network);

UPDATE transfers SET idx = idx + 4294967296
WHERE network = 'ethereum' AND asset <> 'ETH' AND idx < 2147483648;

CREATE VIEW paywatch_intents AS
SELECT i.id AS intent_id, i.kind, i.reference, i.account, i.asset, i.network, i.address,
       i.decimals, i.amount_due, i.usd_cents, i.rate_usd, i.rate_source, i.rate_at,
       i.status, i.exception, i.reason,
       i.amount_final AS amount_received_final,
       i.amount_pending AS amount_received_pending,
       i.amount_excess,
       i.created_at, i.expires_at, i.paid_at, i.reversed_at, i.declared_paid_at, i.updated_at,
       i.outcome
FROM intents i;

CREATE VIEW paywatch_payment_status AS
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
       NULL, NULL, NULL, 0, 0, s.via
FROM settlements s
WHERE s.intent_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.kind = s.kind AND i.reference = s.reference);

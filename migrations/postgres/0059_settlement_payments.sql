SET LOCAL lock_timeout = '5s';
-- What each intent's settlement stands on (issue 36): the payments, by
-- their chain identity (a payment re-mined in another block is the same
-- payment). Kept current by the one writer while the settlement stands:
-- written when it settles or is credited again, rewritten when the money
-- it stands on changes, left as it was when a reorg reverses it, so a
-- reversed settlement still names what it stood on. Settlements made
-- before this table are named by the first pass that reads them.
CREATE TABLE IF NOT EXISTS settlement_payments (
    intent_id BIGINT NOT NULL,
    network   TEXT   NOT NULL,
    txid      TEXT   NOT NULL,
    idx       BIGINT NOT NULL,
    asset     TEXT   NOT NULL,
    amount    NUMERIC(78,0) NOT NULL,
    PRIMARY KEY (intent_id, network, txid, idx)
);

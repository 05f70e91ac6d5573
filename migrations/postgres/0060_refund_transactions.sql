SET LOCAL lock_timeout = '5s';
-- A refund may go out in several transactions (issue 36): money owed in
-- two assets (USDC sent to a USDT intent beside ETH, say) cannot leave in
-- one Ethereum transaction, and a refund sent short is made up by a
-- second. Each transaction support records is kept here, and the refund is
-- judged on all of them together; `refunds.txid` keeps the latest, as the
-- storefront and the previous release read it. A transaction stands for
-- one refund only.
CREATE TABLE IF NOT EXISTS refund_transactions (
    intent_id BIGINT NOT NULL REFERENCES refunds (intent_id),
    network   TEXT   NOT NULL,
    txid      TEXT   NOT NULL,
    sent_at   BIGINT NOT NULL,
    PRIMARY KEY (network, txid)
);
CREATE INDEX IF NOT EXISTS refund_transactions_by_intent ON refund_transactions (intent_id);
-- The transactions recorded before, on the network each refund goes out
-- on (for a row the previous release wrote without one, where the money
-- came); a transaction recorded on two refunds keeps the first.
INSERT INTO refund_transactions (intent_id, network, txid, sent_at)
SELECT r.intent_id,
       COALESCE(r.network,
                CASE WHEN i.exception = 'wrong_network' AND i.network = 'ethereum' THEN 'tron'
                     WHEN i.exception = 'wrong_network' AND i.network = 'tron' THEN 'ethereum'
                     ELSE i.network END),
       r.txid, COALESCE(r.sent_at, r.required_at)
FROM refunds r JOIN intents i ON i.id = r.intent_id
WHERE r.txid IS NOT NULL
ON CONFLICT DO NOTHING;

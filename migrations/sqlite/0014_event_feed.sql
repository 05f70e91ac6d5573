-- The storefront's event feed (issue 20): the outbox, read in commit order.
--
-- SQLite has one writer, which takes its lock at BEGIN, so rows commit in
-- the order they are numbered; `seq` is kept here too so both databases
-- offer the same feed. It is drawn as the highest seq plus one, under that
-- lock.
ALTER TABLE outbox ADD COLUMN seq BIGINT;
ALTER TABLE outbox ADD COLUMN kind TEXT;
ALTER TABLE outbox ADD COLUMN reference TEXT;
-- Bodies written before gain the fields every event now carries (fields
-- only grow); a debit that paid no order said kind "order", reference "":
-- it names none.
UPDATE outbox SET seq = id,
                  kind = CASE WHEN COALESCE(json_extract(payload, '$.reference'), '') = '' THEN NULL
                              ELSE json_extract(payload, '$.kind') END,
                  reference = NULLIF(json_extract(payload, '$.reference'), ''),
                  payload = json_set(payload, '$.cursor', id, '$.created_at_ms', created_at);
CREATE UNIQUE INDEX outbox_by_seq ON outbox (seq);
CREATE INDEX outbox_by_reference ON outbox (kind, reference, seq);

CREATE VIEW paywatch_events AS
SELECT o.seq AS cursor, o.topic, o.kind, o.reference, o.intent_id,
       o.payload, o.created_at AS created_at_ms
FROM outbox o
WHERE o.seq IS NOT NULL;

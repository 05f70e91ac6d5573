-- The storefront's event feed (issue 20): the outbox, read in commit order.
--
-- Outbox ids come from a sequence when a row is inserted, so of two
-- transactions the one with the lower id may commit later: a reader that
-- resumed after the higher id would skip the lower one for ever. Each row
-- now also gets `seq`, its place in the feed, drawn under a transaction
-- advisory lock held until commit: a transaction that writes events waits
-- for the one before it to commit, so seq order is commit order and a
-- reader's cursor never passes an event still to commit. Gaps (a rolled back
-- transaction's draws) may appear; order never breaks.
ALTER TABLE outbox ADD COLUMN seq BIGINT;
-- The order or top-up an event is about, for readers that follow one.
ALTER TABLE outbox ADD COLUMN kind TEXT;
ALTER TABLE outbox ADD COLUMN reference TEXT;
-- Rows written before are all committed: any order of them is a safe one.
-- Their bodies gain the fields every event now carries (fields only grow);
-- a debit that paid no order said kind "order", reference "": it names none.
UPDATE outbox SET seq = id,
                  kind = CASE WHEN COALESCE(CAST(payload AS jsonb) ->> 'reference', '') = '' THEN NULL
                              ELSE CAST(payload AS jsonb) ->> 'kind' END,
                  reference = NULLIF(CAST(payload AS jsonb) ->> 'reference', ''),
                  payload = CAST(CAST(payload AS jsonb)
                                 || jsonb_build_object('cursor', id, 'created_at_ms', created_at)
                            AS TEXT);
CREATE SEQUENCE outbox_seq;
SELECT setval('outbox_seq', COALESCE(MAX(id), 0) + 1, false) FROM outbox;
CREATE UNIQUE INDEX outbox_by_seq ON outbox (seq);
CREATE INDEX outbox_by_reference ON outbox (kind, reference, seq);

-- The feed as the storefront reads it: `cursor` increases in commit order;
-- resume with `WHERE cursor > last_seen ORDER BY cursor`.
CREATE VIEW paywatch_events AS
SELECT o.seq AS cursor, o.topic, o.kind, o.reference, o.intent_id,
       o.payload, o.created_at AS created_at_ms
FROM outbox o
WHERE o.seq IS NOT NULL;

-- An instance of the release before, still running during an upgrade,
-- inserts outbox rows without a cursor: they are numbered here, under the
-- same lock (its key is `FEED_LOCK` in src/store/settlements.rs), so no
-- event is ever missing from the feed.
CREATE FUNCTION paywatch_outbox_number() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.seq IS NULL THEN
        PERFORM pg_advisory_xact_lock(8097887158714852708);
        NEW.seq := nextval('outbox_seq');
        NEW.reference := NULLIF(CAST(NEW.payload AS jsonb) ->> 'reference', '');
        NEW.kind := CASE WHEN NEW.reference IS NULL THEN NULL
                         ELSE CAST(NEW.payload AS jsonb) ->> 'kind' END;
        NEW.payload := CAST(CAST(NEW.payload AS jsonb)
                            || jsonb_build_object('cursor', NEW.seq, 'created_at_ms', NEW.created_at)
                       AS TEXT);
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER outbox_number BEFORE INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION paywatch_outbox_number();

-- A reference belongs to one account (issue 20, found 3), claimed by a row
-- here in the transaction that first uses it: an intent's creation or a
-- debit that pays the order. The primary key decides a race whatever the
-- transactions' snapshots: of two claims for one reference, the second
-- waits for the first and then sees its account (or, in a reconcile-style
-- snapshot transaction, fails and runs again), so an order can never be
-- paid from one account's balance while another account's intent for it
-- is being made.
CREATE TABLE reference_owners (
    kind      TEXT NOT NULL,
    reference TEXT NOT NULL,
    account   TEXT NOT NULL,
    PRIMARY KEY (kind, reference)
);
-- References used before: the first account that used each.
INSERT INTO reference_owners (kind, reference, account)
SELECT kind, reference, MIN(account) FROM (
    SELECT kind, reference, account FROM intents
    UNION ALL
    SELECT kind, reference, account FROM settlements
) AS used
GROUP BY kind, reference;

-- The feed's retention (issue 20): events older than `events.retention_days`
-- are pruned. The highest cursor pruned is kept here, so a reader asking
-- from below it is told it missed events rather than silently skipping.
CREATE TABLE feed_horizon (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_through BIGINT NOT NULL
);
INSERT INTO feed_horizon (id, pruned_through) VALUES (1, 0);

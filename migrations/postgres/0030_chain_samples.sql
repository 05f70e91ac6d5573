SET LOCAL lock_timeout = '5s';
-- A network's tip, cursor and final height once a minute, written by its
-- watcher, for the console's lag charts (issue 19). A day is kept: the
-- watcher prunes older samples as it writes.
CREATE TABLE chain_samples (
    network       TEXT   NOT NULL,
    at            BIGINT NOT NULL,
    tip_height    BIGINT,
    cursor_height BIGINT,
    final_height  BIGINT,
    PRIMARY KEY (network, at)
);

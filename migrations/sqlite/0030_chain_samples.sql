-- A network's tip, cursor and final height once a minute, written by its
-- watcher, for the console's lag charts. A day is kept: the watcher prunes
-- older samples as it writes.
CREATE TABLE chain_samples (
    network       TEXT    NOT NULL,
    at            INTEGER NOT NULL,
    tip_height    INTEGER,
    cursor_height INTEGER,
    final_height  INTEGER,
    PRIMARY KEY (network, at)
);

-- A settlement's dust floor (issue 36): same-asset money under it that
-- arrives after the settlement is recorded and listed, but opens no case.
-- Part of the terms a settlement is judged by for as long as it stands, as
-- its tolerance is (0043): a floor set later changes only settlements made
-- later. NULL: no floor, every later payment is news. Base units, TEXT as
-- every amount on SQLite.
ALTER TABLE settlements ADD COLUMN dust_floor TEXT;
ALTER TABLE settlements_superseded ADD COLUMN dust_floor TEXT;
-- The dust the reconciler set aside, by transfer, with the intent whose
-- settlement's floor it fell under: what operators list beside spam
-- tokens, without reading every transfer.
CREATE TABLE IF NOT EXISTS dust_transfers (
    transfer_id INTEGER PRIMARY KEY,
    intent_id   INTEGER NOT NULL
);

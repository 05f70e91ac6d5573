SET LOCAL lock_timeout = '5s';
-- A settlement's dust floor (issue 36): same-asset money under it that
-- arrives after the settlement is recorded and listed, but opens no case.
-- Part of the terms a settlement is judged by for as long as it stands, as
-- its tolerance is (0043): a floor set later changes only settlements made
-- later. NULL: no floor, every later payment is news. Base units, NUMERIC as
-- every amount.
ALTER TABLE settlements ADD COLUMN IF NOT EXISTS dust_floor NUMERIC(78,0);
ALTER TABLE settlements_superseded ADD COLUMN IF NOT EXISTS dust_floor NUMERIC(78,0);
-- The dust the reconciler set aside, by transfer, with the intent whose
-- settlement's floor it fell under: what operators list beside spam
-- tokens, without reading every transfer.
CREATE TABLE IF NOT EXISTS dust_transfers (
    transfer_id BIGINT PRIMARY KEY,
    intent_id   BIGINT NOT NULL
);

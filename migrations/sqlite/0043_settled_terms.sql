-- A settlement is judged by the terms it was made under (issue 36): the
-- tolerance in force when it settled, and the rate its intent locked. A
-- setting changed later changes only what has not settled. NULL on
-- settlements made before: those are judged by the tolerance in force.
ALTER TABLE settlements ADD COLUMN tolerance_bp INTEGER;
ALTER TABLE settlements ADD COLUMN tolerance_max TEXT;
ALTER TABLE settlements ADD COLUMN rate_usd TEXT;

-- Internal ETH is keyed by its place among the value-moving call frames
-- (issue 37, found 10), no longer among all frames, precompile calls
-- included, which clients list differently. Rows keyed the old way move
-- to 2^32 and up, where ingest's legacy rule already recognises a row met
-- again under its new key in the same block (as 0011 did for token logs):
-- a rescan never records a stored internal payment a second time. Claims
-- on those payments move with them. Top-level ETH (2^31 exactly) stays.
UPDATE transfers SET idx = idx + 4294967296
WHERE network = 'ethereum' AND asset = 'ETH' AND idx > 2147483648 AND idx < 4294967296;
UPDATE decision_payments SET idx = idx + 4294967296
WHERE network = 'ethereum' AND asset = 'ETH' AND idx > 2147483648 AND idx < 4294967296;

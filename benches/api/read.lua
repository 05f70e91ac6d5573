-- GET /v1/intents/{id} over ids 1..MAX_ID, as a storefront polling status.
-- With PACE_MS set, each connection waits that long between requests, so
-- CONNS connections offer at most CONNS * 1000 / PACE_MS requests/s: a
-- fixed load rather than the most the machine serves.
local max_id = tonumber(os.getenv("MAX_ID") or "1000")
local pace_ms = tonumber(os.getenv("PACE_MS") or "0")
local n = 0
request = function()
  n = n + 1
  local id = (n * 7919) % max_id + 1
  return wrk.format("GET", "/v1/intents/" .. id, {
    ["Authorization"] = "Bearer " .. os.getenv("PAYWATCH_TOKEN"),
  })
end
if pace_ms > 0 then
  delay = function()
    return pace_ms
  end
end

-- GET /v1/intents/{id} over ids 1..MAX_ID, as a storefront polling status.
local max_id = tonumber(os.getenv("MAX_ID") or "1000")
local n = 0
request = function()
  n = n + 1
  local id = (n * 7919) % max_id + 1
  return wrk.format("GET", "/v1/intents/" .. id, {
    ["Authorization"] = "Bearer " .. os.getenv("PAYWATCH_TOKEN"),
  })
end

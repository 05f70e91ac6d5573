-- POST /v1/intents with a fresh reference per request (one thread's counter
-- and its id keep references unique across threads).
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  thread_id = tid
end

request = function()
  counter = counter + 1
  local body = string.format(
    '{"kind":"order","reference":"load-%d-%d","account":"acct-load","asset":"BTC","network":"bitcoin","usd_amount":"50"}',
    thread_id, counter)
  return wrk.format("POST", "/v1/intents", {
    ["Authorization"] = "Bearer " .. os.getenv("PAYWATCH_TOKEN"),
    ["Content-Type"] = "application/json",
  }, body)
end

-- Cycles through pre-signed webhook bodies (one "signature<TAB>body" per line of BODIES_FILE); each wrk thread
-- starts at its own offset so threads post different bodies at the same moment.
local requests = {}
local counter = 0
local thread_index = 0

function setup(thread)
  thread:set("thread_index", thread_index)
  thread_index = thread_index + 1
end

function init(args)
  local path = os.getenv("BODIES_FILE")
  for line in io.lines(path) do
    local sig, body = line:match("^([^\t]+)\t(.*)$")
    requests[#requests + 1] = wrk.format("POST", "/webhooks/whatsapp",
      {["Content-Type"] = "application/json", ["X-Hub-Signature-256"] = sig}, body)
  end
  counter = (tonumber(thread_index) or 0) * math.floor(#requests / 8)
end

function request()
  counter = counter + 1
  return requests[(counter % #requests) + 1]
end

-- Latency percentiles for bench/webhooks.py's plot, one "PCT <percentile> <microseconds>" line each.
function done(summary, latency, requests)
  for _, p in ipairs({50, 75, 90, 95, 99, 99.9, 99.99}) do
    io.write(string.format("PCT %g %d\n", p, latency:percentile(p)))
  end
end

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

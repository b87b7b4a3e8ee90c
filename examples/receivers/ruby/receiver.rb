# wa-outbox's events in Ruby: verify each delivery with the Standard Webhooks library, print it, answer 204 (401 if forged).
require "json"
require "standardwebhooks"
require "webrick"
webhook = StandardWebhooks::Webhook.new(ENV.fetch("WEBHOOK_SECRET")) # the whsec_… `wa-outbox endpoints add` printed
server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: Integer(ENV.fetch("PORT", "3000")), AccessLog: [])
server.mount_proc("/") do |req, res|
  headers = req.header.transform_values(&:first) # WEBrick gives each header as a list
  event = webhook.verify(req.body.to_s, headers)
  puts [event["type"], event["id"], JSON.generate(event["data"])].join(" ")
  $stdout.flush
  res.status = 204
rescue StandardWebhooks::StandardWebhooksError, JSON::ParserError
  res.status = 401
end
trap("TERM") { server.shutdown }
trap("INT") { server.shutdown }
server.start

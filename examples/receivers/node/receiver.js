// wa-outbox's events in Node: each delivery verified with the Standard Webhooks library, printed, answered 204.
const http = require("node:http");
const { Webhook } = require("standardwebhooks");
const webhook = new Webhook(process.env.WEBHOOK_SECRET); // the whsec_… `wa-outbox endpoints add` printed
http.createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  try {
    const event = webhook.verify(Buffer.concat(chunks).toString("utf8"), req.headers);
    console.log(event.type, event.id, JSON.stringify(event.data));
    res.writeHead(204).end();
  } catch {
    res.writeHead(401).end(); // forged, altered or stale: not from wa-outbox
  }
}).listen(Number(process.env.PORT || 3000), process.env.HOST || "127.0.0.1");

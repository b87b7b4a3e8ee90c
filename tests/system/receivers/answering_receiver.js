// A test-only variant of examples/receivers/node/receiver.js: it verifies each delivery with the Standard Webhooks
// library, prints "try N type id" (N counts this webhook-id's tries), then answers ANSWER (default 204) to the first
// FAIL_FIRST tries of each webhook-id and 204 after. A delivery that does not verify is printed "refused" and gets 401.
const http = require("node:http");
const { Webhook } = require("standardwebhooks");
const webhook = new Webhook(process.env.WEBHOOK_SECRET);
const failFirst = Number(process.env.FAIL_FIRST || 0);
const answer = Number(process.env.ANSWER || 500);
const tries = new Map();
http.createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  let event;
  try {
    event = webhook.verify(Buffer.concat(chunks).toString("utf8"), req.headers);
  } catch {
    console.log("refused", req.headers["webhook-id"] || "-");
    return res.writeHead(401).end();
  }
  const n = (tries.get(event.id) || 0) + 1;
  tries.set(event.id, n);
  console.log("try", n, event.type, event.id, req.headers["webhook-id"]);
  res.writeHead(n <= failFirst ? answer : 204).end();
}).listen(Number(process.env.PORT), "127.0.0.1");

// wa-outbox's events in Node: verify each delivery with the Standard Webhooks library, print it, answer 204 (401 if forged).
const http = require("node:http");
const { Webhook } = require("standardwebhooks");
const webhook = new Webhook(process.env.WEBHOOK_SECRET); // the whsec_… `wa-outbox endpoints add` printed
http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk)).on("end", () => {
    try {
      const event = webhook.verify(Buffer.concat(chunks).toString("utf8"), req.headers);
      console.log(event.type, event.id, JSON.stringify(event.data));
      res.writeHead(204).end();
    } catch (err) {
      res.writeHead(401).end();
    }
  });
}).listen(Number(process.env.PORT || 3000), "127.0.0.1");

// The ceiling for what a connection costs (bench:connections): a bare node:http2 secure server
// with Node's default settings, the controller's certificate, no Connect, no limits, no store.
// It answers any unary call with an empty Connect JSON message, and a WatchWorkOrders call with
// one empty message on a stream it then holds open, as the controller's first notice does.
// Run as its own process; prints {"url": …} on stdout when listening.
import http2 from "node:http2";
import type net from "node:net";
import { ensureTlsMaterial } from "../controller/tls/tls-material.js";

const dataDir = process.argv[2];
if (!dataDir) throw new Error("usage: h2-bare-server <data-dir>");

const material = await ensureTlsMaterial({ dataDir });
const server = http2.createSecureServer({ cert: material.cert, key: material.key }, (req, res) => {
  req.resume();
  req.on("end", () => {
    if (!req.url.endsWith("/WatchWorkOrders")) {
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
      return;
    }
    // One enveloped message (flags 0, length 2, "{}"), then nothing until the client goes.
    res.writeHead(200, { "content-type": "application/connect+json" });
    res.write(Buffer.from([0, 0, 0, 0, 2, 0x7b, 0x7d]));
  });
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`${JSON.stringify({ url: `https://127.0.0.1:${(server.address() as net.AddressInfo).port}` })}\n`);
});
process.on("SIGTERM", () => process.exit(0));

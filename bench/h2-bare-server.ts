// The ceiling for what a connection costs (bench:connections): a bare node:http2 secure server
// with Node's default settings, the controller's certificate, no Connect, no limits, no store.
// It answers any unary call with an empty Connect JSON message, and a WatchWorkOrders call with
// one empty message on a stream it then holds open, as the controller's first notice does; a
// Session call (bench:fleet) with a welcome at once, reading what the client sends and answering
// nothing more. Run as its own process (h2-bare-server <data-dir> [port]: a port of its own, or
// the one it had before a restart); prints {"url": …} on stdout when listening.
import http2 from "node:http2";
import type net from "node:net";
import { ensureTlsMaterial } from "../controller/tls/tls-material.js";

const dataDir = process.argv[2];
if (!dataDir) throw new Error("usage: h2-bare-server <data-dir>");

const material = await ensureTlsMaterial({ dataDir });
const welcome = Buffer.from(JSON.stringify({ welcome: { sessionId: "bare", heartbeatIntervalMs: "10000" } }));
const server = http2.createSecureServer({ cert: material.cert, key: material.key }, (req, res) => {
  req.resume();
  if (req.url.endsWith("/Session")) {
    const head = Buffer.alloc(5);
    head.writeUInt32BE(welcome.length, 1);
    res.writeHead(200, { "content-type": "application/connect+json" });
    res.write(Buffer.concat([head, welcome]));
    return;
  }
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
server.listen(Number(process.argv[3] ?? 0), "127.0.0.1", () => {
  process.stdout.write(`${JSON.stringify({ url: `https://127.0.0.1:${(server.address() as net.AddressInfo).port}` })}\n`);
});
process.on("SIGTERM", () => process.exit(0));

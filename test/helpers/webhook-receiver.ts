// A real HTTPS receiver for webhook tests: 127.0.0.1 on port 0, a certificate from a CA of its
// own (handed to the subscription as ca_pem), every request kept, the answer chosen per request.
import https from "node:https";
import type { AddressInfo } from "node:net";
import { createCa, issueServerCert } from "../../controller/tls/certificate-issuer.js";
import { parseSubjectName } from "../../controller/tls/subject-names.js";

export interface Received {
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The status it was answered with. */
  status: number;
}

export interface Receiver {
  url: string;
  caPem: string;
  received: Received[];
  /** Chooses the status of the n-th request (0-based); a status of 0 leaves the request hanging. */
  answer: (n: number) => number;
  /** The body of the answer to the n-th request (default: a short text by status). */
  reply?: (n: number) => string;
  close(): Promise<void>;
}

/** Starts a receiver answering 200 until told otherwise. */
export async function startReceiver(path = "/hooks/secret-path-token-31415"): Promise<Receiver> {
  const ca = await createCa(new Date(), "webhook test CA");
  const cert = await issueServerCert(ca, [parseSubjectName("127.0.0.1")!], new Date());
  const hanging = new Set<import("node:http").ServerResponse>();
  const receiver: Receiver = {
    url: "",
    caPem: ca.cert,
    received: [],
    answer: () => 200,
    close: () =>
      new Promise((resolve) => {
        for (const res of hanging) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  const server = https.createServer({ cert: cert.cert, key: cert.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const n = receiver.received.length;
      const status = receiver.answer(n);
      receiver.received.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8"), status });
      if (status === 0) {
        hanging.add(res);
        return;
      }
      res.writeHead(status, { "content-type": "text/plain" });
      res.end(receiver.reply?.(n) ?? (status >= 300 ? `receiver says no (${status})` : "ok"));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  receiver.url = `https://127.0.0.1:${(server.address() as AddressInfo).port}${path}`;
  return receiver;
}

// One delivery attempt: a POST over HTTPS with a deadline. The answer's status and the start of
// its body are kept (bounded and redacted) for the delivery's record; nothing else of the
// receiver's is trusted or followed (no redirects).
import https from "node:https";
import { redactText } from "../../common/logging/redact.js";
import { privateUrlProblem, publicOnlyLookup } from "./public-address.js";

/** What an attempt came to: a status (0: no answer) and a short text for the record. */
export interface AttemptOutcome {
  status: number;
  text: string;
}

export interface SendRequest {
  url: URL;
  body: string;
  headers: Record<string, string>;
  /** PEM of the CA that signs the receiver's certificate; public CAs otherwise. */
  caPem?: string;
  timeoutMs: number;
  /** Aborts the attempt (the controller stops): it counts as no answer. */
  signal?: AbortSignal;
  /** May connect to non-public addresses (else such a URL or a host resolving to one is refused unsent). */
  allowPrivateNetwork?: boolean;
}

// What is kept of a response body (and read of it at most).
const KEEP_BYTES = 512;
const READ_BYTES = 64 * 1024;

/** POSTs `body` to `url`; resolves with the outcome, never rejects. */
export function send(req: SendRequest): Promise<AttemptOutcome> {
  if (!req.allowPrivateNetwork) {
    const problem = privateUrlProblem(req.url);
    if (problem) return Promise.resolve({ status: 0, text: `refused unsent: ${problem} (allow_private_network is off)` });
  }
  return new Promise((resolve) => {
    let settled = false;
    const done = (outcome: AttemptOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.signal?.removeEventListener("abort", onAbort);
      resolve({ status: outcome.status, text: redactText(outcome.text).slice(0, KEEP_BYTES) });
    };
    const request = https.request(
      req.url,
      {
        method: "POST",
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(req.body), ...req.headers },
        ...(req.caPem ? { ca: req.caPem } : {}),
        // Every address the host resolves to is checked before connecting.
        ...(req.allowPrivateNetwork ? {} : { lookup: publicOnlyLookup }),
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          if (size < READ_BYTES) chunks.push(c);
          size += c.length;
          if (size >= READ_BYTES) res.destroy();
        });
        const finish = () => done({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8", 0, KEEP_BYTES) });
        res.on("end", finish);
        res.on("close", finish);
        res.on("error", finish);
      },
    );
    const timer = setTimeout(() => {
      request.destroy();
      done({ status: 0, text: `no answer within ${req.timeoutMs} ms` });
    }, req.timeoutMs);
    const onAbort = () => {
      request.destroy();
      done({ status: 0, text: "the controller stopped during the attempt" });
    };
    req.signal?.addEventListener("abort", onAbort, { once: true });
    request.on("error", (e: Error & { code?: string }) => done({ status: 0, text: e.code ? `${e.code}: ${e.message}` : e.message }));
    request.end(req.body);
  });
}

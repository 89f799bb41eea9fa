// One webhook attempt: a POST over HTTPS with a deadline, made by the controller or, for a
// subscription with a node_selector, by an agent of a node it selects (deliver_webhook). The
// answer's status and the start of its body are kept (bounded and redacted); nothing else of the
// receiver's is trusted or followed (no redirects). Non-public destinations are refused unsent
// unless the subscription allows the private network (private-address.ts).
import https from "node:https";
import { redactText } from "./logging/redact.js";
import { privateUrlProblem, publicOnlyLookup } from "./private-address.js";

/** What an attempt came to: a status (0: no answer) and a short text (the answer's start, or why there was none). */
export interface AttemptOutcome {
  status: number;
  text: string;
}

export interface PostRequest {
  url: URL;
  body: string | Uint8Array;
  headers: Record<string, string>;
  /** PEM of the CA that signs the receiver's certificate; public CAs otherwise. */
  caPem?: string;
  timeoutMs: number;
  /** Aborts the attempt (the sender stops): it counts as no answer, saying `stoppedText`. */
  signal?: AbortSignal;
  stoppedText?: string;
  /** May connect to non-public addresses (else such a URL or a host resolving to one is refused unsent). */
  allowPrivateNetwork?: boolean;
  /** How much of the answer's body is kept (default 512 bytes). */
  keepBytes?: number;
}

// What is read of a response body at most.
const READ_BYTES = 64 * 1024;

/** POSTs `body` to `url`; resolves with the outcome, never rejects. */
export function postWebhook(req: PostRequest): Promise<AttemptOutcome> {
  const keep = req.keepBytes ?? 512;
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
      resolve({ status: outcome.status, text: redactText(outcome.text).slice(0, keep) });
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
        const finish = () => done({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8", 0, keep) });
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
      done({ status: 0, text: req.stoppedText ?? "the sender stopped during the attempt" });
    };
    if (req.signal?.aborted) onAbort();
    req.signal?.addEventListener("abort", onAbort, { once: true });
    request.on("error", (e: Error & { code?: string }) => done({ status: 0, text: e.code ? `${e.code}: ${e.message}` : e.message }));
    request.end(req.body);
  });
}

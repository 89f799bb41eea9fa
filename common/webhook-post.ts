// One webhook attempt: a POST over HTTPS with a deadline, made by the controller or, for a
// subscription with a node_selector, by an agent of a node it selects (deliver_webhook). The
// answer's status and the start of its body are kept (bounded and redacted); nothing else of the
// receiver's is trusted or followed (no redirects). Non-public destinations are refused unsent
// unless the subscription allows the private network (private-address.ts). The URL is the
// subscription's secret: what is kept shows its host only (hideUrl), blanked before the cut so no
// piece of it survives at the edge.
import https from "node:https";
import { REDACTED, redactText } from "./logging/redact.js";
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
      const shown = redactText(hideUrl(outcome.text, req.url)).slice(0, keep);
      resolve({ status: outcome.status, text: hideUrlTail(shown, req.url) });
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
        // Read past the cut by the URL's length: a URL quoted across the cut is whole when blanked.
        const read = keep + req.url.href.length;
        const finish = () => done({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8", 0, read) });
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

/** `text` with `url` shown as its host only, and its path and query (more than "/") blanked where they stand alone. */
export function hideUrl(text: string, url: URL): string {
  let out = text.replaceAll(url.href, url.host);
  const path = pathAndQuery(url);
  if (path.length > 1) out = out.replaceAll(path, REDACTED);
  return out;
}

/**
 * `text` (cut already) without a start of `url` at its end that reaches past the host, nor a
 * start of its path and query (2 characters or more): a cut through a quoted URL leaves neither.
 */
export function hideUrlTail(text: string, url: URL): string {
  const origin = `${url.protocol}//${url.host}`;
  const whole = tailOf(text, url.href, origin.length + 1);
  if (whole > 0) return `${text.slice(0, text.length - whole)}${url.host}`;
  const path = tailOf(text, pathAndQuery(url), 2);
  return path > 0 ? `${text.slice(0, text.length - path)}${REDACTED}` : text;
}

// The length of the longest start of `secret` (at least `min` characters) that `text` ends with; 0 if none.
function tailOf(text: string, secret: string, min: number): number {
  for (let n = Math.min(text.length, secret.length); n >= min; n--) if (text.endsWith(secret.slice(0, n))) return n;
  return 0;
}

function pathAndQuery(url: URL): string {
  return `${url.pathname}${url.search}`;
}

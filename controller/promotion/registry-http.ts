// One HTTP exchange with a registry (or its token endpoint) on node:http / node:https: a deadline
// over the whole exchange, a cap on the body read, no redirects followed. Node's own `fetch`
// (undici) would need the `undici` package for an extra CA; node:https takes `ca` directly, as
// the webhook sender does. Failures are RegistryErrors naming the subject, never a header's value.
import http, { type IncomingHttpHeaders } from "node:http";
import https from "node:https";
import { RegistryError, type RegistryErrorSubject } from "./registry-error.js";

/** What came back: status, headers, the body (empty for HEAD). */
export interface RegistryAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface RegistryExchange {
  url: URL;
  method: "GET" | "HEAD";
  headers: Record<string, string>;
  /** The keep-alive agent of the URL's protocol (it holds the CAs for https). */
  agent: http.Agent;
  timeoutMs: number;
  /** A body longer than this fails TOO_LARGE. */
  maxBodyBytes: number;
  subject: RegistryErrorSubject;
  /** Aborts the exchange (the caller stops): rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Sends one request and reads its answer, or fails with a RegistryError. */
export function exchange(x: RegistryExchange): Promise<RegistryAnswer> {
  if (x.signal?.aborted) return Promise.reject(x.signal.reason);
  const send = x.url.protocol === "https:" ? https.request : http.request;
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (error: unknown, answer?: RegistryAnswer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      x.signal?.removeEventListener("abort", onAbort);
      if (error) {
        request.destroy();
        reject(error);
      } else resolve(answer!);
    };
    const fail = (code: RegistryError["code"], detail: string, status?: number, cause?: unknown) =>
      finish(new RegistryError(code, { ...x.subject, ...(status ? { status } : {}) }, detail, { cause }));
    const request = send(x.url, { method: x.method, headers: x.headers, agent: x.agent }, (res) => {
      const status = res.statusCode ?? 0;
      const declared = Number(res.headers["content-length"] ?? "0");
      if (x.method !== "HEAD" && declared > x.maxBodyBytes) {
        fail("TOO_LARGE", `an answer of ${declared} bytes is beyond the limit of ${x.maxBodyBytes} bytes`, status);
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        size += c.length;
        if (size > x.maxBodyBytes) fail("TOO_LARGE", `an answer beyond the limit of ${x.maxBodyBytes} bytes`, status);
        else chunks.push(c);
      });
      res.on("end", () => finish(undefined, { status, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", (e) => fail("UNREACHABLE", `the answer broke off: ${errorText(e)}`, status, e));
      res.on("close", () => {
        if (!res.complete) fail("UNREACHABLE", "the answer broke off", status);
      });
    });
    const timer = setTimeout(() => fail("TIMEOUT", `no answer within ${x.timeoutMs} ms`), x.timeoutMs);
    const onAbort = () => finish(x.signal!.reason);
    x.signal?.addEventListener("abort", onAbort, { once: true });
    request.on("error", (e) => fail("UNREACHABLE", `cannot reach ${x.url.host}: ${errorText(e)}`, undefined, e));
    request.end();
  });
}

// A socket error's code and message: they name hosts and addresses, never headers.
function errorText(e: Error & { code?: string }): string {
  return e.code && !e.message.includes(e.code) ? `${e.code}: ${e.message}` : e.message;
}

// Clients that call the controller with one credential (a bearer token, a client certificate or
// none), and what became of a call or a stream opened with it, always within a bound: the trust
// probes of credentials that end and keys that are confined (credential-lifecycle.ts,
// scope-confinement.ts). A call or stream that does not end in time is "hung", never awaited.
import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { ControllerProcess } from "./controller-process.js";
import { withTimeout } from "./stalled-streams.js";

/** A client certificate and its private key, PEM. */
export interface CertPair {
  certPem: string;
  keyPem: string;
}

/** A client calling with `Authorization: Bearer <token>` (a node token or an API key). */
export function withBearer<S extends DescService>(ctl: ControllerProcess, service: S, token: string): Client<S> {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  return createClient(
    service,
    createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca }, interceptors: [auth] }),
  );
}

/** A client calling by mutual TLS with `cert`. */
export function withCert<S extends DescService>(ctl: ControllerProcess, service: S, cert: CertPair): Client<S> {
  return createClient(
    service,
    createConnectTransport({
      baseUrl: `${ctl.url}/v1`,
      httpVersion: "2",
      nodeOptions: { ca: ctl.ca, cert: cert.certPem, key: cert.keyPem },
    }),
  );
}

/** A client with no credential (enrollment). */
export function anonymous<S extends DescService>(ctl: ControllerProcess, service: S): Client<S> {
  return createClient(service, createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca } }));
}

/** "ok", the error as Skipper names it (UNAUTHORIZED, FORBIDDEN) or Connect does (InvalidArgument...), or "hung". */
export type Outcome = string;

const SKIPPER_NAMES: Partial<Record<Code, string>> = {
  [Code.Unauthenticated]: "UNAUTHORIZED",
  [Code.PermissionDenied]: "FORBIDDEN",
};

/** How an error reads in the probes' logs and checks. */
export function errorName(e: unknown): string {
  const code = ConnectError.from(e).code;
  return SKIPPER_NAMES[code] ?? Code[code] ?? String(code);
}

/** What became of a unary call within `ms` (a call still running then is "hung": not refused). */
export async function outcome(call: Promise<unknown>, ms = 10_000): Promise<Outcome> {
  const ended = call.then(
    () => "ok",
    (e: unknown) => errorName(e),
  );
  return (await withTimeout(ended, ms)) ?? "hung";
}

/** How a stream ended: its error's name, "done" (ended without an error) or "open" (still going at the bound). */
export interface StreamEnd {
  end: Outcome | "done" | "open";
  /** From the call to `ended` to the end (or the bound). */
  afterMs: number;
  /** Messages that carried something (e.g. an order) after `ended` was called. */
  carried: number;
}

/** A server stream read by the probe: its first message, then how (and how soon) it ends. */
export interface Watch<T> {
  /** The first message's outcome: "ok", an error's name, "done" or "hung". */
  first: Outcome;
  /** Reads on until the stream ends or `ms` pass (then aborts it); counts messages where `carries` holds. */
  ended(ms: number, carries: (m: T) => boolean): Promise<StreamEnd>;
}

/** Opens a stream with `open` (given the signal that aborts it) and waits up to `firstMs` for its first message. */
export async function openWatch<T>(open: (signal: AbortSignal) => AsyncIterable<T>, firstMs = 10_000): Promise<Watch<T>> {
  const abort = new AbortController();
  const it = open(abort.signal)[Symbol.asyncIterator]();
  const first = await withTimeout(
    it.next().then(
      (r) => (r.done ? "done" : "ok"),
      (e: unknown) => errorName(e),
    ),
    firstMs,
  );
  if (first === undefined) abort.abort();
  return {
    first: first ?? "hung",
    async ended(ms, carries) {
      const started = performance.now();
      let carried = 0;
      const reading = (async () => {
        for (;;) {
          const r = await it.next();
          if (r.done) return "done";
          if (carries(r.value)) carried++;
        }
      })().catch((e: unknown) => errorName(e));
      const end = await withTimeout(reading, ms);
      const afterMs = performance.now() - started;
      if (end === undefined) {
        abort.abort();
        await reading;
      }
      return { end: end ?? "open", afterMs, carried };
    },
  };
}

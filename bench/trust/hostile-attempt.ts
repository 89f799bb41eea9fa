// One request of the hostile sweep, named the way its log and figures report it, and the
// credentials each is sent with (none, a wrong one, a node's, the admin's: refused and admitted
// paths alike).
import { TRUST_ADMIN_TOKEN } from "./controller-process.js";

export interface Attempt {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer;
  /** "Service.Method" or "REST <verb> <template>" (or "path" for paths outside the table). */
  target: string;
  /** How it is sent: "connect-json", "grpc", "rest", "connect-get", ... */
  protocol: string;
  /** What kind of input: "body", "compressed", "envelope", "path", "query", "method", ... */
  category: string;
  /** What exactly was sent, e.g. "typed nul" or "gzip: valid gzip of garbage". */
  what: string;
  credential: string;
  /** A server-streaming call: a valid one stays open (a watch), so its first message is its answer. */
  streaming?: boolean;
  /** Sent over HTTP/1.1 (default HTTP/2). */
  http1?: boolean;
}

/** The credentials every input is sent with, by name. */
export function credentials(nodeToken: string): [string, Record<string, string>][] {
  return [
    ["none", {}],
    ["wrong", { authorization: "Bearer not-a-token-0123456789" }],
    ["node", { authorization: `Bearer ${nodeToken}` }],
    ["admin", { authorization: `Bearer ${TRUST_ADMIN_TOKEN}` }],
  ];
}

/** One line naming an attempt in the log. */
export function describe(a: Attempt): string {
  return `${a.target} | ${a.protocol}${a.http1 ? " (HTTP/1.1)" : ""} | ${a.credential} | ${a.category}: ${a.what} | ${a.method} ${clip(a.path, 160)}`;
}

function clip(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n)}… (${s.length} chars)` : s;
}

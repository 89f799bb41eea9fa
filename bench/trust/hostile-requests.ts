// The hostile sweep's whole list: the RPC and REST requests derived from the contract, a share of
// the Connect and REST ones again over HTTP/1.1, and for the short run a sample that keeps every
// kind of input (protocol, category, body) with and without the admin's credential, and every
// method and route on every protocol, then fills up by stride. A sample by index alone once missed
// the one input that crashed.
import { credentials, type Attempt } from "./hostile-attempt.js";
import { restRequests } from "./hostile-rest-requests.js";
import { rpcRequests } from "./hostile-rpc-requests.js";

const HTTP1_PROTOCOLS = new Set(["rest", "connect-json", "connect-proto", "connect-get"]);

/** Every request of the full sweep. */
export function hostileRequests(nodeToken: string): Attempt[] {
  const creds = credentials(nodeToken);
  // A wrong credential is refused from the headers alone, and a node's admits few calls: a third
  // of the inputs each (every third in contract order, so each method still gets a spread of them).
  const light = new Map<string, number>();
  const h2 = [...rpcRequests(creds), ...restRequests(creds)].filter((a) => {
    if (a.credential === "admin" || a.credential === "none") return true;
    const k = (light.get(a.credential) ?? 0) + 1;
    light.set(a.credential, k);
    return k % 3 === 0;
  });
  // HTTP/1.1 reaches the same handlers through another parser: a quarter of what it can carry.
  const h1 = h2
    .filter((a, i) => !a.http1 && HTTP1_PROTOCOLS.has(a.protocol) && (a.credential === "admin" || a.credential === "none") && i % 4 === 0)
    .map((a): Attempt => ({ ...a, http1: true }));
  return [...h2, ...h1];
}

/** About `size` of `all`: every kind with and without the admin's credential, every target on every protocol, then a stride. */
export function sample(all: Attempt[], size: number): Attempt[] {
  const keep = new Set<number>();
  const firstOf = new Map<string, number[]>();
  const group = (key: string, i: number) => {
    const g = firstOf.get(key);
    if (g) g.push(i);
    else firstOf.set(key, [i]);
  };
  all.forEach((a, i) => {
    group(`kind ${a.protocol} ${a.http1 ?? false} ${a.category} ${a.what} ${a.credential === "admin"}`, i);
    if (a.credential === "admin") group(`target ${a.target} ${a.protocol}`, i);
  });
  // Spread the picks over targets: the n-th group takes its (n mod size)-th member.
  let n = 0;
  for (const members of firstOf.values()) keep.add(members[n++ % members.length]!);
  const stride = Math.max(1, Math.floor(all.length / Math.max(1, size - keep.size)));
  for (let i = 0; i < all.length && keep.size < size; i += stride) keep.add(i);
  return [...keep].sort((a, b) => a - b).map((i) => all[i]!);
}

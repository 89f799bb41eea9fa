// The local node's credential for `npm start`: <agent home>/token (mode 0600), and beside it
// <agent home>/token-store, one line naming the store that issued it. A kept token is asked
// about first (GetNextWorkOrder: no side effects); one this store does not know (the quick start
// switched stores, or the data directory was wiped) is replaced when the admin token is known:
// the node is registered here, or, registered before, given a new token. Without the admin token
// npm start says exactly what to do and runs no agent (it would only be refused).
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

/** The store a controller configuration names, in words and without a password. */
export function storeLabel(config) {
  if (!config.storeUrl) return `the file store in ${config.dataDir}`;
  try {
    const u = new URL(config.storeUrl);
    return `PostgreSQL ${u.protocol}//${u.username ? `${u.username}@` : ""}${u.host}${u.pathname}`;
  } catch {
    return "PostgreSQL (its URL does not parse)";
  }
}

/**
 * A valid token file for `nodeId` on the controller at `url`, or undefined (said why). Returns
 * { tokenFile, how } where `how` says whether the token was kept, registered or replaced.
 */
export async function ensureNodeToken({ NodeService, url, ca, adminToken, nodeId, agentHome, store, say }) {
  const tokenFile = join(agentHome, "token");
  const noteFile = join(agentHome, "token-store");
  const client = (header, value) =>
    createClient(
      NodeService,
      createConnectTransport({
        baseUrl: `${url}/v1`,
        httpVersion: "2",
        nodeOptions: ca ? { ca } : {},
        interceptors: [(next) => (req) => (req.header.set(header, value), next(req))],
      }),
    );
  let stale;
  if (existsSync(tokenFile)) {
    const token = readFileSync(tokenFile, "utf8").trim();
    try {
      await client("authorization", `Bearer ${token}`).getNextWorkOrder({ nodeId });
      return { tokenFile, how: `kept (${tokenFile})` };
    } catch (e) {
      if (ConnectError.from(e).code !== Code.Unauthenticated) throw e;
      const issuer = existsSync(noteFile) ? readFileSync(noteFile, "utf8").trim() : "another store or controller";
      stale = `the token in ${tokenFile} was issued by ${issuer} and ${store} does not know it`;
    }
  }
  if (!adminToken) {
    say(
      `${stale ?? `no node token in ${tokenFile}`}, and npm start does not know this store's admin token, so the agent is not started: ` +
        `start again with SKIPPER_ADMIN_TOKEN set to the admin token of ${store} (lost it? npm start -- --reset-admin-token mints one) and npm start registers ${nodeId} there`,
    );
    return undefined;
  }
  const nodes = client("x-admin-token", adminToken);
  let token;
  let how;
  try {
    token = (await nodes.registerNode({ nodeId, displayName: "Local host", labels: { env: "dev" } })).token;
    how = `registered now on ${store}`;
  } catch (e) {
    if (ConnectError.from(e).code !== Code.Aborted) throw e;
    token = (await nodes.rotateNodeToken({ nodeId })).token;
    how = `${nodeId} was registered on ${store} before: issued it a new token`;
  }
  writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
  chmodSync(tokenFile, 0o600);
  writeFileSync(noteFile, `${store}\n`, { mode: 0o600 });
  if (stale) say(`${stale}: ${how}`);
  return { tokenFile, how: stale ? `replaced (${how})` : how };
}

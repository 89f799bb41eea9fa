// Resolves request headers to a Principal: the admin token (x-admin-token or Bearer) or a node
// token (Bearer). Failures are UNAUTHORIZED without saying which part was wrong.
import { unauthorized } from "../errors.js";
import type { Principal } from "../context.js";
import type { Store } from "../store/store.js";
import { hashToken, nodeIdOfToken, tokenMatches } from "./tokens.js";
import { isValidId } from "../../common/ids.js";

export interface Authenticator {
  /** The principal for these headers, or anonymous when none were presented. Throws UNAUTHORIZED for a bad credential. */
  authenticate(headers: Headers): Promise<Principal>;
}

/** Authenticator over the admin token hash and the store's node credentials. */
export function createAuthenticator(adminTokenHash: string, store: Store): Authenticator {
  return {
    async authenticate(headers) {
      const adminHeader = headers.get("x-admin-token");
      const bearer = parseBearer(headers.get("authorization"));
      if (adminHeader !== null) {
        if (tokenMatches(adminHeader, adminTokenHash)) return { kind: "admin" };
        throw unauthorized("invalid admin token");
      }
      if (bearer === undefined) return { kind: "anonymous" };
      const nodeId = nodeIdOfToken(bearer);
      if (nodeId !== undefined && isValidId(nodeId)) {
        const cred = await store.getNodeCredential(nodeId);
        // A deleted node's token stops working with the deletion (its tombstone stays).
        if (cred && tokenMatches(bearer, cred.tokenHash) && (await store.resourceExists("node", nodeId))) return { kind: "node", nodeId };
        throw unauthorized("invalid node token");
      }
      if (tokenMatches(bearer, adminTokenHash)) return { kind: "admin" };
      throw unauthorized("invalid token");
    },
  };
}

function parseBearer(value: string | null): string | undefined {
  if (value === null) return undefined;
  const m = /^Bearer\s+(\S{1,512})\s*$/i.exec(value);
  if (!m) throw unauthorized("authorization header must be 'Bearer <token>'");
  return m[1];
}

export { hashToken };

// Streams outlive the check that admitted them. When a credential ends or changes (a node token
// rotated, a node's certificates revoked or the node deleted, an API key revoked or rotated), the
// streams it opened are told at once, here, and ask the store whether their credential still
// holds (authenticator.ts credentialHolds); those that no longer hold end with UNAUTHORIZED.
// Controllers sharing a store relay each notice to the others (cluster.ts).
import type { Principal } from "../base/context.js";

/**
 * Who a credential belongs to, as notices name it: "node:<id>", "api_key:<id>". A relayed
 * principal (a relay acting for an SSH node) hears both its relay's notices and the SSH node's:
 * the node's spec changing (another relay, no ssh) or its deletion ends the relay's authority.
 */
export function credentialKeys(p: Principal): string[] {
  if (p.kind === "node") return p.relayNodeId !== undefined ? [`node:${p.relayNodeId}`, `node:${p.nodeId}`] : [`node:${p.nodeId}`];
  if (p.kind === "api_key") return [`api_key:${p.keyId}`];
  return [];
}

export class CredentialEnds {
  private readonly listeners = new Map<string, Set<() => void>>();
  private relay: ((key: string) => void) | undefined;

  /** Calls `fn` whenever a credential of `p` changes; returns the unsubscribe. */
  watch(p: Principal, fn: () => void): () => void {
    const keys = credentialKeys(p);
    for (const key of keys) {
      let set = this.listeners.get(key);
      if (!set) this.listeners.set(key, (set = new Set()));
      set.add(fn);
    }
    return () => {
      for (const key of keys) {
        const set = this.listeners.get(key);
        set?.delete(fn);
        if (set?.size === 0) this.listeners.delete(key);
      }
    };
  }

  /** A credential of `key` changed here: tells this controller's streams and the other controllers. */
  changed(key: string): void {
    this.deliver(key);
    this.relay?.(key);
  }

  /** A credential changed on another controller: tells this one's streams. */
  deliver(key: string): void {
    for (const fn of [...(this.listeners.get(key) ?? [])]) fn();
  }

  /** Where changes go to reach the other controllers. */
  relayTo(send: (key: string) => void): void {
    this.relay = send;
  }
}

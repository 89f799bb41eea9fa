// TLS session resumption across a controller restart. The key that seals session tickets is kept
// in <dataDir>/tls/ticket.key (0600, written like the other keys: pem-files.ts), so a restarted
// controller opens the tickets its previous process handed out: a fleet reconnecting after a
// restart resumes its sessions (no certificate signature, no certificate checks) instead of every
// agent paying a full handshake at once. The traffic keeps forward secrecy: Node's TLS 1.3
// resumption still runs an (EC)DHE exchange.
//
//   tls/ticket.key   {"created_at": "...", "key": "<48 bytes, base64>"}
//
// Node seals with one key at a time (tls.Server#setTicketKeys replaces it), so rotation is a
// schedule: a key older than TICKET_KEY_MAX_AGE_MS is replaced, at start or by the listener's
// periodic check; tickets sealed with the old one then buy a full handshake, once. Controllers
// with data directories of their own hold keys of their own: an agent moving to another
// controller makes a full handshake there.
import { createHash, randomBytes } from "node:crypto";
import { join, resolve } from "node:path";
import { ensurePrivateDir, readIfExists, writeFileAtomic } from "./pem-files.js";

/** How long one ticket key seals tickets before it is replaced. */
export const TICKET_KEY_MAX_AGE_MS = 7 * 24 * 3600 * 1000;

/**
 * How long a ticket may be offered (seconds): TLS 1.3's longest (RFC 8446 4.6.1). An agent's
 * connection lives until the controller restarts, and its ticket is as old as its connection.
 */
export const TICKET_LIFETIME_S = 7 * 24 * 3600;

const KEY_BYTES = 48;

/** The ticket key to seal with now: the stored one, or a new one (stored) when missing, broken or too old. */
export async function currentTicketKey(dataDir: string, now = new Date()): Promise<Buffer> {
  const dir = resolve(dataDir, "tls");
  const file = join(dir, "ticket.key");
  await ensurePrivateDir(dir);
  const stored = parse(await readIfExists(file));
  if (stored && now.getTime() - stored.createdAt.getTime() < TICKET_KEY_MAX_AGE_MS && stored.createdAt <= now) return stored.key;
  const key = randomBytes(KEY_BYTES);
  await writeFileAtomic(file, `${JSON.stringify({ created_at: now.toISOString(), key: key.toString("base64") })}\n`, 0o600);
  return key;
}

function parse(text: string | undefined): { createdAt: Date; key: Buffer } | undefined {
  if (text === undefined) return undefined;
  try {
    const o = JSON.parse(text) as { created_at?: unknown; key?: unknown };
    const createdAt = new Date(String(o.created_at));
    const key = Buffer.from(String(o.key), "base64");
    return key.length === KEY_BYTES && !Number.isNaN(createdAt.getTime()) ? { createdAt, key } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The TLS session id context of a server with this certificate and client CA. OpenSSL resumes a
 * session only in the context it was made in, so a new server certificate or client CA means
 * full handshakes: a session whose client certificate was accepted under the old CA is not
 * carried over to the new one.
 */
export function sessionContext(cert: string, clientCa: string | undefined): string {
  // OpenSSL takes at most 32 bytes.
  return createHash("sha256")
    .update(cert)
    .update("\0")
    .update(clientCa ?? "")
    .digest("hex")
    .slice(0, 32);
}

import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { currentTicketKey, sessionContext, TICKET_KEY_MAX_AGE_MS } from "./session-tickets.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "skipper-tickets-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("the TLS ticket key", () => {
  it("is made once (0600, 48 bytes) and kept until it is a week old, then replaced", async () => {
    const t0 = new Date("2026-01-01T00:00:00Z");
    const first = await currentTicketKey(dir, t0);
    expect(first.length).toBe(48);
    expect((await stat(join(dir, "tls", "ticket.key"))).mode & 0o777).toBe(0o600);
    const later = new Date(t0.getTime() + TICKET_KEY_MAX_AGE_MS - 1);
    expect((await currentTicketKey(dir, later)).equals(first)).toBe(true);
    const old = new Date(t0.getTime() + TICKET_KEY_MAX_AGE_MS);
    const next = await currentTicketKey(dir, old);
    expect(next.equals(first)).toBe(false);
    expect((await currentTicketKey(dir, old)).equals(next)).toBe(true);
  });

  it("replaces a file that does not hold a key, and one dated in the future", async () => {
    const file = join(dir, "tls", "ticket.key");
    const now = new Date("2026-01-01T00:00:00Z");
    await currentTicketKey(dir, now);
    await writeFile(file, '{"created_at":"2026-01-01T00:00:00Z","key":"c2hvcnQ="}\n');
    expect((await currentTicketKey(dir, now)).length).toBe(48);
    const future = { created_at: "2027-01-01T00:00:00Z", key: Buffer.alloc(48, 7).toString("base64") };
    await writeFile(file, JSON.stringify(future));
    expect((await currentTicketKey(dir, now)).equals(Buffer.alloc(48, 7))).toBe(false);
  });

  it("scopes sessions to the certificate and the client CA", () => {
    expect(sessionContext("cert", "ca")).toBe(sessionContext("cert", "ca"));
    expect(sessionContext("cert", "ca")).not.toBe(sessionContext("cert", "other ca"));
    expect(sessionContext("cert", undefined)).not.toBe(sessionContext("other cert", undefined));
    expect(sessionContext("cert", "ca").length).toBeLessThanOrEqual(32);
  });
});

// The audit trail on real stores: entries appended to a FileStore in a temp directory (and to
// PostgreSQL when the test run has one), then edited, removed and pruned on disk or in the table
// as someone covering their tracks or an operator would; verification names the first broken
// link. An export checks with the controller's certificate (with node:crypto and with the
// openssl command docs/audit.md gives) and fails on any changed line. AuditService is driven
// through a Connect router transport.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { appendFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { createClient, createRouterTransport, type Interceptor } from "@connectrpc/connect";
import pg from "pg";
import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { auditSigner, type AuditSigner } from "../controller/audit/audit-signer.js";
import { exportAuditTrail } from "../controller/audit/export-audit-trail.js";
import { verifyAuditExport } from "../controller/audit/verify-audit-export.js";
import { verifyAuditTrail } from "../controller/audit/verify-audit-trail.js";
import { connectErrorOf } from "../controller/boundary/api-errors.js";
import { callInfoKey } from "../controller/base/context.js";
import { actorOf } from "../controller/auth/actor.js";
import { tenantAccess } from "../controller/auth/tenant-access.js";
import { isSkipperError } from "../controller/base/errors.js";
import { auditService } from "../controller/services/audit-service.js";
import { auditHash } from "../controller/store/audit-chain.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import type { Store } from "../controller/store/store.js";
import { createCa, issueServerCert } from "../controller/tls/certificate-issuer.js";
import { createLogger } from "../common/logging/logger.js";
import { rpcError } from "./helpers/errors.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { auditDraft } from "./store-conformance.js";

const DAY = 24 * 3_600_000;
const T0 = Date.parse("2026-11-22T10:00:00.000Z");
const at = (offsetMs: number) => new Date(T0 + offsetMs);
// Days 2026-11-22, -23 and -24: entries 1-4, 5-8 and 9-12.
const OFFSETS = [0, 1, 2, 3].flatMap((i) => [i, DAY + i, 2 * DAY + i]).sort((a, b) => a - b);

let signer: AuditSigner;
let otherCertificate: string;

beforeAll(async () => {
  const now = new Date();
  const ca = await createCa(now);
  const server = await issueServerCert(ca, [{ type: "dns", value: "localhost" }], now);
  signer = auditSigner(server.key, server.cert);
  otherCertificate = (await issueServerCert(ca, [{ type: "dns", value: "localhost" }], now)).cert;
});

async function appendAll(store: Store): Promise<void> {
  for (const offset of OFFSETS) await store.appendAuditEntry(auditDraft(offset, `service/s${offset}`));
}

describe("audit trail on the file store", () => {
  let dir: string;
  let store: FileStore;
  let warnings: string[];
  const file = (day: string) => join(dir, "audit", `${day}.jsonl`);
  const open = async () => {
    store = new FileStore(dir, { onWarning: (msg) => warnings.push(msg) });
    await store.open();
    return store;
  };
  // Rewrites a day's file with `edit` applied to its lines (without the final empty one).
  const editLines = async (day: string, edit: (lines: string[]) => string[]) => {
    const lines = (await readFile(file(day), "utf8")).split("\n").slice(0, -1);
    await writeFile(
      file(day),
      edit(lines)
        .map((l) => `${l}\n`)
        .join(""),
    );
  };

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-audit-"));
    warnings = [];
    await appendAll(await open());
  });
  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("an untouched trail verifies from entry 1 to the last, whose hash is the head", async () => {
    const last = (await store.listAuditEntries({})).items.at(-1)!;
    expect(await verifyAuditTrail(store)).toEqual({
      intact: true,
      entriesChecked: 12,
      firstSequence: 1n,
      lastSequence: 12n,
      headHash: last.hash,
    });
  });

  it("each stored line's hash is SHA-256 of previous_hash, a newline and its other fields as sorted compact JSON", async () => {
    // Written as an outsider would from docs/audit.md, with none of the project's code.
    const sorted = (v: unknown): unknown =>
      v && typeof v === "object" && !Array.isArray(v)
        ? Object.fromEntries(
            Object.keys(v)
              .sort()
              .map((k) => [k, sorted((v as Record<string, unknown>)[k])]),
          )
        : v;
    let previous = "";
    for (const day of ["2026-11-22", "2026-11-23", "2026-11-24"]) {
      for (const line of (await readFile(file(day), "utf8")).split("\n").slice(0, -1)) {
        const { hash, previous_hash = "", ...rest } = JSON.parse(line);
        expect(previous_hash).toBe(previous);
        expect(
          createHash("sha256")
            .update(`${previous_hash}\n${JSON.stringify(sorted(rest))}`)
            .digest("hex"),
        ).toBe(hash);
        previous = hash;
      }
    }
  });

  it("one byte changed in one entry: verify names that entry and its file and line", async () => {
    await editLines("2026-11-23", (lines) => lines.map((l, i) => (i === 1 ? l.replace('"outcome":"OK"', '"outcome":"OX"') : l)));
    expect(await verifyAuditTrail(store)).toMatchObject({
      intact: false,
      entriesChecked: 12,
      firstBreak: { sequence: 6n, location: "audit/2026-11-23.jsonl:2", reason: "hash does not match its content" },
    });
  });

  it("an entry forged with its hash recomputed breaks the link from the entry after it", async () => {
    await editLines("2026-11-23", (lines) =>
      lines.map((l, i) => {
        if (i !== 1) return l;
        const forged = { ...JSON.parse(l), outcome: "FORBIDDEN" };
        forged.hash = auditHash(forged);
        return JSON.stringify(Object.fromEntries(Object.entries(forged).sort(([a], [b]) => (a < b ? -1 : 1))));
      }),
    );
    expect((await verifyAuditTrail(store)).firstBreak).toEqual({
      sequence: 7n,
      location: "audit/2026-11-23.jsonl:3",
      reason: "previous_hash does not match entry 6",
    });
  });

  it("a line removed: verify reports the gap at the entry after it", async () => {
    await editLines("2026-11-23", (lines) => lines.filter((_, i) => i !== 1));
    expect(await verifyAuditTrail(store)).toMatchObject({
      intact: false,
      entriesChecked: 11,
      firstBreak: { sequence: 7n, location: "audit/2026-11-23.jsonl:2", reason: "entry 6 is missing" },
    });
  });

  it("a whole day's file removed from the middle: the entries it held are reported missing", async () => {
    await rm(file("2026-11-23"));
    expect((await verifyAuditTrail(store)).firstBreak).toEqual({
      sequence: 9n,
      location: "audit/2026-11-24.jsonl:1",
      reason: "entries 5-8 are missing",
    });
  });

  it("a line that is not an entry is reported where it is, with no sequence", async () => {
    await editLines("2026-11-22", (lines) => lines.map((l, i) => (i === 2 ? "not json" : l)));
    expect((await verifyAuditTrail(store)).firstBreak).toEqual({
      sequence: 0n,
      location: "audit/2026-11-22.jsonl:3",
      reason: "line is not a valid entry",
    });
  });

  it("an entry whose content is the same but whose bytes are not (a space added) is reported", async () => {
    await editLines("2026-11-23", (lines) => lines.map((l, i) => (i === 0 ? l.replace('{"', '{ "') : l)));
    expect((await verifyAuditTrail(store)).firstBreak).toEqual({
      sequence: 5n,
      location: "audit/2026-11-23.jsonl:1",
      reason: "line is not in canonical form",
    });
  });

  it("pruning old days keeps the rest checkable from the oldest kept entry, and the chain goes on", async () => {
    expect(await store.pruneAuditEntries(at(2 * DAY))).toBe(8);
    expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, entriesChecked: 4, firstSequence: 9n, lastSequence: 12n });
    const next = await store.appendAuditEntry(auditDraft(2 * DAY + 10));
    expect(next.sequence).toBe(13n);
    expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, entriesChecked: 5, firstSequence: 9n });
  });

  it("a torn last line (a crash mid-append) is cut off at open with a warning, and the chain goes on from the line before", async () => {
    await store.close();
    const whole = await readFile(file("2026-11-24"), "utf8");
    await appendFile(file("2026-11-24"), '{"actor":{"id":"3f9c');
    await open();
    expect(warnings).toEqual(["the audit trail ended in a torn line (an append never acknowledged): cut it off"]);
    expect(await readFile(file("2026-11-24"), "utf8")).toBe(whole);
    const twelfth = (await store.listAuditEntries({ since: at(2 * DAY + 3) })).items[0]!;
    const next = await store.appendAuditEntry(auditDraft(2 * DAY + 10));
    expect(next).toMatchObject({ sequence: 13n, previousHash: twelfth.hash });
    expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, entriesChecked: 13 });
  });

  it("an export checks with the signer's certificate, and a changed or missing line, another certificate or another head fail it", async () => {
    const exp = await exportAuditTrail(store, at(DAY), at(2 * DAY), signer);
    expect(exp.entryCount).toBe(4);
    expect(exp.headHash).toBe((await store.listAuditEntries({ since: at(DAY + 3), pageSize: 1 })).items[0]!.hash);
    expect(verifyAuditExport(exp, signer.certificatePem)).toEqual({ valid: true, entries: 4 });
    const lines = exp.entriesJsonl.toString("utf8").split("\n");
    expect(lines.map((l) => (l ? JSON.parse(l).sequence : ""))).toEqual(["5", "6", "7", "8", ""]);
    const changed = Buffer.from(lines.map((l, i) => (i === 1 ? l.replace("ci-web", "ci-wex") : l)).join("\n"));
    expect(verifyAuditExport({ ...exp, entriesJsonl: changed })).toMatchObject({
      valid: false,
      reason: "line 2: hash does not match its content",
    });
    const missing = Buffer.from(lines.filter((_, i) => i !== 2).join("\n"));
    expect(verifyAuditExport({ ...exp, entriesJsonl: missing }).reason).toBe("line 3: entry 7 is missing");
    expect(verifyAuditExport(exp, otherCertificate).reason).toBe("head_signature does not verify with the certificate");
    // The last line dropped: the chain holds, but its head is no longer the signed one.
    const shorter = Buffer.from(`${lines.slice(0, 3).join("\n")}\n`);
    const seventh = JSON.parse(lines[2]!).hash as string;
    expect(verifyAuditExport({ ...exp, entriesJsonl: shorter }).reason).toBe("head_hash is not the last entry's hash");
    expect(verifyAuditExport({ ...exp, entriesJsonl: shorter, headHash: seventh }).reason).toBe(
      "head_signature does not verify with the certificate",
    );
  });

  it("an export's head signature checks with openssl as docs/audit.md shows", async () => {
    const exp = await exportAuditTrail(store, undefined, undefined, signer);
    await writeFile(join(dir, "head.txt"), exp.headHash);
    await writeFile(join(dir, "head.sig"), Buffer.from(exp.headSignature, "base64"));
    await writeFile(join(dir, "controller.crt"), exp.signerCertificate);
    const run = (args: string[]) => execFileSync("openssl", args, { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    await writeFile(join(dir, "controller.pub"), run(["x509", "-in", "controller.crt", "-pubkey", "-noout"]));
    expect(run(["dgst", "-sha256", "-verify", "controller.pub", "-signature", "head.sig", "head.txt"])).toBe("Verified OK\n");
    await writeFile(
      join(dir, "head.txt"),
      exp.headHash.replace(/^./, (c) => (c === "0" ? "1" : "0")),
    );
    expect(() => run(["dgst", "-sha256", "-verify", "controller.pub", "-signature", "head.sig", "head.txt"])).toThrow();
  });

  it("an empty range exports nothing and signs nothing", async () => {
    const exp = await exportAuditTrail(store, at(10 * DAY), undefined, signer);
    expect(exp).toMatchObject({ entryCount: 0, headHash: "", headSignature: "", signerCertificate: signer.certificatePem });
    expect(exp.entriesJsonl.length).toBe(0);
    expect(verifyAuditExport(exp)).toEqual({ valid: true, entries: 0 });
  });
});

describe("AuditService", () => {
  let dir: string;
  let store: FileStore;
  let client: ReturnType<typeof createClient<typeof AuditService>>;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-audit-rpc-"));
    store = new FileStore(dir);
    await store.open();
    await appendAll(store);
    const { logger } = createLogger({ service: "t", stdout: false, level: "silent" });
    // Stand-in for the boundary: call info in, domain errors out as the real interceptor maps them.
    const boundary: Interceptor = (next) => async (req) => {
      const principal = { kind: "admin" } as const;
      req.contextValues.set(callInfoKey, {
        requestId: "req-1",
        correlationId: "corr-1",
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        principal,
        actor: actorOf(principal),
        tenants: tenantAccess(principal, store),
        audit: {},
        logger,
      });
      try {
        return await next(req);
      } catch (e) {
        throw isSkipperError(e) ? connectErrorOf(e) : e;
      }
    };
    const transport = createRouterTransport((router) => router.service(AuditService, auditService({ store, signer })), {
      router: { interceptors: [boundary] },
    });
    client = createClient(AuditService, transport);
  });
  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("lists entries of a time range oldest first, a page at a time", async () => {
    const seen: bigint[] = [];
    let pageToken = "";
    do {
      const res = await client.listAuditEntries({
        since: timestampFromDate(at(1)),
        until: timestampFromDate(at(DAY + 2)),
        pageSize: 3,
        pageToken,
      });
      expect(res.meta?.requestId).toBe("req-1");
      seen.push(...res.entries.map((e) => e.sequence));
      pageToken = res.nextPageToken;
    } while (pageToken !== "");
    expect(seen).toEqual([2n, 3n, 4n, 5n, 6n]);
  });

  it("refuses a range that ends before it starts, a negative page size and a page token of another listing", async () => {
    const since = timestampFromDate(at(DAY));
    const until = timestampFromDate(at(0));
    expect(await rpcError(client.listAuditEntries({ since, until }))).toMatchObject({
      code: "INVALID_REQUEST",
      details: { field: "until" },
    });
    expect(await rpcError(client.exportAuditTrail({ since, until }))).toMatchObject({
      code: "INVALID_REQUEST",
      details: { field: "until" },
    });
    expect(await rpcError(client.listAuditEntries({ pageSize: -1 }))).toMatchObject({ details: { field: "page_size" } });
    expect(await rpcError(client.listAuditEntries({ pageToken: "ZXZlbnRzCjEy" }))).toMatchObject({ details: { field: "page_token" } });
  });

  it("verify answers the first break, and an export verifies as received", async () => {
    expect(await client.verifyAuditTrail({})).toMatchObject({ intact: true, entriesChecked: 12n, firstSequence: 1n, lastSequence: 12n });
    await rm(join(dir, "audit", "2026-11-23.jsonl"));
    const res = await client.verifyAuditTrail({});
    expect(res).toMatchObject({
      intact: false,
      firstBreak: { sequence: 9n, location: "audit/2026-11-24.jsonl:1", reason: "entries 5-8 are missing" },
    });
    const exp = await client.exportAuditTrail({ since: timestampFromDate(at(2 * DAY)) });
    expect(exp.entryCount).toBe(4n);
    expect(verifyAuditExport(exp, signer.certificatePem)).toEqual({ valid: true, entries: 4 });
  });
});

const url = pgUrl();
if (!url) console.warn("\n!!! no PostgreSQL for the tests: the audit trail's PostgreSQL tests are SKIPPED\n");

describe.skipIf(!url)("audit trail on PostgreSQL", () => {
  let store: PostgresStore;
  let sql: pg.Client;
  let n = 0;

  beforeEach(async () => {
    const db = await freshDatabase(`audit_${process.pid}_${n++}`);
    store = new PostgresStore(db, { maxConnections: 4 });
    await store.open();
    await appendAll(store);
    sql = new pg.Client({ connectionString: db });
    await sql.connect();
  });
  afterEach(async () => {
    await sql.end();
    await store.close();
  });

  it("an edited row is reported by its sequence; a deleted one as a gap at the row after it", async () => {
    expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, entriesChecked: 12, lastSequence: 12n });
    await sql.query(`UPDATE audit_entries SET text = replace(text, '"outcome":"OK"', '"outcome":"OX"') WHERE sequence = 6`);
    expect((await verifyAuditTrail(store)).firstBreak).toEqual({
      sequence: 6n,
      location: "audit_entries sequence 6",
      reason: "hash does not match its content",
    });
    await sql.query("DELETE FROM audit_entries WHERE sequence = 6");
    expect((await verifyAuditTrail(store)).firstBreak).toEqual({
      sequence: 7n,
      location: "audit_entries sequence 7",
      reason: "entry 6 is missing",
    });
  });

  it("pruning old days keeps the rest checkable from the oldest kept entry, and an export verifies", async () => {
    expect(await store.pruneAuditEntries(at(2 * DAY))).toBe(8);
    expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, entriesChecked: 4, firstSequence: 9n });
    const exp = await exportAuditTrail(store, undefined, undefined, signer);
    expect(verifyAuditExport(exp, signer.certificatePem)).toEqual({ valid: true, entries: 4 });
  });
});

// Crash safety of the file store: a child process writes as fast as it can and prints every
// acknowledged write; we SIGKILL it at a random moment, reopen the data directory and check that
// every acknowledged write is there, every file parses, no temp file or quarantined file is
// left, and the audit trail's chain is unbroken. Several rounds reuse one directory, so each
// open also recovers from the previous kill.
//
// The child is TypeScript; there is no TS runner in the dependencies, so it is bundled to one
// .mjs file with rolldown (the bundler vite ships) and run with plain node.
import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "rolldown";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { verifyAuditTrail } from "../controller/audit/verify-audit-trail.js";

const CHILD_SOURCE = fileURLToPath(new URL("./fixtures/store/crash-writer.ts", import.meta.url));
const ROUNDS = 5;
const STAGE: Record<number, number> = {
  [WorkOrderStatus.PENDING]: 0,
  [WorkOrderStatus.RUNNING]: 1,
  [WorkOrderStatus.SUCCESS]: 2,
  [WorkOrderStatus.FAILED]: 2,
};

interface Acks {
  resources: Map<string, bigint>;
  orders: Map<string, number>;
  events: Set<string>;
  idempotency: Set<string>;
  audit: Set<bigint>;
}

let work: string;
let childScript: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "skipper-crash-"));
  childScript = join(work, "crash-writer.mjs");
  await build({ input: CHILD_SOURCE, platform: "node", logLevel: "warn", output: { file: childScript, format: "esm" } });
});

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

// Runs the child until it has printed `killAfter` acks, SIGKILLs it, and records every complete line.
function runAndKill(dataDir: string, prefix: string, killAfter: number, acks: Acks): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [childScript, dataDir, prefix], { stdio: ["ignore", "pipe", "pipe"] });
    let buffered = "";
    let count = 0;
    let stderr = "";
    let killed = false;
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.stdout.on("data", (d: Buffer) => {
      buffered += d.toString();
      const lines = buffered.split("\n");
      buffered = lines.pop()!; // an incomplete last line is not an ack
      for (const line of lines) {
        if (record(line, acks)) count++;
      }
      if (!killed && count >= killAfter) {
        killed = true;
        // A little random extra time so the kill lands at different points of a write.
        setTimeout(() => child.kill("SIGKILL"), Math.floor(Math.random() * 15));
      }
    });
    child.on("exit", (code, signal) => {
      if (signal === "SIGKILL") resolve(count);
      else reject(new Error(`child exited on its own (code ${code}): ${stderr}`));
    });
  });
}

function record(line: string, acks: Acks): boolean {
  const [kind, a, b, c] = line.split(" ");
  if (kind === "R") {
    const v = BigInt(c!);
    const key = `${a}/${b}`;
    if ((acks.resources.get(key) ?? 0n) < v) acks.resources.set(key, v);
  } else if (kind === "W") {
    acks.orders.set(a!, Math.max(acks.orders.get(a!) ?? 0, Number(b)));
  } else if (kind === "E") {
    acks.events.add(a!);
  } else if (kind === "I") {
    acks.idempotency.add(a!);
  } else if (kind === "A") {
    acks.audit.add(BigInt(a!));
  } else {
    return false;
  }
  return true;
}

// Every file below the store's directories, relative to dataDir.
async function allFiles(dir: string, rel = ""): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(join(dir, rel), { withFileTypes: true })) {
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...(await allFiles(dir, p)));
    else out.push(p);
  }
  return out;
}

describe("file store crash safety", () => {
  it("every acknowledged write survives SIGKILL at a random moment", async () => {
    const dataDir = join(work, "data");
    const acks: Acks = { resources: new Map(), orders: new Map(), events: new Set(), idempotency: new Set(), audit: new Set() };
    for (let round = 0; round < ROUNDS; round++) {
      const killAfter = 50 + Math.floor(Math.random() * 400);
      const seen = await runAndKill(dataDir, `r${round}`, killAfter, acks);
      expect(seen).toBeGreaterThanOrEqual(killAfter);

      const warnings: string[] = [];
      const store = new FileStore(dataDir, { onWarning: (msg) => warnings.push(msg) });
      await store.open();
      try {
        for (const [key, version] of acks.resources) {
          const [type, id] = key.split("/") as ["tenant", string];
          const r = await store.getResource(type, id);
          expect(r, `resource ${key}`).toBeDefined();
          expect(BigInt(r!.metadata!.resourceVersion) >= version, `resource ${key} version`).toBe(true);
        }
        for (const [id, stage] of acks.orders) {
          const o = await store.getWorkOrder(id);
          expect(o, `work order ${id}`).toBeDefined();
          expect(STAGE[o!.status]! >= stage, `work order ${id} stage`).toBe(true);
        }
        const events = new Set<string>();
        let token = "";
        do {
          const page = await store.listEvents({ pageSize: 1000, pageToken: token });
          for (const e of page.items) events.add(e.id);
          token = page.nextPageToken;
        } while (token !== "");
        for (const id of acks.events) expect(events.has(id), `event ${id}`).toBe(true);
        for (const key of acks.idempotency) expect(await store.getIdempotencyRecord(key, new Date()), `idempotency ${key}`).toBeDefined();
        // The audit trail: every acknowledged entry kept, and one unbroken chain across every kill.
        const audited = new Set<bigint>();
        token = "";
        do {
          const page = await store.listAuditEntries({ pageSize: 1000, pageToken: token });
          for (const e of page.items) audited.add(e.sequence);
          token = page.nextPageToken;
        } while (token !== "");
        for (const seq of acks.audit) expect(audited.has(seq), `audit entry ${seq}`).toBe(true);
        expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, firstSequence: 1n });
      } finally {
        await store.close();
      }

      expect(warnings.filter((w) => w.includes("quarantine"))).toEqual([]);
      const files = await allFiles(dataDir);
      expect(files.filter((f) => f.endsWith(".tmp"))).toEqual([]);
      expect(files.filter((f) => f.startsWith("quarantine/"))).toEqual([]);
      for (const f of files.filter((f) => f.endsWith(".json"))) {
        const text = await readFile(join(dataDir, f), "utf8");
        expect(() => JSON.parse(text), `torn file ${f}`).not.toThrow();
      }
    }
    expect(acks.orders.size).toBeGreaterThan(0);
    expect(acks.events.size).toBeGreaterThan(0);
    expect(acks.audit.size).toBeGreaterThan(0);
  }, 120_000);
});

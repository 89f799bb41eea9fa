// The file store's resource directories: the design's plural, hyphenated names
// (resources/tenants/, resources/resource-limits/, ...), and the move of a data directory an older
// controller wrote (resources/tenant/, resources/resource_limits/, ...) when the store opens it,
// whole or finishing a move that was interrupted. Real store, real temp directory.
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { RESOURCE_TYPES, type ResourceType } from "../common/ids.js";
import type { Resource } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema } from "../gen/skipper/v1/work_order_pb.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { encodeMessage } from "../controller/store/record-codec.js";
import { allFiles } from "./helpers/crash.js";
import { everyType, PLURAL_DIRS, resource, writeOldLayout, writeRecord } from "./helpers/old-layout.js";
import { order } from "./store-conformance.js";

const SEED_DIRS = Object.values(PLURAL_DIRS).sort();

describe("file store resource directories", () => {
  let dataDir: string;
  let store: FileStore | undefined;
  let warnings: Array<{ msg: string; meta: object }>;
  let infos: Array<{ msg: string; meta: object }>;

  const open = async () => {
    store = new FileStore(dataDir, {
      onWarning: (msg, meta) => warnings.push({ msg, meta }),
      onInfo: (msg, meta) => infos.push({ msg, meta }),
    });
    await store.open();
    return store;
  };

  // Every resource of `expected` reads back through the Store, and the listing holds no other.
  const expectReadable = async (s: FileStore, expected: Resource[]) => {
    for (const r of expected) {
      const got = await s.getResource(r.resourceType as ResourceType, r.id);
      expect(got?.metadata?.resourceVersion, `${r.resourceType}/${r.id}`).toBe(r.metadata?.resourceVersion);
    }
    const listed = (await s.listResources({ pageSize: 1000 })).items.map((r) => `${r.resourceType}/${r.id}`);
    expect(listed.sort()).toEqual(expected.map((r) => `${r.resourceType}/${r.id}`).sort());
  };

  // Each record file under resources/, once: "tenants/tenant-0.json".
  const resourceFiles = async () => (await allFiles(join(dataDir, "resources"))).sort();
  const expectedFiles = (resources: Resource[]) =>
    resources.map((r) => `${PLURAL_DIRS[r.resourceType as ResourceType]}/${r.id}.json`).sort();

  beforeEach(async () => {
    dataDir = join(await mkdtemp(join(tmpdir(), "skipper-layout-")), "data");
    warnings = [];
    infos = [];
  });
  afterEach(async () => {
    await store?.close();
    store = undefined;
    await rm(join(dataDir, ".."), { recursive: true, force: true });
  });

  it("a fresh store lays out the design's plural, hyphenated directories and writes records there", async () => {
    const s = await open();
    expect((await readdir(join(dataDir, "resources"))).sort()).toEqual(SEED_DIRS);
    await s.createResource(resource("resource_limits", "small", 0));
    await s.createResource(resource("tenant", "acme", 0));
    expect(await resourceFiles()).toEqual(["resource-limits/small.json", "tenants/acme.json"]);
    expect(infos).toEqual([]);
  });

  it("a data directory in the old layout opens with every resource readable, under the new names only", async () => {
    const resources = everyType();
    await writeOldLayout(dataDir, resources);
    await writeFile(join(dataDir, "work-orders/pending/wo-1.json"), encodeMessage(WorkOrderSchema, order("wo-1", "node-1")), {
      mode: 0o600,
    });
    const s = await open();

    await expectReadable(s, resources);
    expect((await readdir(join(dataDir, "resources"))).sort()).toEqual(SEED_DIRS);
    expect(await resourceFiles()).toEqual(expectedFiles(resources));
    // Nothing else moved.
    expect((await s.getWorkOrder("wo-1"))?.id).toBe("wo-1");
    expect(await readdir(join(dataDir, "work-orders/pending"))).toEqual(["wo-1.json"]);
    // One line says what moved; nothing needed repairing.
    expect(infos).toHaveLength(1);
    expect(infos[0]!.meta).toMatchObject({ layout: 2 });
    const moved = (infos[0]!.meta as { moved: Array<{ from: string; to: string; by: string }> }).moved;
    expect(moved).toContainEqual({ from: "resources/tenant", to: "resources/tenants", by: "directory" });
    expect(moved).toContainEqual({ from: "resources/resource_limits", to: "resources/resource-limits", by: "directory" });
    expect(moved).toHaveLength(RESOURCE_TYPES.length);
    expect(warnings).toEqual([]);
    // Revisions go on from the migrated records.
    const next = await s.createResource(resource("tenant", "later", 0));
    expect(Number(next.metadata?.resourceVersion)).toBe(2 * RESOURCE_TYPES.length + 1);
  });

  it("a move interrupted mid-way is finished by the next open, nothing lost or duplicated", async () => {
    const resources = everyType();
    const byType = (t: ResourceType) => resources.filter((r) => r.resourceType === t);
    await writeOldLayout(dataDir, []);
    // tenant: moved in part (one file in each directory); node: moved whole before the kill;
    // service: every file moved, the emptied old directory not yet removed; resource_limits: the
    // new directory made, nothing moved into it yet; every other type not reached.
    const [tenantA, tenantB] = byType("tenant");
    await writeRecord(dataDir, "tenants", tenantA!);
    await writeRecord(dataDir, "tenant", tenantB!);
    await rm(join(dataDir, "resources/node"), { recursive: true });
    for (const r of byType("node")) await writeRecord(dataDir, "nodes", r);
    for (const r of byType("service")) await writeRecord(dataDir, "services", r);
    await mkdir(join(dataDir, "resources/resource-limits"), { mode: 0o700 });
    for (const r of byType("resource_limits")) await writeRecord(dataDir, "resource_limits", r);
    const handled: readonly ResourceType[] = ["tenant", "node", "service", "resource_limits"];
    for (const type of RESOURCE_TYPES.filter((t) => !handled.includes(t))) {
      for (const r of byType(type)) await writeRecord(dataDir, type, r);
    }
    const s = await open();

    await expectReadable(s, resources);
    expect((await readdir(join(dataDir, "resources"))).sort()).toEqual(SEED_DIRS);
    expect(await resourceFiles()).toEqual(expectedFiles(resources));
    const moved = (infos[0]!.meta as { moved: object[] }).moved;
    expect(moved).toContainEqual({ from: "resources/tenant", to: "resources/tenants", by: "files", files: 1 });
    expect(moved).toContainEqual({ from: "resources/service", to: "resources/services", by: "files", files: 0 });
    expect(moved).toContainEqual({ from: "resources/resource_limits", to: "resources/resource-limits", by: "files", files: 2 });
    expect(moved).toContainEqual({ from: "resources/volume", to: "resources/volumes", by: "directory" });
    expect(moved.some((m) => (m as { from: string }).from === "resources/node")).toBe(false);
    expect(warnings).toEqual([]);
  });

  it("a record in both directories keeps the new copy and quarantines the old one, with a warning", async () => {
    // Only an older controller started on a migrated directory writes such a pair.
    await writeOldLayout(dataDir, []);
    await writeRecord(dataDir, "tenants", resource("tenant", "twice", 5));
    await writeRecord(dataDir, "tenant", resource("tenant", "twice", 1));
    const s = await open();

    expect((await s.getResource("tenant", "twice"))?.metadata?.resourceVersion).toBe("5");
    expect(await resourceFiles()).toEqual(["tenants/twice.json"]);
    const quarantined = await readdir(join(dataDir, "quarantine"));
    expect(quarantined).toHaveLength(1);
    expect(quarantined[0]).toMatch(/^resources__tenant__twice\.json\./);
    expect(JSON.parse(await readFile(join(dataDir, "quarantine", quarantined[0]!), "utf8"))).toMatchObject({
      metadata: { resource_version: "1" },
    });
    expect(warnings.map((w) => w.msg)).toEqual(["kept a resource file's new-layout copy; moved its old-layout copy to quarantine"]);
    expect((infos[0]!.meta as { moved: object[] }).moved).toContainEqual({
      from: "resources/tenant",
      to: "resources/tenants",
      by: "files",
      files: 0,
      quarantined: 1,
    });
  });

  it("opening an already-migrated directory changes nothing", async () => {
    const resources = everyType();
    await writeOldLayout(dataDir, resources);
    await (await open()).close();
    const before = await tree(join(dataDir, "resources"));
    expect(await resourceFiles()).toEqual(expectedFiles(resources));
    infos = [];

    const s = await open();
    await expectReadable(s, resources);
    expect(await tree(join(dataDir, "resources"))).toEqual(before);
    expect(infos).toEqual([]);
    expect(warnings).toEqual([]);
  });
});

// Every entry below `dir` with what a move, a rewrite or a new entry would change.
async function tree(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (rel: string) => {
    const st = await stat(join(dir, rel));
    out[rel || "."] = `${st.ino} ${st.mtimeMs} ${st.ctimeMs}`;
    if (st.isDirectory()) for (const name of await readdir(join(dir, rel))) await walk(rel ? `${rel}/${name}` : name);
  };
  await walk("");
  return out;
}

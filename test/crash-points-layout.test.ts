// The built controller killed by its own crash point while its store moves an older data
// directory's resource directories to their plural names (store.after-layout-move: after a
// rename, before the directories are fsynced). The data directory is the old layout with one type
// already half moved (as a previous kill leaves it), so the n-th pass lands either between two
// files of a directory moved file by file or between two whole-directory renames; the moment is
// the point, never a time. Restarted on the same data: every resource is listed and readable, each
// record file is under its new directory exactly once, no old directory is left, nothing is torn,
// quarantined or half-written.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { RESOURCE_TYPES } from "../common/ids.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { allFiles, crashAt, crashOf, halfWritten } from "./helpers/crash.js";
import { everyType, PLURAL_DIRS, writeOldLayout, writeRecord } from "./helpers/old-layout.js";
import { E2E_ADMIN_TOKEN, startControllerProcess, stopProcess, type ControllerProcess } from "./helpers/processes.js";

const MAIN = fileURLToPath(new URL("../dist/controller/main.js", import.meta.url));
const PER_TYPE = 8;
// tenant is first in RESOURCE_TYPES: its PER_TYPE - ALREADY_MOVED files are moved one by one
// (passes 1..6), then each other type's directory is renamed whole (passes 7..14).
const ALREADY_MOVED = 2;
const FILE_PASSES = PER_TYPE - ALREADY_MOVED;
const PASSES = FILE_PASSES + RESOURCE_TYPES.length - 1;

describe("crash point in the move to the plural resource directories", () => {
  let root: string;
  let ctl: ControllerProcess | undefined;
  afterEach(async () => {
    if (ctl) await stopProcess(ctl.child);
    ctl = undefined;
    await rm(root, { recursive: true, force: true });
  });

  it.each([
    [1, "after the first file moved"],
    [4, "between two files of a directory moved file by file"],
    [FILE_PASSES, "after the last file moved, the emptied old directory still there"],
    [FILE_PASSES + 3, "between two whole-directory renames"],
    [PASSES, "after the last rename, resources/ not fsynced"],
  ])(
    // Named after the point first, as the other crash-point tests: the trust suite counts points by title.
    "store.after-layout-move: killed at pass %i (%s): the next start finishes the move, nothing lost or duplicated",
    async (n) => {
      root = await mkdtemp(join(tmpdir(), "skipper-crash-layout-"));
      const dataDir = join(root, "data");
      const resources = everyType(PER_TYPE);
      await writeOldLayout(dataDir, resources.slice(ALREADY_MOVED));
      for (const r of resources.slice(0, ALREADY_MOVED)) await writeRecord(dataDir, PLURAL_DIRS.tenant, r);

      const child = spawn(process.execPath, [MAIN, "--data-dir", dataDir, "--listen", "127.0.0.1:0"], {
        env: { ...process.env, SKIPPER_ADMIN_TOKEN: E2E_ADMIN_TOKEN, ...crashAt("store.after-layout-move", n) },
        stdio: ["ignore", "ignore", "pipe"],
      });
      expect(await crashOf(child), `died at pass ${n}`).toMatchObject({ signal: "SIGKILL", point: "store.after-layout-move" });
      // It died mid-way: n renames done, the rest not.
      const tenantsMoved = (await readdir(join(dataDir, "resources", PLURAL_DIRS.tenant))).length;
      expect(tenantsMoved).toBe(ALREADY_MOVED + Math.min(n, FILE_PASSES));
      expect(existsSync(join(dataDir, "resources", "tenant"))).toBe(n <= FILE_PASSES);
      const renamedWhole = RESOURCE_TYPES.slice(1).filter((t) => existsSync(join(dataDir, "resources", PLURAL_DIRS[t])));
      expect(renamedWhole).toHaveLength(Math.max(0, n - FILE_PASSES));

      ctl = await startControllerProcess({ dataDir });
      const api = ctl.admin(ResourceService);
      const listed = (await api.listResources({ pageSize: 1000 })).resources.map((r) => `${r.resourceType}/${r.id}`);
      expect(listed.sort()).toEqual(resources.map((r) => `${r.resourceType}/${r.id}`).sort());
      for (const r of resources) {
        // Its own record (the controller may have written a status to it since).
        const got = (await api.getResource({ resourceType: r.resourceType, id: r.id })).resource;
        expect(got?.metadata?.labels, `${r.resourceType}/${r.id}`).toEqual(r.metadata?.labels);
      }
      await stopProcess(ctl.child);
      ctl = undefined;

      expect((await readdir(join(dataDir, "resources"))).sort()).toEqual(Object.values(PLURAL_DIRS).sort());
      const files = (await allFiles(join(dataDir, "resources"))).sort();
      expect(files).toEqual(resources.map((r) => `${PLURAL_DIRS[r.resourceType as keyof typeof PLURAL_DIRS]}/${r.id}.json`).sort());
      expect(await halfWritten(dataDir)).toEqual([]);
    },
    60_000,
  );
});

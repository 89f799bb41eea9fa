// The file store's snapshots: snapshots/system/latest.json and snapshots/tenants/<id>.json, the
// latest of each scope, read from its file when asked for.
import { SnapshotSchema, type Snapshot } from "../../../gen/skipper/v1/snapshot_pb.js";
import { snapshotSlot } from "../record-checks.js";
import * as codec from "../record-codec.js";
import type * as S from "../store.js";
import type { FileCore } from "./file-core.js";

/** The SnapshotStore facet of the file store. */
export class FileSnapshots implements S.SnapshotStore {
  // The snapshot slots that have a file. A snapshot is read from it when asked for: reads are
  // rare, and a system snapshot covers every resource (open() read them all before).
  private slots = new Set<string>();

  constructor(private readonly core: FileCore) {}

  /** The slots found at open. */
  load(slots: string[]): void {
    this.slots = new Set(slots);
  }

  async putSnapshot(snapshot: Snapshot): Promise<void> {
    const { key, path } = this.slot(snapshot.scope, snapshot.tenantId);
    await this.core.write(`snapshot/${key}`, async () => {
      const text = await codec.encodeSnapshot(snapshot);
      await this.core.fs.writeFile(path, text);
      this.slots.add(key);
    });
  }

  async getLatestSnapshot(scope: "system" | "tenant", tenantId?: string): Promise<Snapshot | undefined> {
    this.core.ensureOpen();
    const { key, path } = this.slot(scope, tenantId ?? "");
    if (!this.slots.has(key)) return undefined;
    // Under the slot's lock, so a file being replaced is never taken for a bad one.
    return this.core.write(`snapshot/${key}`, async () => {
      const s = await this.core.reader.read(
        path,
        (t) => codec.decodeMessage(SnapshotSchema, t),
        (s) => scope === "system" || s.tenantId === tenantId,
      );
      if (!s) this.slots.delete(key);
      return s;
    });
  }

  private slot(scope: string, tenantId: string): { key: string; path: string } {
    const key = snapshotSlot(scope, tenantId);
    return { key, path: key === "system" ? this.core.paths.systemSnapshot() : this.core.paths.tenantSnapshot(tenantId) };
  }
}

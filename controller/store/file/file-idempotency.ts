// The file store's idempotency records: idempotency/<key>.json, held in memory from open; an
// expired one is dropped when it is next asked for (or at the next open).
import type * as S from "../store.js";
import * as codec from "../record-codec.js";
import type { FileCore } from "./file-core.js";

/** The IdempotencyStore facet of the file store. */
export class FileIdempotency implements S.IdempotencyStore {
  private records = new Map<string, S.IdempotencyRecord>();

  constructor(private readonly core: FileCore) {}

  /** The records read at open. */
  load(records: S.IdempotencyRecord[]): void {
    this.records = new Map(records.map((r) => [r.key, r]));
  }

  async getIdempotencyRecord(key: string, now: Date): Promise<S.IdempotencyRecord | undefined> {
    this.core.ensureOpen();
    const path = this.core.paths.idempotency(key);
    const r = this.records.get(key);
    if (!r) return undefined;
    if (r.expiresAt.getTime() > now.getTime()) return copyRecord(r);
    // Expired: drop it now rather than waiting for the next open() to prune it.
    await this.core.write(`idempotency/${key}`, async () => {
      if (this.records.get(key) !== r) return;
      await this.core.fs.unlink(path);
      this.records.delete(key);
    });
    return undefined;
  }

  async putIdempotencyRecord(record: S.IdempotencyRecord): Promise<void> {
    const path = this.core.paths.idempotency(record.key);
    const stored = copyRecord(record);
    await this.core.write(`idempotency/${record.key}`, async () => {
      await this.core.fs.writeFile(path, codec.encodeIdempotency(stored));
      this.records.set(stored.key, stored);
    });
  }
}

function copyRecord(r: S.IdempotencyRecord): S.IdempotencyRecord {
  return {
    key: r.key,
    requestHash: r.requestHash,
    response: structuredClone(r.response),
    createdAt: new Date(r.createdAt),
    expiresAt: new Date(r.expiresAt),
  };
}

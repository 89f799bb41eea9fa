// The file store's audit trail: audit/YYYY-MM-DD.jsonl, a file per UTC day that entries are
// appended to (audit-segments.ts: group commits, the chain's head, verification scans).
import type { AuditEntry } from "../../../gen/skipper/v1/audit_service_pb.js";
import type * as S from "../store.js";
import { AuditSegments } from "./audit-segments.js";
import type { FileCore } from "./file-core.js";

/** The AuditStore facet of the file store. */
export class FileAudit implements S.AuditStore {
  private segments: AuditSegments;

  constructor(private readonly core: FileCore) {
    this.segments = this.auditSegments();
  }

  /** Reads the trail's days and its head afresh (at open). */
  async open(): Promise<void> {
    this.segments = this.auditSegments();
    await this.segments.open();
  }

  /** Closes the day file being appended to (at close, once the appends in flight settled). */
  close(): Promise<void> {
    return this.segments.close();
  }

  async appendAuditEntry(draft: S.AuditDraft): Promise<AuditEntry> {
    this.core.ensureOpen();
    // Not under a record lock: the trail group-commits the appends that queue up together.
    return this.core.track(this.segments.append(draft));
  }

  async listAuditEntries(filter: S.AuditFilter): Promise<S.Page<AuditEntry>> {
    this.core.ensureOpen();
    return this.segments.list(filter);
  }

  scanAuditEntries(): AsyncIterable<S.StoredAuditEntry> {
    this.core.ensureOpen();
    return this.segments.scan();
  }

  async pruneAuditEntries(before: Date): Promise<number> {
    this.core.ensureOpen();
    return this.core.track(this.segments.prune(before));
  }

  private auditSegments(): AuditSegments {
    const { paths, fs, warn } = this.core;
    return new AuditSegments({ paths, fs, warn });
  }
}

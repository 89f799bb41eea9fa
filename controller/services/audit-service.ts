// AuditService: read the audit trail, verify its chain, export a time range with its head signed
// (controller/audit/). Recording entries is not this service's: the store's appendAuditEntry.
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { AuditService } from "../../gen/skipper/v1/audit_service_pb.js";
import type { AuditSigner } from "../audit/audit-signer.js";
import { exportAuditTrail } from "../audit/export-audit-trail.js";
import { verifyAuditTrail } from "../audit/verify-audit-trail.js";
import { responseMeta } from "../base/context.js";
import { conflict, invalid } from "../base/errors.js";
import type { Store } from "../store/store.js";

/** What the audit service needs: the store's trail and the key that signs exports. */
export interface AuditServiceDeps {
  store: Pick<Store, "listAuditEntries" | "scanAuditEntries">;
  /** Undefined when the controller serves plain HTTP (no TLS key to sign with): exports are refused. */
  signer?: AuditSigner;
}

/** Audit trail implementation. */
export function auditService(deps: AuditServiceDeps): ServiceImpl<typeof AuditService> {
  return {
    async listAuditEntries(req, ctx) {
      if (req.pageSize < 0) throw invalid("page_size must not be negative", { field: "page_size" });
      const page = await deps.store.listAuditEntries({ ...timeRange(req), pageSize: req.pageSize, pageToken: req.pageToken });
      return { meta: responseMeta(ctx), entries: page.items, nextPageToken: page.nextPageToken };
    },
    async verifyAuditTrail(_req, ctx) {
      const found = await verifyAuditTrail(deps.store);
      return {
        meta: responseMeta(ctx),
        intact: found.intact,
        entriesChecked: BigInt(found.entriesChecked),
        firstSequence: found.firstSequence,
        lastSequence: found.lastSequence,
        headHash: found.headHash,
        firstBreak: found.firstBreak,
      };
    },
    async exportAuditTrail(req, ctx) {
      const { since, until } = timeRange(req);
      if (!deps.signer) {
        throw conflict("exports are signed with the controller's TLS key, and this controller serves plain HTTP", { reason: "no_tls" });
      }
      const exported = await exportAuditTrail(deps.store, since, until, deps.signer);
      return {
        meta: responseMeta(ctx),
        entriesJsonl: exported.entriesJsonl,
        entryCount: BigInt(exported.entryCount),
        headHash: exported.headHash,
        headSignature: exported.headSignature,
        signerCertificate: exported.signerCertificate,
      };
    },
  };
}

// The request's [since, until) as dates; INVALID_REQUEST for a timestamp out of range or an empty range.
function timeRange(req: { since?: Timestamp; until?: Timestamp }): { since?: Date; until?: Date } {
  const since = req.since && dateOf(req.since, "since");
  const until = req.until && dateOf(req.until, "until");
  if (since && until && until < since) throw invalid("until must not be before since", { field: "until" });
  return { since, until };
}

function dateOf(t: Timestamp, field: string): Date {
  // Nanoseconds are dropped: the trail's times are compared to the millisecond.
  const d = new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1_000_000));
  if (Number.isNaN(d.getTime()) || t.nanos < 0 || t.nanos > 999_999_999) throw invalid(`${field} is not a valid time`, { field });
  return d;
}

// SnapshotService: the latest system and per-tenant snapshots (written after changes, coalesced;
// a read first writes the one still owed to its scope, so it covers every acknowledged change).
import type { ServiceImpl } from "@connectrpc/connect";
import type { SnapshotService } from "../../gen/skipper/v1/snapshot_service_pb.js";
import { callInfo, responseMeta } from "../base/context.js";
import { notFound } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import type { ServiceDeps } from "./deps.js";

/** Snapshot implementation. */
export function snapshotService(deps: ServiceDeps): ServiceImpl<typeof SnapshotService> {
  return {
    async getSystemSnapshot(_req, ctx) {
      // It holds every tenant: only for a caller whose scope is every tenant.
      await callInfo(ctx).tenants.require(undefined);
      await deps.snapshots.settle();
      const snapshot = await deps.store.getLatestSnapshot("system");
      if (!snapshot) throw notFound("snapshot", "system", "no system snapshot yet: one is written when a deployment finishes");
      return { meta: responseMeta(ctx), snapshot };
    },
    async getTenantSnapshot(req, ctx) {
      const tenantId = checkId(req.tenantId, "tenant_id");
      await callInfo(ctx).tenants.require(tenantId);
      await deps.snapshots.settle(tenantId);
      const snapshot = await deps.store.getLatestSnapshot("tenant", tenantId);
      if (!snapshot)
        throw notFound("snapshot", tenantId, `no snapshot for tenant ${tenantId} yet: one is written when its deployment finishes`);
      return { meta: responseMeta(ctx), snapshot };
    },
  };
}

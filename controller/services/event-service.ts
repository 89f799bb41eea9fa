// EventService: the append-only event history, filtered by type, tenant, resource, work order,
// correlation id and time.
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { callInfo, responseMeta } from "../context.js";
import { checkTenantFilter, visible } from "../auth/resource-access.js";
import { invalid } from "../errors.js";
import { isValidTraceId } from "../../common/ids.js";
import { checkId } from "../id-checks.js";
import type { ServiceDeps } from "./deps.js";

/** Event listing implementation. */
export function eventService(deps: ServiceDeps): ServiceImpl<typeof EventService> {
  return {
    async listEvents(req, ctx) {
      if (req.type !== "" && !/^[a-z][a-z0-9_]{0,63}$/.test(req.type)) {
        throw invalid("type must be an event type such as work_order_created", { field: "type" });
      }
      if (req.sinceRevision < 0n) throw invalid("since_revision must not be negative", { field: "since_revision" });
      if (req.tenantId !== "") checkId(req.tenantId, "tenant_id");
      const call = callInfo(ctx);
      await checkTenantFilter(call, req.tenantId);
      if (req.resourceId !== "") checkId(req.resourceId, "resource_id");
      if (req.workOrderId !== "") checkId(req.workOrderId, "work_order_id");
      if (req.correlationId !== "" && !isValidTraceId(req.correlationId)) {
        throw invalid("correlation_id has invalid characters", { field: "correlation_id" });
      }
      const page = await deps.store.listEvents({
        type: req.type || undefined,
        tenantId: req.tenantId || undefined,
        resourceId: req.resourceId || undefined,
        workOrderId: req.workOrderId || undefined,
        correlationId: req.correlationId || undefined,
        since: req.since ? timestampDate(req.since) : undefined,
        sinceRevision: req.sinceRevision > 0n ? req.sinceRevision : undefined,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      // A scoped caller sees its tenants' events only (not the fleet's: nodes, other tenants).
      const events = await visible(call, page.items, (e) => e.tenantId, false);
      return { meta: responseMeta(ctx), events, nextPageToken: page.nextPageToken };
    },
  };
}

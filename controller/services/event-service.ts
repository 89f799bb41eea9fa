// EventService: the append-only event history, filtered by type, tenant, resource, work order,
// correlation id and time.
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { EventService, WatchEventsRequest } from "../../gen/skipper/v1/event_service_pb.js";
import type { HandlerContext } from "@connectrpc/connect";
import { callInfo, responseMeta, type CallInfo, type Principal } from "../base/context.js";
import { checkTenantFilter, visible } from "../auth/resource-access.js";
import { invalid, SkipperError, unauthorized } from "../base/errors.js";
import { credentialHolds } from "../auth/authenticator.js";
import { isValidTraceId } from "../../common/ids.js";
import { checkId } from "../base/id-checks.js";
import type { ServiceDeps } from "./deps.js";

// How often a watch reads the history for what other controllers recorded, how far back it reads
// again (clocks of controllers sharing a store differ a little, and an event's time is when it was
// made, a moment before it was stored), and how often an idle stream says it is alive.
const WATCH_POLL_MS = 1000;
const WATCH_LOOK_BACK_MS = 5000;
const WATCH_KEEPALIVE_MS = 30_000;
// Watches one credential may hold open at once on this controller: each reads the history every
// second, so a key (a dashboard left open in many tabs, a script gone wrong) cannot multiply that.
export const MAX_WATCHES_PER_CALLER = 16;

/** Event listing implementation. */
export function eventService(deps: ServiceDeps): ServiceImpl<typeof EventService> {
  // Watches open per credential on this controller.
  const watching = new Map<string, number>();

  async function* watch(req: WatchEventsRequest, ctx: HandlerContext, call: CallInfo) {
    const filter = {
      type: req.type || undefined,
      tenantId: req.tenantId || undefined,
      resourceId: req.resourceId || undefined,
      workOrderId: req.workOrderId || undefined,
    };
    // Sent ids, by event time: what a read again of the look-back finds a second time.
    const sent = new Map<string, number>();
    let cursor = req.since ? timestampDate(req.since).getTime() : deps.now().getTime();
    let quietSince = Date.now();
    // Told when the caller's credential ends or changes: the next round asks whether it still holds.
    let recheck = false;
    const unwatch = deps.credentialEnds.watch(call.principal, () => {
      recheck = true;
    });
    try {
      yield { meta: responseMeta(ctx), serverTime: timestampFromDate(deps.now()) };
      while (!ctx.signal.aborted) {
        if (recheck) {
          recheck = false;
          if (!(await credentialHolds(deps.store, call.principal, deps.now())))
            throw unauthorized("the credential of this watch has been revoked");
        }
        const polledAt = deps.now().getTime();
        const from = new Date(cursor - WATCH_LOOK_BACK_MS);
        let pageToken = "";
        do {
          const page = await deps.store.listEvents({ ...filter, since: from, pageSize: 500, pageToken });
          for (const event of await visible(call, page.items, (e) => e.tenantId, false)) {
            const at = event.timestamp ? timestampDate(event.timestamp).getTime() : 0;
            if (sent.has(event.id) || at < cursor - WATCH_LOOK_BACK_MS) continue;
            sent.set(event.id, at);
            cursor = Math.max(cursor, at);
            quietSince = Date.now();
            yield { meta: responseMeta(ctx), event, serverTime: timestampFromDate(deps.now()) };
          }
          pageToken = page.nextPageToken;
        } while (pageToken !== "" && !ctx.signal.aborted);
        // Read up to when this round began, whatever it sent: the next reads only the look-back
        // before that (not everything since the last event this caller may see).
        cursor = Math.max(cursor, polledAt);
        for (const [id, at] of sent) if (at < cursor - 2 * WATCH_LOOK_BACK_MS) sent.delete(id);
        if (Date.now() - quietSince >= WATCH_KEEPALIVE_MS) {
          quietSince = Date.now();
          // Also asked now and then unprompted: a key that expired sends no notice.
          recheck = true;
          yield { meta: responseMeta(ctx), serverTime: timestampFromDate(deps.now()) };
        }
        await pause(WATCH_POLL_MS, ctx.signal);
      }
    } finally {
      unwatch();
    }
  }

  return {
    async *watchEvents(req, ctx) {
      checkFilter(req.type, req.tenantId, req.resourceId, req.workOrderId);
      const call = callInfo(ctx);
      await checkTenantFilter(call, req.tenantId);
      const who = callerKey(call.principal);
      const open = watching.get(who) ?? 0;
      if (open >= MAX_WATCHES_PER_CALLER) {
        throw new SkipperError("RESOURCE_EXHAUSTED", `this credential holds ${open} event watches open already; close one first`, {
          limit: MAX_WATCHES_PER_CALLER,
        });
      }
      watching.set(who, open + 1);
      try {
        yield* watch(req, ctx, call);
      } finally {
        const left = (watching.get(who) ?? 1) - 1;
        if (left > 0) watching.set(who, left);
        else watching.delete(who);
      }
    },

    async listEvents(req, ctx) {
      checkFilter(req.type, req.tenantId, req.resourceId, req.workOrderId);
      if (req.sinceRevision < 0n) throw invalid("since_revision must not be negative", { field: "since_revision" });
      const call = callInfo(ctx);
      await checkTenantFilter(call, req.tenantId);
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
        newestFirst: req.newestFirst,
      });
      // A scoped caller sees its tenants' events only (not the fleet's: nodes, other tenants).
      const events = await visible(call, page.items, (e) => e.tenantId, false);
      return { meta: responseMeta(ctx), events, nextPageToken: page.nextPageToken };
    },
  };
}

/** Who holds a watch, for the per-credential limit. */
function callerKey(p: Principal): string {
  switch (p.kind) {
    case "api_key":
      return `key:${p.keyId}`;
    case "node":
      return `node:${p.nodeId}`;
    default:
      return p.kind;
  }
}

function checkFilter(type: string, tenantId: string, resourceId: string, workOrderId: string): void {
  if (type !== "" && !/^[a-z][a-z0-9_]{0,63}$/.test(type)) {
    throw invalid("type must be an event type such as work_order_created", { field: "type" });
  }
  if (tenantId !== "") checkId(tenantId, "tenant_id");
  if (resourceId !== "") checkId(resourceId, "resource_id");
  if (workOrderId !== "") checkId(workOrderId, "work_order_id");
}

/** Waits `ms`, or less when the stream is closed. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

// RolloutService: read rollouts and steer one (reconcile/steer-rollout.ts). Every command is
// idempotent: repeating it returns the rollout unchanged.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { RolloutActorSchema, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import type { RolloutService } from "../../gen/skipper/v1/rollout_service_pb.js";
import { callInfo, responseMeta, traceOf } from "../base/context.js";
import { invalid, notFound } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { steerRollout } from "../reconcile/steer-rollout.js";
import type { RolloutCommand } from "../rollouts/rollout-commands.js";
import { planForTenant } from "../reconcile/plan-rollout.js";

type SteerCommand = Exclude<RolloutCommand, { kind: "approve" }> | { kind: "approve"; planHash: string };
import { listRollouts } from "../rollouts/rollout-list.js";
import type { ServiceDeps } from "./deps.js";
import { actorLabel } from "../auth/actor.js";
import { checkTenantFilter, visible } from "../auth/resource-access.js";

const MAX_REASON = 1024;

/** Rollout implementation. */
export function rolloutService(deps: ServiceDeps): ServiceImpl<typeof RolloutService> {
  const steer = async (ctx: HandlerContext, req: { id: string; reason: string }, cmd: SteerCommand) => {
    const id = checkId(req.id, "id");
    if (req.reason.length > MAX_REASON) throw invalid(`reason must be at most ${MAX_REASON} characters`, { field: "reason" });
    const call = callInfo(ctx);
    if (!call.tenants.unrestricted) {
      const current = await deps.rollouts.get(id);
      if (!current) throw notFound("rollout", id);
      await call.tenants.require(current.tenantId);
    }
    const trace = traceOf(call);
    const actor = create(RolloutActorSchema, {
      actor: actorLabel(call.actor),
      at: timestampFromDate(deps.now()),
      reason: req.reason,
      requestId: trace.requestId,
      correlationId: trace.correlationId,
    });
    const wake = (tenantId: string, t: typeof trace) => deps.triggers.rolloutChanged(tenantId, t);
    const rollout = await steerRollout({ store: deps.store, records: deps.records, rollouts: deps.rollouts, wake }, id, cmd, actor, trace);
    call.logger.info(
      {
        action: `rollout_${cmd.kind}`,
        result: "ok",
        tenant_id: rollout.tenantId,
        metadata: { rollout_id: id, status: RolloutStatus[rollout.status] },
      },
      `rollout ${cmd.kind}`,
    );
    return { meta: responseMeta(ctx), rollout };
  };
  return {
    async getRollout(req, ctx) {
      const id = checkId(req.id, "id");
      const rollout = await deps.rollouts.get(id);
      if (!rollout) throw notFound("rollout", id);
      await callInfo(ctx).tenants.require(rollout.tenantId);
      return { meta: responseMeta(ctx), rollout };
    },
    async listRollouts(req, ctx) {
      const call = callInfo(ctx);
      if (req.tenantId !== "") checkId(req.tenantId, "tenant_id");
      await checkTenantFilter(call, req.tenantId);
      req.statuses.forEach((s, i) => {
        if (!(s in RolloutStatus) || s === RolloutStatus.UNSPECIFIED)
          throw invalid(`statuses[${i}] is not a rollout status`, { field: "statuses" });
      });
      const page = await listRollouts(deps.store, {
        tenantId: req.tenantId || undefined,
        statuses: req.statuses,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      const rollouts = await visible(call, page.items, (r) => r.tenantId, false);
      return { meta: responseMeta(ctx), rollouts, nextPageToken: page.nextPageToken };
    },
    pauseRollout: (req, ctx) => steer(ctx, req, { kind: "pause" }),
    resumeRollout: (req, ctx) => steer(ctx, req, { kind: "resume" }),
    promoteRollout: (req, ctx) => steer(ctx, req, { kind: "promote", wave: req.wave }),
    abortRollout: (req, ctx) => steer(ctx, req, { kind: "abort" }),
    approveRollout: (req, ctx) => {
      if (!/^[0-9a-f]{64}$/.test(req.planHash)) throw invalid("plan_hash must be the plan's hash (64 hex digits)", { field: "plan_hash" });
      return steer(ctx, req, { kind: "approve", planHash: req.planHash });
    },
    async planRollout(req, ctx) {
      const tenantId = checkId(req.tenantId, "tenant_id");
      await callInfo(ctx).tenants.require(tenantId);
      return { meta: responseMeta(ctx), plan: await planForTenant(deps.store, tenantId) };
    },
  };
}

// DeploymentService.Apply: reconcile a tenant now (reconcile/apply-now.ts). Honours
// x-idempotency-key: a retry with the same key and body replays the first response; the same
// key with another body is a CONFLICT.
import type { ServiceImpl } from "@connectrpc/connect";
import { ApplyRequestSchema, ApplyResponseSchema, type DeploymentService } from "../../gen/skipper/v1/deployment_service_pb.js";
import { callInfo, responseMeta, traceOf } from "../base/context.js";
import { applyNow } from "../reconcile/apply-now.js";
import type { ServiceDeps } from "./deps.js";
import { idempotent } from "./idempotency.js";

const SCHEMAS = { request: ApplyRequestSchema, response: ApplyResponseSchema };

/** Deployment implementation. */
export function deploymentService(deps: ServiceDeps): ServiceImpl<typeof DeploymentService> {
  return {
    async apply(req, ctx) {
      const call = callInfo(ctx);
      await call.tenants.require(req.tenantId);
      const res = await idempotent(deps, call, "DeploymentService/Apply", SCHEMAS, req, () =>
        applyNow(deps, req, traceOf(call), call.logger),
      );
      return { ...res, meta: responseMeta(ctx) };
    },
  };
}

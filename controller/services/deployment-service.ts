// DeploymentService.Apply: turns a tenant's desired state into a deployment resource and a
// deploy_service work order for its node. Honours x-idempotency-key: a retry with the same key
// and body replays the first response; the same key with another body is a CONFLICT.
import type { ServiceImpl } from "@connectrpc/connect";
import { create, fromJson, toJson } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import { v4 as uuidv4 } from "uuid";
import {
  ApplyRequestSchema,
  ApplyResponseSchema,
  DeploymentService,
  type ApplyRequest,
  type ApplyResponse,
} from "../../gen/skipper/v1/deployment_service_pb.js";
import { callInfo, responseMeta, type CallInfo } from "../context.js";
import { conflict, notFound } from "../errors.js";
import { checkId } from "../ids.js";
import { planDeployment, targetNodeId } from "../reconcile/plan-deployment.js";
import { recordEvents, transitionEventId } from "../events/event-recorder.js";
import type { ServiceDeps } from "./deps.js";

const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

/** Deployment implementation. */
export function deploymentService(deps: ServiceDeps): Partial<ServiceImpl<typeof DeploymentService>> {
  const { store } = deps;

  async function apply(req: ApplyRequest, call: CallInfo): Promise<ApplyResponse> {
    const tenantId = checkId(req.tenantId, "tenant_id");
    if (req.nodeId !== "") checkId(req.nodeId, "node_id");
    const tenant = await store.getResource("tenant", tenantId);
    if (!tenant) throw notFound("tenant", tenantId);
    const nodeId = checkId(targetNodeId(tenant, req.nodeId), "node_id");
    const node = await store.getResource("node", nodeId);
    if (!node) throw notFound("node", nodeId, `node ${nodeId} is not registered`);
    const spec = tenant.desiredState?.kind.case === "tenant" ? tenant.desiredState.kind.value : undefined;
    const services = (await Promise.all((spec?.serviceIds ?? []).map((id) => store.getResource("service", id)))).filter((s) => s !== undefined);
    const plan = planDeployment({
      tenant,
      node,
      services,
      deploymentId: `deploy-${uuidv4()}`,
      workOrderId: uuidv4(),
      requestId: call.requestId,
      correlationId: call.correlationId,
      now: deps.now(),
    });
    // The deployment is durable before the order that points at it; the order and its events
    // are written together (event ids derive from the ids, so a replay writes the same events).
    const deployment = await store.createResource(plan.deployment);
    const base = {
      requestId: call.requestId,
      correlationId: call.correlationId,
      tenantId,
      nodeId,
      deploymentId: deployment.id,
      workOrderId: plan.workOrder.id,
    };
    const [workOrder] = await Promise.all([
      store.createWorkOrder(plan.workOrder),
      recordEvents(store, [
        { id: transitionEventId(deployment.id, "deployment_started"), type: "deployment_started", resourceType: "deployment", resourceId: deployment.id, ...base },
        {
          id: transitionEventId(plan.workOrder.id, "work_order_created"),
          type: "work_order_created",
          resourceType: "work_order",
          resourceId: plan.workOrder.id,
          ...base,
          data: { type: "deploy_service" },
        },
      ]),
    ]);
    call.logger.info(
      { action: "deployment_started", result: "ok", tenant_id: tenantId, node_id: nodeId, metadata: { deployment_id: deployment.id, work_order_id: workOrder.id } },
      "deployment started",
    );
    return create(ApplyResponseSchema, { deployment, workOrder });
  }

  return {
    async apply(req, ctx) {
      const call = callInfo(ctx);
      const key = call.idempotencyKey;
      if (key === undefined) return { ...(await apply(req, call)), meta: responseMeta(ctx) };
      // Keys are scoped to the method and the caller; only a hash of the key is stored.
      const scoped = sha256(`DeploymentService/Apply\0${call.principal.kind}\0${key}`);
      const requestHash = sha256(JSON.stringify(toJson(ApplyRequestSchema, req)));
      return deps.locks.run(`idem:${scoped}`, async () => {
        const now = deps.now();
        const prior = await store.getIdempotencyRecord(scoped, now);
        if (prior) {
          if (prior.requestHash !== requestHash) {
            throw conflict("x-idempotency-key was already used with a different request body", {
              field: "x-idempotency-key",
            });
          }
          const replay = fromJson(ApplyResponseSchema, prior.response as never, { ignoreUnknownFields: true });
          return { ...replay, meta: responseMeta(ctx) };
        }
        const res = await apply(req, call);
        await store.putIdempotencyRecord({
          key: scoped,
          requestHash,
          response: toJson(ApplyResponseSchema, res, { useProtoFieldName: true }),
          createdAt: now,
          expiresAt: new Date(now.getTime() + IDEMPOTENCY_TTL_MS),
        });
        return { ...res, meta: responseMeta(ctx) };
      });
    },
  };
}

function sha256(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex");
}

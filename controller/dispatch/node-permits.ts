// What a node and tenant permit an ad-hoc order: a disabled node takes none, a deleted tenant
// none, and a node takes what its order's kind asks it to permit (order-kinds.ts: a node that
// reported its allow-lists takes only commands and process sources on them).
// The agent checks again (it is the authority over its host); refusing here saves a round trip
// and says why. Errors are CONFLICT with a machine-readable reason.
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import { conflict, forbidden } from "../base/errors.js";
import { inNodePool } from "../resources/node-pool.js";
import { missingCapabilities } from "../../common/node-capabilities.js";
import { checkPermitsOf, controllerOrderKind } from "./order-kinds.js";

/** Checks the order against the facts of its node and tenant. Throws NOT_FOUND-style or CONFLICT errors. */
export function checkTargets(req: CreateWorkOrderRequest, node: Resource, tenant: Resource | undefined, scoped = false): void {
  const spec = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value : undefined;
  checkTenantNode(node, tenant, scoped);
  if (spec?.disabled)
    throw conflict(`node ${node.id} is disabled and takes no new work orders`, { node_id: node.id, reason: "NODE_DISABLED" });
  if (tenant?.deletion) throw conflict(`tenant ${tenant.id} is deleted`, { tenant_id: tenant.id });
  const caps = node.currentState?.kind.case === "node" ? node.currentState.kind.value.capabilities : undefined;
  const missing = missingCapabilities(caps, req.target?.requiredCapabilities ?? []);
  if (missing.length > 0) {
    throw conflict(`node ${node.id} lacks the required capabilities ${missing.join(", ")}`, {
      node_id: node.id,
      reason: "CAPABILITY_MISSING",
      missing: missing.join(","),
      field: "target.required_capabilities",
    });
  }
  const kind = controllerOrderKind(req.type);
  if (kind?.queued === "on request") checkPermitsOf(kind, req, node.id, caps);
}

// An order naming a tenant goes to a node of that tenant: inside its node pool when an admin gave
// it one (for everyone, as placement is), and for a caller scoped to some tenants, when it has no
// pool, to a node it runs on. A scoped key cannot reach another tenant's node with an order (nor
// with a terminal: open-terminal.ts).
export function checkTenantNode(node: Resource, tenant: Resource | undefined, scoped: boolean): void {
  const spec = tenant?.desiredState?.kind.case === "tenant" ? tenant.desiredState.kind.value : undefined;
  if (!tenant || !spec) return;
  const pool = spec.policy?.nodeSelector ?? {};
  if (Object.keys(pool).length > 0) {
    if (!inNodePool(node, pool)) {
      throw forbidden(`node ${node.id} is outside tenant ${tenant.id}'s node pool`, {
        node_id: node.id,
        tenant_id: tenant.id,
        field: "target.node_id",
      });
    }
    return;
  }
  const runsOn = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value.targets.map((t) => t.nodeId) : [];
  if (scoped && !runsOn.includes(node.id)) {
    throw forbidden(`tenant ${tenant.id} does not run on node ${node.id}, and it has no node pool`, {
      node_id: node.id,
      tenant_id: tenant.id,
      field: "target.node_id",
    });
  }
}

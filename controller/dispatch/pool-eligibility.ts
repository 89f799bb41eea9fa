// Which nodes may take a pool order (WorkOrderTarget.pool): pure rules over the order and a node.
// A node is eligible when it exists, is not disabled, its placement labels (reconcile/placement.ts
// nodeLabels) match the pool's selector, it has reported what it can do, it holds the capability
// its order's type needs (common/node-capabilities.ts ORDER_CAPABILITIES: an SSH node that cannot
// write files takes no upload) and every required one (reported, or derived from an older agent's
// report), and it permits what the order asks (its kind's permits, e.g. the program on its
// allow-list). Counting the nodes that could take one now also needs it online. The claim itself
// is the store's compare-and-set: these rules decide who may try.
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { NodeLiveness } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderWaitSchema, type WorkOrder, type WorkOrderWait } from "../../gen/skipper/v1/work_order_pb.js";
import type { CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import { create } from "@bufbuild/protobuf";
import { missingCapabilities, orderCapability } from "../../common/node-capabilities.js";
import { isSkipperError } from "../base/errors.js";
import { matchesSelector } from "../domain/label-selector.js";
import { nodeLabels } from "../reconcile/placement.js";
import { checkPermitsOf, controllerOrderKind } from "./order-kinds.js";

/** Why a node may not take a pool order (machine-readable), or ok. */
export type Eligibility =
  | { ok: true }
  | { ok: false; reason: "NODE_DELETED" | "NODE_DISABLED" | "NOT_IN_POOL" | "CAPABILITY_MISSING" | "NOT_PERMITTED"; message: string };

/** True when the order goes to a pool rather than to one named node. */
export function isPoolOrder(order: WorkOrder): boolean {
  return order.target?.pool !== undefined;
}

/** Whether `node` may claim the pool order `order` (liveness aside: a node asking is alive). */
export function poolEligibility(order: WorkOrder, node: Resource | undefined): Eligibility {
  if (!node || node.deletion) return { ok: false, reason: "NODE_DELETED", message: "the node is not registered" };
  const spec = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value : undefined;
  if (spec?.disabled) return { ok: false, reason: "NODE_DISABLED", message: `node ${node.id} is disabled` };
  const selector = order.target?.pool?.nodeSelector ?? {};
  if (!matchesSelector(nodeLabels(node), selector)) {
    return { ok: false, reason: "NOT_IN_POOL", message: `node ${node.id}'s labels do not match the pool's selector` };
  }
  const caps = node.currentState?.kind.case === "node" ? node.currentState.kind.value.capabilities : undefined;
  // Not yet heard from: what it can do is unknown, and nothing it could refuse is sent there.
  if (!caps) return { ok: false, reason: "CAPABILITY_MISSING", message: `node ${node.id} has not reported its capabilities yet` };
  const kind = controllerOrderKind(order.type);
  if (!kind) return { ok: false, reason: "NOT_PERMITTED", message: `order type ${order.type} is not one this controller knows` };
  // The allow-lists first: a program not on it says so, rather than that command.<program> is missing.
  if (kind.queued === "on request") {
    try {
      checkPermitsOf(kind, { action: order.action } as CreateWorkOrderRequest, node.id, caps);
    } catch (e) {
      if (!isSkipperError(e)) throw e;
      return { ok: false, reason: "NOT_PERMITTED", message: e.message };
    }
  }
  const missing = missingCapabilities(caps, neededCapabilities(order));
  if (missing.length > 0) {
    return { ok: false, reason: "CAPABILITY_MISSING", message: `node ${node.id} lacks ${missing.join(", ")}` };
  }
  return { ok: true };
}

/**
 * The capabilities a pool order needs of its node: its type's (none can be named for a program
 * given by its path: its kind's permits, the allow-list, decide) and those it requires.
 */
export function neededCapabilities(order: WorkOrder): string[] {
  const own = orderCapability(order.type, order.action).name;
  return [...new Set([...(own ? [own] : []), ...(order.target?.requiredCapabilities ?? [])])];
}

/** True when the node's last judged liveness is online (a node that could ask for work now). */
export function isOnline(node: Resource): boolean {
  return node.currentState?.kind.case === "node" && node.currentState.kind.value.liveness === NodeLiveness.ONLINE;
}

/**
 * Why a pending pool order waits, judged against `nodes` (every live node): NO_ELIGIBLE_NODE with
 * what stops the pool's nodes when none online is eligible, else WAITING_FOR_CLAIM.
 */
export function poolWait(order: WorkOrder, nodes: readonly Resource[]): WorkOrderWait {
  const verdicts = nodes.map((n) => ({ node: n, verdict: poolEligibility(order, n) }));
  const eligible = verdicts.filter((v) => v.verdict.ok);
  const online = eligible.filter((v) => isOnline(v.node));
  if (online.length > 0) {
    return create(WorkOrderWaitSchema, {
      reason: "WAITING_FOR_CLAIM",
      message: `${online.length} eligible node(s) online; the first to ask claims it`,
      eligibleNodes: online.length,
    });
  }
  const why = new Map<string, number>();
  for (const v of verdicts) if (!v.verdict.ok) why.set(v.verdict.reason, (why.get(v.verdict.reason) ?? 0) + 1);
  if (eligible.length > 0) why.set("NODE_NOT_ONLINE", eligible.length);
  const parts = [...why].map(([reason, n]) => `${n} ${reason}`);
  const required = neededCapabilities(order);
  return create(WorkOrderWaitSchema, {
    reason: "NO_ELIGIBLE_NODE",
    message:
      `no online, enabled node of the pool${required.length > 0 ? ` holds ${required.join(", ")}` : ""}` +
      (parts.length > 0 ? ` (nodes: ${parts.join(", ")})` : " (no node is registered)"),
    eligibleNodes: 0,
  });
}

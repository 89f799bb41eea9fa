// What the controller knows of each work-order kind, one entry each, in a table the compiler
// checks for completeness (a kind of common/order-kinds.ts without an entry here does not build,
// and an ad-hoc kind must say how its action is checked: there is no default that accepts). Each
// entry says how CreateWorkOrder takes the kind: refused (the reconciler issues it, and why), or
// queued on request, with whether it names a tenant, the permission it needs, its action's
// request rules, what its node must permit, and what its events say of it.
import { Permission } from "../../gen/skipper/v1/access_pb.js";
import { ContainerOperation, type WorkOrderAction } from "../../gen/skipper/v1/order_action_pb.js";
import type { NodeCapabilities } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import type { ActionCase, ActionOfType, OrderType } from "../../common/order-kinds.js";
import {
  checkControlContainer,
  checkControlProcess,
  checkDeployContainer,
  checkDeployProcess,
  checkExecService,
  checkExecuteCommand,
  checkHealthCheck,
  checkReadLogs,
  checkRestartService,
  checkRollback,
  checkUploadFiles,
  checkWriteSticker,
  permitsCommand,
  permitsProcessSource,
} from "./action-checks.js";

/** The action message of member `C`. */
type ActionValue<C extends ActionCase> = Extract<WorkOrderAction["kind"], { case: C }>["value"];
/** The action message orders of type `T` carry. */
type ActionOf<T extends OrderType> = ActionOfType[T] extends ActionCase ? ActionValue<ActionOfType[T]> : never;

/** What its events and log lines may say of an order: names, never contents (file bodies, arguments, env values can hold secrets). */
export type OrderSummary = Record<string, string | string[]>;

/** A kind an operator queues with CreateWorkOrder. */
export interface AdHocKind<T extends OrderType> {
  readonly queued: "on request";
  /** Whether its order names a tenant: always, when the caller likes, or never (it is for a host). */
  readonly tenant: "required" | "optional" | "none";
  /** What the caller must hold to queue one (CreateWorkOrder itself needs OPERATE). */
  readonly permission: Permission;
  /** Its action's request rules (INVALID_REQUEST naming the field), or "no fields" when the action carries none. */
  readonly check: ((action: ActionOf<T>, req: CreateWorkOrderRequest) => void) | "no fields";
  /** What the target node must permit beyond taking orders (CONFLICT with a reason); absent: nothing more. */
  readonly permits?: (action: ActionOf<T>, nodeId: string, caps: NodeCapabilities | undefined) => void;
  /** What its work_order_created event and log line say of it beyond its type; absent: nothing more. */
  readonly summary?: (action: ActionOf<T>, order: WorkOrder) => OrderSummary;
}

/** A kind only the reconciler issues. */
export interface ReconcilerKind {
  readonly queued: "by the reconciler";
  /** What CreateWorkOrder answers a request for one. */
  readonly instead: string;
}

/** Every kind's controller facts. */
export const CONTROLLER_ORDER_KINDS: { readonly [T in OrderType]: AdHocKind<T> | ReconcilerKind } = {
  [WorkOrderType.DEPLOY_SERVICE]: {
    queued: "by the reconciler",
    instead: "change the desired state or call Apply",
  },
  [WorkOrderType.REMOVE_SERVICE]: {
    queued: "by the reconciler",
    instead: "change the desired state or call Apply",
  },
  [WorkOrderType.RESTART_SERVICE]: { queued: "on request", tenant: "required", permission: Permission.OPERATE, check: checkRestartService },
  [WorkOrderType.ROLLBACK]: {
    queued: "on request",
    tenant: "required",
    permission: Permission.OPERATE,
    check: checkRollback,
    summary: (a, o) => ({ resolved_from: a.resolvedFrom, spec_hash: o.desiredState?.specHash ?? "" }),
  },
  [WorkOrderType.HEALTH_CHECK]: { queued: "on request", tenant: "optional", permission: Permission.OPERATE, check: checkHealthCheck },
  [WorkOrderType.INSPECT]: { queued: "on request", tenant: "optional", permission: Permission.OPERATE, check: "no fields" },
  [WorkOrderType.EXECUTE_COMMAND]: {
    queued: "on request",
    tenant: "none",
    permission: Permission.OPERATE,
    check: checkExecuteCommand,
    permits: permitsCommand,
    summary: (a) => ({ program: a.command?.argv[0] ?? "" }),
  },
  [WorkOrderType.UPLOAD_FILES]: {
    queued: "on request",
    tenant: "optional",
    permission: Permission.OPERATE,
    check: checkUploadFiles,
    summary: (a) => ({ paths: a.files.map((f) => f.path) }),
  },
  [WorkOrderType.WRITE_STICKER]: { queued: "on request", tenant: "required", permission: Permission.OPERATE, check: checkWriteSticker },
  [WorkOrderType.READ_STICKER]: { queued: "on request", tenant: "required", permission: Permission.OPERATE, check: "no fields" },
  [WorkOrderType.DEPLOY_PROCESS]: {
    queued: "on request",
    tenant: "none",
    permission: Permission.OPERATE,
    check: checkDeployProcess,
    permits: permitsProcessSource,
    summary: (a) => ({ module: a.spec?.module ?? "", version: a.spec?.version ?? "" }),
  },
  [WorkOrderType.CONTROL_PROCESS]: {
    queued: "on request",
    tenant: "none",
    permission: Permission.OPERATE,
    check: checkControlProcess,
    summary: (a) => ({ module: a.module }),
  },
  [WorkOrderType.READ_LOGS]: { queued: "on request", tenant: "required", permission: Permission.OPERATE, check: checkReadLogs },
  // The node's agent finds the service's container itself (SERVICE_NOT_RUNNING when none runs):
  // like read_logs and restart_service, nothing the node reports decides it beforehand.
  [WorkOrderType.EXEC_SERVICE]: {
    queued: "on request",
    tenant: "required",
    permission: Permission.OPERATE,
    check: checkExecService,
    // The program and the service; never its arguments, env values or stdin (they may hold secrets).
    summary: (a) => ({ service: a.service, program: a.argv[0] ?? "" }),
  },
  // A container of the host, outside any tenant's project (like deploy_process).
  [WorkOrderType.DEPLOY_CONTAINER]: {
    queued: "on request",
    tenant: "none",
    permission: Permission.OPERATE,
    check: checkDeployContainer,
    // Its name, image and digest; never env values, args or labels (they may hold secrets).
    summary: (a) => ({ container: a.spec?.name ?? "", image: a.spec?.image ?? "", digest: a.spec?.digest ?? "" }),
  },
  [WorkOrderType.CONTROL_CONTAINER]: {
    queued: "on request",
    tenant: "none",
    permission: Permission.OPERATE,
    check: checkControlContainer,
    summary: (a) => ({ container: a.name, operation: ContainerOperation[a.operation] ?? String(a.operation) }),
  },
  [WorkOrderType.DELIVER_WEBHOOK]: {
    queued: "by the reconciler",
    instead: "the webhook worker queues deliveries of a subscription with a node_selector (CreateWebhook)",
  },
  [WorkOrderType.UPDATE_AGENT]: {
    queued: "by the reconciler",
    instead:
      "write an agent_update resource naming the agent_version the nodes should run (skipper apply -f, see skipper agent-version add --help)",
  },
};

/** The controller's facts of an order type; undefined for UNSPECIFIED or a number the contract does not have. */
export function controllerOrderKind(type: WorkOrderType): AdHocKind<OrderType> | ReconcilerKind | undefined {
  return (CONTROLLER_ORDER_KINDS as Partial<Record<WorkOrderType, AdHocKind<OrderType> | ReconcilerKind>>)[type];
}

// The kind's functions take its own action message; called with an order's action of that kind.
type Untyped = {
  check: ((action: unknown, req: CreateWorkOrderRequest) => void) | "no fields";
  permits?: (action: unknown, nodeId: string, caps: NodeCapabilities | undefined) => void;
  summary?: (action: unknown, order: WorkOrder) => OrderSummary;
};

/** Runs an ad-hoc kind's action rules on a request whose action member is the kind's. */
export function checkActionOf(kind: AdHocKind<OrderType>, req: CreateWorkOrderRequest): void {
  const check = (kind as unknown as Untyped).check;
  if (check !== "no fields") check(req.action?.kind.value, req);
}

/** Runs an ad-hoc kind's node permits on a request whose action member is the kind's. */
export function checkPermitsOf(
  kind: AdHocKind<OrderType>,
  req: CreateWorkOrderRequest,
  nodeId: string,
  caps: NodeCapabilities | undefined,
): void {
  (kind as unknown as Untyped).permits?.(req.action?.kind.value, nodeId, caps);
}

/** What an order's events say of it (its kind's summary; nothing for a kind without one). */
export function summaryOf(order: WorkOrder): OrderSummary {
  const kind = controllerOrderKind(order.type);
  if (kind?.queued !== "on request" || order.action?.kind.case === undefined) return {};
  return (kind as unknown as Untyped).summary?.(order.action.kind.value, order) ?? {};
}

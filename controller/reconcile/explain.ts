// ExplainResource: "why isn't this converged?" as a causal chain, oldest first: the desired
// state at its revision, the work orders issued for it (with claim and result), what the node
// last observed, and the verdict, plus the events that tie them together. Read-only. What it shows
// is redacted like a snapshot: the resource, the orders' specs, node-reported messages, events.
import { resultLine } from "../../common/failure-cause.js";
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ConvergenceSchema, ConvergenceStatus, type Convergence, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { ExplainStepKind, ExplainStepSchema, type ExplainStep } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import type { Store } from "../store/store.js";
import { eachEvent, eachWorkOrder } from "../store/each-page.js";
import { tenantOf } from "../../common/resource-kinds.js";
import { dependentsOf } from "../resources/references.js";
import { orderKind } from "../../common/order-kinds.js";
import type { ResourceType } from "../../common/ids.js";
import { tenantStatusOf } from "./target-records.js";
import { type Rollout, RolloutNodeState, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { holdOf } from "../rollouts/rollout-holds.js";
import { rolloutOf } from "../rollouts/rollout-records.js";
import { redact, redactText } from "../../common/logging/redact.js";
import { publicSecret } from "../resources/secret-values.js";

const ORDERS_PER_TARGET = 3;
const MAX_EVENTS = 100;

export interface Explanation {
  /** The resource explained, redacted. */
  resource: Resource;
  convergence: Convergence;
  steps: ExplainStep[];
  workOrders: WorkOrder[];
  events: Event[];
}

/** Builds the chain behind a resource's convergence status. */
export async function explainResource(store: Store, r: Resource): Promise<Explanation> {
  const steps: ExplainStep[] = [];
  type StepExtra = { nodeId?: string; workOrderId?: string; resourceVersion?: string; code?: string };
  const step = (kind: ExplainStepKind, at: Timestamp | undefined, summary: string, extra: StepExtra = {}) =>
    steps.push(create(ExplainStepSchema, { kind, at, summary: redactText(summary), ...extra }));
  step(
    ExplainStepKind.DESIRED,
    r.updatedAt,
    r.deletion
      ? `deleted (revision ${r.metadata?.resourceVersion ?? ""})`
      : `desired state at revision ${r.metadata?.resourceVersion ?? ""}`,
    {
      resourceVersion: r.metadata?.resourceVersion ?? "",
    },
  );

  const tenantId = r.resourceType === "tenant" ? r.id : (tenantOf(r) ?? "");
  const tenant = tenantId ? await store.getResource("tenant", tenantId, { includeDeleted: true }) : undefined;
  const targets = tenant ? tenantStatusOf(tenant).targets : [];
  const nodeIds =
    r.resourceType === "service"
      ? targets.filter((t) => t.serviceIds.includes(r.id)).map((t) => t.nodeId)
      : r.resourceType === "node"
        ? [r.id]
        : r.resourceType === "deployment" && r.desiredState?.kind.case === "deployment"
          ? [r.desiredState.kind.value.nodeId]
          : targets.map((t) => t.nodeId);

  const orders: WorkOrder[] = [];
  for (const nodeId of nodeIds) orders.push(...(await latestOrders(store, nodeId, tenantId)));
  orders.sort((a, b) => time(a.createdAt) - time(b.createdAt));
  for (const o of orders) {
    const type = (WorkOrderType[o.type] ?? "unknown").toLowerCase();
    const reason = o.metadata?.annotations.reason ?? "";
    step(
      ExplainStepKind.WORK_ORDER,
      o.createdAt,
      `${type} order for node ${o.target?.nodeId ?? ""}${reason ? ` (${reason})` : ""}, spec ${(o.desiredState?.specHash ?? "").slice(0, 12)}`,
      {
        nodeId: o.target?.nodeId ?? "",
        workOrderId: o.id,
      },
    );
    if (o.claim)
      step(ExplainStepKind.CLAIM, o.claim.claimedAt, `claimed by node ${o.claim.nodeId}`, { nodeId: o.claim.nodeId, workOrderId: o.id });
    if (o.result)
      step(ExplainStepKind.RESULT, o.finishedAt, resultLine(o.result.code, o.result.message, o.result.cause), {
        nodeId: o.target?.nodeId ?? "",
        workOrderId: o.id,
        code: o.result.code,
      });
  }

  for (const nodeId of nodeIds) {
    const node = await store.getResource("node", nodeId, { includeDeleted: true });
    const st = node?.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
    if (!st) {
      step(ExplainStepKind.OBSERVED, undefined, `node ${nodeId} has not reported yet`, { nodeId, code: "NOT_REPORTED" });
      continue;
    }
    const project = tenantId ? st.projects.find((p) => (p.tenantId || p.projectName) === tenantId) : undefined;
    const services = project?.services.filter((s) => r.resourceType !== "service" || s.service === serviceName(r)) ?? [];
    const summary = project
      ? `node ${nodeId} runs spec ${project.specHash.slice(0, 12)}: ${services.map((s) => `${s.service} ${s.state}`).join(", ") || "no services"}`
      : tenantId
        ? `node ${nodeId} reports no project for ${tenantId}`
        : `node ${nodeId} last heartbeat`;
    step(ExplainStepKind.OBSERVED, st.lastHeartbeatAt, summary, { nodeId, code: livenessName(st.liveness) });
  }

  const rolloutId = tenant ? tenantStatusOf(tenant).rolloutId : "";
  const rollout = rolloutId ? rolloutOf(await store.getResource("rollout", rolloutId)) : undefined;
  if (rollout) {
    step(ExplainStepKind.ROLLOUT, rollout.updatedAt, rolloutSummary(rollout), { code: RolloutStatus[rollout.status] ?? "" });
    const wanted = new Set(nodeIds);
    for (const n of rollout.waves.flatMap((w) => w.nodes)) {
      if (!wanted.has(n.nodeId) || n.state === RolloutNodeState.DONE) continue;
      const state = RolloutNodeState[n.state] ?? "";
      const why = n.state === RolloutNodeState.WAITING ? (holdOf(rollout, n.nodeId) ?? "") : n.reason;
      step(
        ExplainStepKind.ROLLOUT,
        n.finishedAt ?? n.startedAt ?? rollout.updatedAt,
        `node ${n.nodeId} is ${state.toLowerCase()}${why ? `: ${why}` : ""}`,
        {
          nodeId: n.nodeId,
          workOrderId: n.rollbackWorkOrderId || n.workOrderId,
          code: state,
        },
      );
    }
  }

  const convergence = r.convergence ?? (await derivedConvergence(store, r));
  step(ExplainStepKind.VERDICT, convergence.checkedAt, `${ConvergenceStatus[convergence.status] ?? "UNKNOWN"}: ${convergence.message}`, {
    nodeId: convergence.nodeId,
    workOrderId: convergence.workOrderId,
    code: ConvergenceStatus[convergence.status] ?? "",
  });

  const events = await linkedEvents(store, r, tenantId, orders);
  return {
    resource: redact(publicSecret(r)),
    convergence: redact(convergence),
    steps,
    workOrders: redact([...orders].reverse()),
    events: redact(events),
  };
}

/** One line for a rollout: its status and each wave's progress. */
function rolloutSummary(r: Rollout): string {
  const waves = r.waves.map((w) => {
    const done = w.nodes.filter((n) => n.state === RolloutNodeState.DONE).length;
    const open = r.status === RolloutStatus.PROGRESSING || r.status === RolloutStatus.PAUSED;
    const gate = open && w.requirePromote && !w.promoted && !w.startedAt ? ", waits for a promote" : "";
    return `${w.name} ${done}/${w.nodes.length} done${gate}`;
  });
  const status = (RolloutStatus[r.status] ?? "").toLowerCase();
  return `rollout ${r.id} ${status} (spec ${r.fromSpecHash.slice(0, 12)} -> ${r.toSpecHash.slice(0, 12)}): ${waves.join("; ")}${r.message ? `. ${r.message}` : ""}`;
}

// Resources the reconciler does not track themselves (limits, networks, volumes, nodes) are as
// converged as the services that use them.
async function derivedConvergence(store: Store, r: Resource): Promise<Convergence> {
  if (r.resourceType === "node") {
    const st = r.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
    const offline = st?.liveness === 3;
    return create(ConvergenceSchema, {
      status: offline ? ConvergenceStatus.NODE_OFFLINE : ConvergenceStatus.CONVERGED,
      message: st ? `node is ${livenessName(st.liveness).toLowerCase()}` : "node has never sent a heartbeat",
      nodeId: r.id,
      checkedAt: st?.livenessChangedAt,
    });
  }
  const users = (await dependentsOf(store, r.resourceType as ResourceType, r.id)).filter((d) => d.resourceType === "service");
  const blocked = users.find((u) => u.convergence && u.convergence.status !== ConvergenceStatus.CONVERGED);
  if (blocked) {
    const c = blocked.convergence!;
    return create(ConvergenceSchema, {
      status: c.status,
      nodeId: c.nodeId,
      workOrderId: c.workOrderId,
      checkedAt: c.checkedAt,
      message: `used by service ${blocked.id}: ${c.message}`,
    });
  }
  return create(ConvergenceSchema, {
    status: ConvergenceStatus.CONVERGED,
    message: users.length > 0 ? `enforced through ${users.map((u) => `service ${u.id}`).join(", ")}, all converged` : "nothing uses it",
    checkedAt: timestampFromDate(new Date()),
  });
}

async function linkedEvents(store: Store, r: Resource, tenantId: string, orders: WorkOrder[]): Promise<Event[]> {
  const seen = new Map<string, Event>();
  const add = (es: Event[]) => es.forEach((e) => seen.set(e.id, e));
  add(await newestEvents(store, { resourceId: r.id }, MAX_EVENTS));
  if (tenantId && tenantId !== r.id) add(await newestEvents(store, { resourceId: tenantId, type: "drift_detected" }, 10));
  for (const o of orders) add((await store.listEvents({ workOrderId: o.id, pageSize: 100 })).items);
  return [...seen.values()].sort((a, b) => time(a.timestamp) - time(b.timestamp)).slice(-MAX_EVENTS);
}

function serviceName(r: Resource): string {
  const v = r.desiredState?.kind.case === "service" ? r.desiredState.kind.value.composeService : "";
  return v || r.id;
}

function livenessName(l: number): string {
  return ["UNKNOWN", "ONLINE", "DEGRADED", "OFFLINE"][l] ?? "UNKNOWN";
}

function time(t: Timestamp | undefined): number {
  return t ? timestampDate(t).getTime() : 0;
}

// The newest ORDERS_PER_TARGET orders of the node (for the tenant, when given) that change
// something: listings run oldest first, so the whole history is walked as summaries (no record
// is read) and only the ones kept are read in full.
async function latestOrders(store: Store, nodeId: string, tenantId: string): Promise<WorkOrder[]> {
  const newest: WorkOrder[] = [];
  for await (const o of eachWorkOrder(store, { nodeId, tenantId: tenantId || undefined, summaryOnly: true })) {
    // Orders that only read a host (a dashboard following logs queues one every 2 s) move
    // nothing toward the desired state: the causal chain leaves them out.
    if (orderKind(o.type)?.readsOnly) continue;
    newest.push(o);
    if (newest.length > ORDERS_PER_TARGET) newest.shift();
  }
  const whole = await Promise.all(newest.map((o) => store.getWorkOrder(o.id)));
  return whole.filter((o): o is WorkOrder => o !== undefined);
}

// Look-backs tried in turn for the newest events: most resources have enough within minutes, and
// a quiet one's whole history is short.
const LOOK_BACK_MS = [5 * 60_000, 3_600_000, 86_400_000, 30 * 86_400_000];

// The newest `n` events matching `filter`. Listings run oldest first, so a first page of a long
// history holds its oldest events: this walks a growing window back from now (whole, page by
// page) until it holds n, and the whole history last.
async function newestEvents(store: Store, filter: { resourceId: string; type?: string }, n: number): Promise<Event[]> {
  const now = Date.now();
  for (const back of [...LOOK_BACK_MS, undefined]) {
    const kept: Event[] = [];
    for await (const e of eachEvent(store, { ...filter, since: back === undefined ? undefined : new Date(now - back) })) {
      kept.push(e);
      if (kept.length > n) kept.shift();
    }
    if (kept.length >= n || back === undefined) return kept;
  }
  return [];
}

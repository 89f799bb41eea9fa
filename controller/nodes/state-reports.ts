// A node's reports of observed state. A node may report on itself and on the resources its own
// work order touched (the order's tenant, deployment and services), nothing else; a node id in a
// report must be its own, statuses are bounded as heartbeats are (report-checks.ts); every report
// is checked, and must exist, before any is written. What the controller derives itself (a
// tenant's target records, a node's liveness and last heartbeat) is kept whatever a report says.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ResourceStateReport } from "../../gen/skipper/v1/node_service_pb.js";
import { ResourceStatusSchema, type Resource, type ResourceStatus } from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import { forbidden, invalid, notFound } from "../base/errors.js";
import { checkId, checkResourceType } from "../base/id-checks.js";
import { recordEvents } from "../events/event-recorder.js";
import { checkSpecKind, checkStatusKind } from "../resources/resource-rules.js";
import type { Store } from "../store/store.js";
import { tenantOf } from "../../common/resource-kinds.js";
import { checkBounded, checkObservations, MAX_REPORT_ENTRIES } from "./report-checks.js";
import { redact } from "../../common/logging/redact.js";

export interface ReportDeps {
  store: Store;
  now: () => Date;
}

/** Checks every report of `nodeId` (about `order`, when it names one) and refuses the lot on the first bad one. */
export function checkReports(nodeId: string, order: WorkOrder | undefined, reports: ResourceStateReport[]): void {
  const allowed = new Set<string>([`node/${nodeId}`]);
  if (order) {
    allowed.add(`tenant/${order.target?.tenantId ?? ""}`);
    allowed.add(`deployment/${order.desiredState?.deploymentId ?? ""}`);
    for (const s of order.desiredState?.serviceIds ?? []) allowed.add(`service/${s}`);
  }
  if (reports.length > MAX_REPORT_ENTRIES)
    throw invalid(`reports has ${reports.length} entries, more than ${MAX_REPORT_ENTRIES}`, { field: "reports", max: MAX_REPORT_ENTRIES });
  for (const [i, report] of reports.entries()) {
    const type = checkResourceType(report.resourceType, `reports[${i}].resource_type`);
    const id = checkId(report.id, `reports[${i}].id`);
    if (!allowed.has(`${type}/${id}`)) {
      throw forbidden(`node ${nodeId} may not report state of ${type} ${id}`, { field: `reports[${i}]` });
    }
    checkStatusKind(type, report.currentState, `reports[${i}].current_state`);
    if (report.lastAppliedState?.kind.case) checkSpecKind(type, report.lastAppliedState, `reports[${i}].last_applied_state`);
    if (!report.currentState?.kind.case && !report.lastAppliedState?.kind.case) {
      throw invalid("a report must carry current_state or last_applied_state", { field: `reports[${i}]` });
    }
    checkClaims(nodeId, order, report, `reports[${i}]`);
  }
}

// What a report may claim: bounded statuses, its own node id, its order's tenant.
function checkClaims(nodeId: string, order: WorkOrder | undefined, report: ResourceStateReport, at: string): void {
  const status = report.currentState;
  if (status) checkBounded(ResourceStatusSchema, status, `${at}.current_state`);
  const own = (id: string, field: string) => {
    if (id !== "" && id !== nodeId) throw forbidden(`node ${nodeId} may not report for node ${id}`, { field });
  };
  if (status?.kind.case === "node") checkObservations(status.kind.value, `${at}.current_state.node.`);
  if (status?.kind.case === "tenant" || status?.kind.case === "service")
    own(status.kind.value.nodeId, `${at}.current_state.${status.kind.case}.node_id`);
  const applied = report.lastAppliedState?.kind;
  if (applied?.case === "deployment") {
    own(applied.value.nodeId, `${at}.last_applied_state.deployment.node_id`);
    if (applied.value.tenantId !== "" && applied.value.tenantId !== order?.target?.tenantId)
      throw forbidden(`node ${nodeId} may not report a deployment of another tenant`, {
        field: `${at}.last_applied_state.deployment.tenant_id`,
      });
  }
}

/** Checks, then writes each report with its resource_state_reported event; returns the updated resources. */
export async function recordReports(
  deps: ReportDeps,
  nodeId: string,
  order: WorkOrder | undefined,
  reports: ResourceStateReport[],
  trace: Trace,
): Promise<Resource[]> {
  checkReports(nodeId, order, reports);
  // Every resource reported on must exist (a tombstone counts: a removal's report lands on its
  // deleted tenant) before any report is written; a deployment the order names may have been
  // retired since, and then the batch is refused whole.
  for (const report of reports) {
    const type = checkResourceType(report.resourceType);
    if (!(await deps.store.getResource(type, report.id, { includeDeleted: true }))) throw notFound(type, report.id);
  }
  const updated: Resource[] = [];
  for (const report of reports) {
    const type = checkResourceType(report.resourceType);
    const r = await deps.store.updateResource(type, report.id, (cur) => {
      if (report.currentState?.kind.case) cur.currentState = keepDerived(cur.currentState, report.currentState);
      // A deployment is a record of what was sent: like its desired state, kept without secrets.
      if (report.lastAppliedState?.kind.case)
        cur.lastAppliedState = type === "deployment" ? redact(report.lastAppliedState) : report.lastAppliedState;
      cur.updatedAt = timestampFromDate(deps.now());
      return cur;
    });
    updated.push(r);
    await recordEvents(deps.store, [
      {
        type: "resource_state_reported",
        requestId: trace.requestId,
        correlationId: order?.correlationId ?? trace.correlationId,
        traceparent: trace.traceparent,
        actor: trace.actor,
        resourceType: type,
        resourceId: report.id,
        tenantId: tenantOf(r),
        nodeId,
        workOrderId: order?.id,
      },
    ]);
  }
  return updated;
}

// What the controller derives itself stays as it derived it, whatever a report says: a tenant's
// per-node target records and latest rollout (the reconciler's), a node's liveness, last
// heartbeat and agent counters (the heartbeats').
function keepDerived(stored: ResourceStatus | undefined, reported: ResourceStatus): ResourceStatus {
  const was = stored?.kind;
  const now = reported.kind;
  if (now.case === "tenant") {
    now.value.targets = was?.case === "tenant" ? was.value.targets : [];
    now.value.rolloutId = was?.case === "tenant" ? was.value.rolloutId : "";
  }
  if (now.case === "node") {
    const prev = was?.case === "node" ? was.value : undefined;
    now.value.liveness = prev?.liveness ?? now.value.liveness;
    now.value.livenessChangedAt = prev?.livenessChangedAt;
    now.value.lastHeartbeatAt = prev?.lastHeartbeatAt;
    now.value.heartbeatIntervalMs = prev?.heartbeatIntervalMs ?? 0n;
    now.value.agentCounters = prev?.agentCounters;
    now.value.agentCountersAt = prev?.agentCountersAt;
    now.value.projectsObservedAt = prev?.projectsObservedAt;
  }
  return reported;
}

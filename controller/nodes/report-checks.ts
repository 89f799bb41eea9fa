// What a node may say about itself, checked before anything is written (heartbeats, and its state
// reports): every list and map at most MAX_REPORT_ENTRIES entries and every string at most
// MAX_REPORT_CHARS characters, walked over the message so a field added to the contract is
// bounded too; labels that are label keys and values; projects named by ids; a
// heartbeat interval within bounds. Bad input is refused whole (INVALID_REQUEST naming the
// field). An agent's counters are held tighter (checkAgentCounters: the shapes of
// common/agent-counter-rules.ts, one entry per order type and code). Which tenants' projects count is the reconciler's business: it trusts an observation
// only where the tenant is placed or was sent an order (reconcile/tenant-pass.ts).
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import { isReflectMessage, reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { HeartbeatRequestSchema, type HeartbeatRequest } from "../../gen/skipper/v1/node_service_pb.js";
import type { AgentCounters, NodeStatus } from "../../gen/skipper/v1/resource_pb.js";
import { isBootId, isCounterCode, isOrderTypeName, MAX_COUNT, MAX_ORDER_COUNTS } from "../../common/agent-counter-rules.js";
import { isHeartbeatInterval, MAX_HEARTBEAT_INTERVAL_MS, MIN_HEARTBEAT_INTERVAL_MS } from "../../common/heartbeat-interval.js";
import { isValidId } from "../../common/ids.js";
import { isCapabilityName } from "../../common/node-capabilities.js";
import { invalid } from "../base/errors.js";
import { checkSelector } from "../domain/label-selector.js";

/** Entries a list or map in a node's report may hold. */
export const MAX_REPORT_ENTRIES = 1000;
/** Characters a string in a node's report may hold. */
export const MAX_REPORT_CHARS = 4096;

/** Checks a heartbeat; throws INVALID_REQUEST naming the first field out of bounds. */
export function checkHeartbeat(req: HeartbeatRequest): void {
  checkBounded(HeartbeatRequestSchema, req, "");
  const ms = Number(req.heartbeatIntervalMs);
  if (ms !== 0 && !isHeartbeatInterval(ms)) {
    throw invalid(
      `heartbeat_interval_ms must be between ${MIN_HEARTBEAT_INTERVAL_MS} and ${MAX_HEARTBEAT_INTERVAL_MS} (0: unchanged), got ${req.heartbeatIntervalMs}`,
      { field: "heartbeat_interval_ms", min: MIN_HEARTBEAT_INTERVAL_MS, max: MAX_HEARTBEAT_INTERVAL_MS },
    );
  }
  checkObservations(req, "");
  const badCapability = req.capabilities?.capabilities.findIndex((c) => !isCapabilityName(c)) ?? -1;
  if (badCapability >= 0) {
    const field = `capabilities.capabilities[${badCapability}]`;
    throw invalid(`${field} is not a capability name (e.g. compose.deploy)`, { field });
  }
  if (req.agentCounters) checkAgentCounters(req.agentCounters, "agent_counters");
}

/** Checks an agent's counters (AgentCounters); throws INVALID_REQUEST naming the first field out of bounds. */
export function checkAgentCounters(c: AgentCounters, at: string): void {
  if (!isBootId(c.bootId)) throw invalid(`${at}.boot_id must be 8-64 characters of [A-Za-z0-9-]`, { field: `${at}.boot_id` });
  if (c.orders.length > MAX_ORDER_COUNTS)
    throw invalid(`${at}.orders has ${c.orders.length} entries, more than ${MAX_ORDER_COUNTS}`, {
      field: `${at}.orders`,
      max: MAX_ORDER_COUNTS,
    });
  const counts: [string, bigint][] = [
    ["heartbeats_acknowledged", c.heartbeatsAcknowledged],
    ["heartbeat_failures", c.heartbeatFailures],
    ["claims_refused", c.claimsRefused],
    ["leases_lost", c.leasesLost],
    ["report_retries", c.reportRetries],
    ["watch_reconnects", c.watchReconnects],
    ["session_reconnects", c.sessionReconnects],
    ["session_fallbacks", c.sessionFallbacks],
  ];
  const pairs = new Set<string>();
  c.orders.forEach((o, i) => {
    const field = `${at}.orders[${i}]`;
    if (!isOrderTypeName(o.type)) throw invalid(`${field}.type must be 1-64 characters of [a-z0-9_]`, { field: `${field}.type` });
    if (!isCounterCode(o.code)) throw invalid(`${field}.code must be 1-64 characters of [A-Z0-9_]`, { field: `${field}.code` });
    const pair = `${o.type}/${o.code}`;
    if (pairs.has(pair)) throw invalid(`${field} repeats type ${o.type} and code ${o.code}`, { field });
    pairs.add(pair);
    counts.push([`orders[${i}].count`, o.count]);
  });
  for (const [name, n] of counts) {
    if (n > MAX_COUNT) throw invalid(`${at}.${name} is more than ${MAX_COUNT}`, { field: `${at}.${name}`, max: Number(MAX_COUNT) });
  }
}

/** Checks what a node reports as its own status (labels and projects; bounds are the caller's walk). */
export function checkObservations(s: Pick<NodeStatus, "labels" | "projects">, path: string): void {
  checkSelector(s.labels, `${path}labels`);
  s.projects.forEach((p, i) => {
    const at = `${path}projects[${i}]`;
    if (p.tenantId !== "" && !isValidId(p.tenantId)) throw invalid(`${at}.tenant_id is not an id`, { field: `${at}.tenant_id` });
    if (p.workOrderId !== "" && !isValidId(p.workOrderId))
      throw invalid(`${at}.work_order_id is not an id`, { field: `${at}.work_order_id` });
    if (!isValidId(p.projectName)) throw invalid(`${at}.project_name is not a project name`, { field: `${at}.project_name` });
  });
}

/** Checks that every list, map and string in `message` is within the report bounds. */
export function checkBounded<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>, path: string): void {
  walk(reflect(schema, message), path);
}

function walk(r: ReflectMessage, path: string): void {
  for (const field of r.fields) {
    if (!r.isSet(field)) continue;
    const at = path === "" ? field.name : `${path}.${field.name}`;
    switch (field.fieldKind) {
      case "scalar":
        value(r.get(field), at);
        break;
      case "message":
        walk(r.get(field), at);
        break;
      case "list": {
        const list = r.get(field);
        entries(list.size, at);
        let i = 0;
        for (const v of list) value(v, `${at}[${i++}]`);
        break;
      }
      case "map": {
        const map = r.get(field);
        entries(map.size, at);
        for (const [k, v] of map) {
          value(k, `${at} key`);
          value(v, `${at}.${String(k).slice(0, 64)}`);
        }
        break;
      }
      default:
        break;
    }
  }
}

function entries(n: number, at: string): void {
  if (n > MAX_REPORT_ENTRIES)
    throw invalid(`${at} has ${n} entries, more than ${MAX_REPORT_ENTRIES}`, { field: at, max: MAX_REPORT_ENTRIES });
}

function value(v: unknown, at: string): void {
  if (typeof v === "string" && v.length > MAX_REPORT_CHARS)
    throw invalid(`${at} is longer than ${MAX_REPORT_CHARS} characters`, { field: at, max: MAX_REPORT_CHARS });
  else if (isReflectMessage(v)) walk(v, at);
}

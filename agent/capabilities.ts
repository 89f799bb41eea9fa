// The typed capabilities this agent reports (NodeCapabilities.capabilities, vocabulary in
// common/node-capabilities.ts), from what it really can do here: what the host probe found (the
// engine, Compose, systemd), its flags (allowed commands and process sources, the proxy), and its
// executor table (a capability whose orders it has no executor for is not claimed).
import type { NodeCapabilities } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { derivedCapabilities } from "../common/node-capabilities.js";
import { executorFor } from "./executors/executor-table.js";
import { executors } from "./executors/registry.js";
import { systemdUsable } from "./process/systemd.js";

// The order types each capability's orders run as: one without an executor is not reported.
const NEEDS: Record<string, WorkOrderType[]> = {
  "compose.deploy": [WorkOrderType.DEPLOY_SERVICE, WorkOrderType.REMOVE_SERVICE, WorkOrderType.RESTART_SERVICE],
  "compose.rollback": [WorkOrderType.ROLLBACK],
  "container.deploy": [WorkOrderType.DEPLOY_CONTAINER, WorkOrderType.CONTROL_CONTAINER],
  "process.deploy": [WorkOrderType.DEPLOY_PROCESS, WorkOrderType.CONTROL_PROCESS],
  "process.systemd": [WorkOrderType.DEPLOY_PROCESS],
};

/**
 * What this agent can do on its host: `caps` as the probe and the flags fill it; `hasExecutor`
 * says whether the agent runs an order type. Terminals go through the engine's exec; systemd
 * supervises only when the agent may write units (root).
 */
export function agentCapabilities(caps: NodeCapabilities, hasExecutor = runsHere): string[] {
  const out = derivedCapabilities(caps).filter((c) => (NEEDS[c] ?? []).every(hasExecutor));
  if (caps.dockerAvailable) out.push("exec.terminal");
  return out.filter((c) => c !== "process.systemd" || systemdUsable()).sort();
}

let table: ReturnType<typeof executors> | undefined;

/** Whether this agent's executor table runs `type`. */
function runsHere(type: WorkOrderType): boolean {
  table ??= executors();
  return executorFor(table, type) !== undefined;
}

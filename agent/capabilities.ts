// The typed capabilities this agent reports (NodeCapabilities.capabilities, vocabulary in
// common/node-capabilities.ts), from what it really can do here: what the host probe found (the
// engine, Compose, systemd), its flags (allowed commands and process sources, the proxy), and its
// executor table (a capability whose orders it has no executor for is not claimed: a relay's SSH
// node, whose table refuses host files and probes, does not report host.files or host.probe).
import type { NodeCapabilities } from "../gen/skipper/v1/resource_pb.js";
import type { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { derivedCapabilities, orderTypesNeeding } from "../common/node-capabilities.js";
import { executorFor } from "./executors/executor-table.js";
import { executors } from "./executors/registry.js";
import { systemdUsable } from "./process/systemd.js";

// A capability that refines another (systemd supervision of process modules) goes with it.
const REFINES: Record<string, string> = { "process.systemd": "process.deploy" };

// Whether the agent runs every order type that needs capability `c` (common/node-capabilities.ts
// ORDER_CAPABILITIES): one it lacks an executor for is not reported, so no order of it is routed here.
function runsAll(c: string, hasExecutor: (type: WorkOrderType) => boolean): boolean {
  return orderTypesNeeding(REFINES[c] ?? c).every(hasExecutor);
}

/**
 * What this agent can do on its host: `caps` as the probe and the flags fill it; `hasExecutor`
 * says whether the agent runs an order type; `supervised`, whether it runs under skippy-updater.
 * Terminals go through the engine's exec; systemd supervises only when the agent may write units
 * (root); the agent switches its own version only under the updater (without it, update_agent is
 * refused with UPDATER_ABSENT).
 */
export function agentCapabilities(caps: NodeCapabilities, hasExecutor = runsHere, supervised = false): string[] {
  const out = derivedCapabilities(caps).filter((c) => runsAll(c, hasExecutor));
  if (caps.dockerAvailable) out.push("exec.terminal");
  // Every agent can POST from its host; an SSH node's table refuses deliver_webhook, so it does not.
  if (runsAll("webhook.deliver", hasExecutor)) out.push("webhook.deliver");
  if (supervised && runsAll("agent.update", hasExecutor)) out.push("agent.update");
  return out.filter((c) => c !== "process.systemd" || systemdUsable()).sort();
}

let table: ReturnType<typeof executors> | undefined;

/** Whether this agent's executor table runs `type`. */
function runsHere(type: WorkOrderType): boolean {
  table ??= executors();
  return executorFor(table, type) !== undefined;
}

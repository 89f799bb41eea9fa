// A node's typed capabilities: what its agent can do on its host, by name (compose.deploy,
// process.systemd, command.uptime, ...). The agent reports them (NodeCapabilities.capabilities);
// placement and work orders may require them. One vocabulary for both programs, and the rule that
// derives them from the older fields for an agent that reports none, so nothing it could run is
// refused for want of a name.
import type { WorkOrderAction } from "../gen/skipper/v1/order_action_pb.js";
import { ComposeVariant, type NodeCapabilities } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { OrderType } from "./order-kinds.js";

/** The capability names, each with what it means. `command.<program>` is one per allowed program. */
export const CAPABILITY_MEANINGS = {
  "compose.deploy": "deploy, remove and restart Compose projects (an engine and Compose answer)",
  "compose.rollback": "roll a Compose project back to an earlier spec",
  "container.deploy": "run single containers outside Compose (an engine answers)",
  "process.deploy": "install and run process modules (the agent allows some process source)",
  "process.systemd": "run process modules under systemd",
  "proxy.haproxy": "drive an HAProxy for tenants' routes",
  "exec.terminal": "open terminals in containers (the engine's exec)",
  "engine.inspect": "report the engine's facts, the projects the agent manages and their images (inspect)",
  "host.probe": "run a health check's probes from the host (health_check)",
  "host.files": "write files on the host and read them back (upload_files, a tenant's version sticker)",
  "webhook.deliver": "deliver webhooks' events from the host to endpoints it reaches (deliver_webhook)",
  "agent.update": "switch its own agent to another version under skippy-updater (update_agent)",
} as const;

/** A fixed capability name. */
export type CapabilityName = keyof typeof CAPABILITY_MEANINGS;

/** The prefix of the capability an allowed program gives: command.<program>. */
export const COMMAND_CAPABILITY = "command.";

// Lowercase dotted words; a command's part may hold what a program name holds (not "/" or spaces).
const NAME = /^[a-z][a-z0-9_-]{0,31}(\.[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,126})+$/;

/** True when `name` is a well-formed capability name (it need not be one the vocabulary lists). */
export function isCapabilityName(name: string): boolean {
  return name.length <= 160 && NAME.test(name);
}

/** The capability an allowed program gives, or undefined for one that cannot be named (a path). */
export function commandCapability(program: string): string | undefined {
  const name = COMMAND_CAPABILITY + program;
  return isCapabilityName(name) ? name : undefined;
}

/**
 * The capability each order type's orders need of the node that runs them: the one that names its
 * executor there. EXECUTE_COMMAND's is per program (command.<program>: orderCapability). The kinds
 * of a tenant's Compose project (its restart, logs, exec) go with what deployed it. A pool order
 * is offered only to nodes holding its type's capability (controller/dispatch/pool-eligibility.ts),
 * and an agent reports a capability only when it runs every type that needs it
 * (agent/capabilities.ts): one table for both.
 */
export const ORDER_CAPABILITIES = {
  [WorkOrderType.DEPLOY_SERVICE]: "compose.deploy",
  [WorkOrderType.REMOVE_SERVICE]: "compose.deploy",
  [WorkOrderType.RESTART_SERVICE]: "compose.deploy",
  [WorkOrderType.ROLLBACK]: "compose.rollback",
  [WorkOrderType.HEALTH_CHECK]: "host.probe",
  [WorkOrderType.INSPECT]: "engine.inspect",
  [WorkOrderType.EXECUTE_COMMAND]: COMMAND_CAPABILITY,
  [WorkOrderType.UPLOAD_FILES]: "host.files",
  [WorkOrderType.WRITE_STICKER]: "host.files",
  [WorkOrderType.READ_STICKER]: "host.files",
  [WorkOrderType.DEPLOY_PROCESS]: "process.deploy",
  [WorkOrderType.CONTROL_PROCESS]: "process.deploy",
  [WorkOrderType.READ_LOGS]: "compose.deploy",
  [WorkOrderType.EXEC_SERVICE]: "compose.deploy",
  [WorkOrderType.DEPLOY_CONTAINER]: "container.deploy",
  [WorkOrderType.CONTROL_CONTAINER]: "container.deploy",
  [WorkOrderType.DELIVER_WEBHOOK]: "webhook.deliver",
  [WorkOrderType.UPDATE_AGENT]: "agent.update",
} as const satisfies { readonly [T in OrderType]: CapabilityName | typeof COMMAND_CAPABILITY };

/**
 * What an order's kind needs of its node beyond its own required names: a capability's name, or
 * none that can be named (why: a program given by its path, which the node's allow-list decides,
 * or a type this side does not know).
 */
export interface OrderCapability {
  name: string | undefined;
  why?: "program path" | "unknown type";
}

/** The capability an order of `type` carrying `action` needs: its type's, or command.<program>. */
export function orderCapability(type: WorkOrderType, action: WorkOrderAction | undefined): OrderCapability {
  const name = (ORDER_CAPABILITIES as Partial<Record<WorkOrderType, string>>)[type];
  if (name === undefined) return { name: undefined, why: "unknown type" };
  if (name !== COMMAND_CAPABILITY) return { name };
  const program = action?.kind.case === "executeCommand" ? (action.kind.value.command?.argv[0] ?? "") : "";
  const command = commandCapability(program);
  return command ? { name: command } : { name: undefined, why: "program path" };
}

/** The order types whose orders need capability `name` (command.<program>: EXECUTE_COMMAND; none for a refinement such as process.systemd). */
export function orderTypesNeeding(name: string): OrderType[] {
  const key = name.startsWith(COMMAND_CAPABILITY) ? COMMAND_CAPABILITY : name;
  return (Object.entries(ORDER_CAPABILITIES) as [string, string][]).filter(([, c]) => c === key).map(([t]) => Number(t) as OrderType);
}

/**
 * What the fields of a report imply: an engine with Compose deploys and rolls back projects, an
 * engine runs containers, an allowed process source deploys processes, systemd supervises them, a
 * proxy named haproxy routes, and each allowed program is a command; every agent probes and writes
 * files on its host, and an engine is inspected. What an agent reports itself may say less (it
 * knows what it really runs: an SSH node's relay neither probes from nor writes to the node) or
 * more (terminals).
 */
export function derivedCapabilities(caps: NodeCapabilities): string[] {
  const out = new Set<string>(["host.files", "host.probe"]);
  const compose = caps.composeVariant === ComposeVariant.PLUGIN_V2 || caps.composeVariant === ComposeVariant.STANDALONE_V1;
  if (caps.dockerAvailable && compose) {
    out.add("compose.deploy");
    out.add("compose.rollback");
  }
  if (caps.dockerAvailable) {
    out.add("container.deploy");
    out.add("engine.inspect");
  }
  if (caps.allowedProcessSources.length > 0) {
    out.add("process.deploy");
    if (caps.systemd) out.add("process.systemd");
  }
  if (/^haproxy\b/i.test(caps.proxy)) out.add("proxy.haproxy");
  for (const program of caps.allowedCommands) {
    const c = commandCapability(program);
    if (c) out.add(c);
  }
  return [...out].sort();
}

/** A node's capabilities: what its agent reported, or, from an agent that reports none, what its fields imply. */
export function capabilitiesOf(caps: NodeCapabilities | undefined): string[] {
  if (!caps) return [];
  return caps.capabilities.length > 0 ? [...caps.capabilities] : derivedCapabilities(caps);
}

/** The required capabilities `caps` lacks (none: it holds them all). */
export function missingCapabilities(caps: NodeCapabilities | undefined, required: readonly string[]): string[] {
  if (required.length === 0) return [];
  const held = new Set(capabilitiesOf(caps));
  return required.filter((c) => !held.has(c));
}

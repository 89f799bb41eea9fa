// A node's typed capabilities: what its agent can do on its host, by name (compose.deploy,
// process.systemd, command.uptime, ...). The agent reports them (NodeCapabilities.capabilities);
// placement and work orders may require them. One vocabulary for both programs, and the rule that
// derives them from the older fields for an agent that reports none, so nothing it could run is
// refused for want of a name.
import { ComposeVariant, type NodeCapabilities } from "../gen/skipper/v1/resource_pb.js";

/** The capability names, each with what it means. `command.<program>` is one per allowed program. */
export const CAPABILITY_MEANINGS = {
  "compose.deploy": "deploy, remove and restart Compose projects (an engine and Compose answer)",
  "compose.rollback": "roll a Compose project back to an earlier spec",
  "container.deploy": "run single containers outside Compose (an engine answers)",
  "process.deploy": "install and run process modules (the agent allows some process source)",
  "process.systemd": "run process modules under systemd",
  "proxy.haproxy": "drive an HAProxy for tenants' routes",
  "exec.terminal": "open terminals in containers (the engine's exec)",
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
 * What the fields of a report imply: an engine with Compose deploys and rolls back projects, an
 * engine runs containers, an allowed process source deploys processes, systemd supervises them, a
 * proxy named haproxy routes, and each allowed program is a command. What an agent reports itself
 * may say less (it knows what it really runs) or more (terminals).
 */
export function derivedCapabilities(caps: NodeCapabilities): string[] {
  const out = new Set<string>();
  const compose = caps.composeVariant === ComposeVariant.PLUGIN_V2 || caps.composeVariant === ComposeVariant.STANDALONE_V1;
  if (caps.dockerAvailable && compose) {
    out.add("compose.deploy");
    out.add("compose.rollback");
  }
  if (caps.dockerAvailable) out.add("container.deploy");
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

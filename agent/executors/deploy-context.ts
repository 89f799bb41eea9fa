// What the deploy steps share: the context a deploy runs in, and how a deploy's parts (the
// command that decided, the services seen, what changed) become its outcome. deploy-service.ts
// runs the steps; deploy-safety.ts (hooks, rollback) and project-orders.ts build on them.
import type { HostProxy } from "../proxy/host-proxy.js";
import { hostProxyFor } from "../proxy/proxy-settings.js";
import type { Logger } from "pino";
import type { ProbeResult } from "../../gen/skipper/v1/order_action_pb.js";
import type { ServiceObservation } from "../../gen/skipper/v1/resource_pb.js";
import type { DockerHost } from "../engine/docker-host.js";
import type { CommandRun } from "../engine/run-command.js";
import type { SecretSource } from "../engine/project-secrets.js";
import type { FetchOptions } from "../process/artifact.js";
import type { ProcessExecutorOptions } from "./process-result.js";
import { commandResult, orderOutcome, type DetailsInit, type ExecContext, type ExecOutcome } from "./executor.js";

export interface DeployContext {
  workDir: string;
  docker: DockerHost;
  composeTimeoutMs: number;
  readyTimeoutMs: number;
  log: Logger;
  /** Aborts when the order is cancelled: the running command is stopped, the result is CANCELLED. */
  signal?: AbortSignal;
  /** Aborts when the agent lost the order's lease: stop, and do not roll back (the next holder converges). */
  lease?: AbortSignal;
  /** Programs the tenant's deploy hooks may run (the node's allow-list). */
  allowCommands?: readonly string[];
  /** The secret values of the order's project (asked of the controller under the order's claim). */
  secrets?: SecretSource;
  /** Where the order's process modules may come from (the node's --allow-process-source). */
  allowProcessSources?: readonly string[];
  /** How process modules are run (default: the host's runner, 1 s settle time, 10 s grace). */
  process?: ProcessExecutorOptions & { fetch?: Omit<FetchOptions, "signal"> };
  /** The host's HAProxy, when the agent drives one (--proxy-*): routes and start-first updates. */
  proxy?: HostProxy;
}

export type DeployOutcome = ExecOutcome;

/** The deploy context of an order's execution context. */
export function deployContext(ctx: ExecContext): DeployContext {
  const { config } = ctx;
  return {
    workDir: config.workDir,
    docker: ctx.host,
    composeTimeoutMs: config.composeTimeoutMs,
    readyTimeoutMs: config.readyTimeoutMs,
    log: ctx.log,
    signal: ctx.signal,
    lease: ctx.lease,
    allowCommands: config.allowCommands,
    secrets: ctx.secrets,
    allowProcessSources: config.allowProcessSources,
    proxy: config.proxy ? hostProxyFor(config.proxy) : undefined,
  };
}

/** What a deploy observed and ran, reported with its result. */
export interface Parts {
  command?: CommandRun;
  composePath: string;
  services: ServiceObservation[];
  changed?: string[];
  unchanged?: string[];
  probes?: ProbeResult[];
}

// Failures that may pass on their own: the controller retries the order while it has attempts
// (unless their cause says they fail the same way again: agent-results.ts withCause).
// A process module's source may come back, and a start or stop may fail for the host's passing trouble.
const RETRIABLE = new Set([
  "DOCKER_UNAVAILABLE",
  "TIMEOUT",
  "COMPOSE_FAILED",
  "SERVICES_NOT_RUNNING",
  "SECRETS_UNAVAILABLE",
  "SOURCE_UNAVAILABLE",
  "PROCESS_FAILED",
  // The host's proxy reloading, or not answering for a moment.
  "PROXY_UNAVAILABLE",
]);

/** A deploy's outcome: APPLY_OK succeeds, the passing failures are retriable, the parts go in details. */
export function outcome(code: string, message: string, started: number, p: Parts, details: DetailsInit = {}): DeployOutcome {
  return orderOutcome(code, message, started, {
    success: code === "APPLY_OK",
    retriable: RETRIABLE.has(code),
    services: p.services,
    composePath: p.composePath,
    details: {
      ...details,
      composePath: p.composePath,
      changedResources: p.changed ?? [],
      unchangedResources: p.unchanged ?? [],
      services: p.services,
      probes: p.probes ?? [],
      command: p.command && commandResult(p.command),
    },
  });
}

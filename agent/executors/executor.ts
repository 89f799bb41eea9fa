// What every executor is: a function from a claimed work order (and the host it runs on) to an
// outcome the agent reports. Each runs one member of the order's action oneof and gets that
// member's message already narrowed (executorOf), so the executor table can be checked by the
// compiler (executor-table.ts). Executors never throw for a failure of the order itself; they
// describe it with a result code. The helpers here build results the same way for all of them.
import type { ProxySettings } from "../proxy/proxy-settings.js";
import type { SecretSource } from "../engine/project-secrets.js";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { Logger } from "pino";
import type { WorkOrderAction } from "../../gen/skipper/v1/order_action_pb.js";
import type { ServiceObservation } from "../../gen/skipper/v1/resource_pb.js";
import {
  CommandResultSchema,
  type WorkOrderResultDetailsSchema,
  WorkOrderResultSchema,
  type CommandResult,
  type WorkOrder,
  type WorkOrderResult,
} from "../../gen/skipper/v1/work_order_pb.js";
import type { DockerHost } from "../engine/docker-host.js";
import type { CommandRun } from "../engine/run-command.js";
import type { ActionCase } from "../../common/order-kinds.js";

export interface ExecOutcome {
  result: WorkOrderResult;
  /** Observed services of the order's tenant project after it ran (empty when none). */
  services: ServiceObservation[];
  composePath: string;
}

/** What executors read of the agent's configuration (the rest belongs to the loop). */
export interface ExecConfig {
  /** Compose projects live in <workDir>/tenants/<tenant>; files and process modules beside them. */
  workDir: string;
  composeTimeoutMs: number;
  readyTimeoutMs: number;
  /** Programs execute_command orders and deploy hooks may run (argv[0], matched exactly). */
  allowCommands: string[];
  /** Where deploy_process may take artifacts from (URL prefixes, absolute directories). */
  allowProcessSources: string[];
  /** The host's HAProxy skippy drives for routes and start-first updates (--proxy-*); none: routes refused. */
  proxy?: ProxySettings;
}

export interface ExecContext {
  config: ExecConfig;
  host: DockerHost;
  log: Logger;
  /** Aborts when an admin cancels the order, its timeout passes or its lease is lost: stop and report. */
  signal: AbortSignal;
  /**
   * Aborts when the agent lost the order's lease (`signal` aborts too): another holder may run
   * the order now, so stop at once and change nothing more, not even to undo what was done.
   */
  lease?: AbortSignal;
  /** Asks the controller for the secret values of the order's project, under the order's claim. */
  secrets?: SecretSource;
  /** deliver_webhook: asks the controller for the subscription's URL, under the order's claim. */
  webhookUrl?: () => Promise<string>;
  /** The controller's clients: downloads (an agent version's bundle) and the bundle signing key. */
  controller?: ControllerAccess;
  /** The version of this agent (what its heartbeats report). */
  agentVersion?: string;
}

/** What executors may ask of the controller beyond their order (agent/controller-client.ts implements it). */
export interface ControllerAccess {
  download?(path: string, opts: { signal: AbortSignal; maxBytes: number }): Promise<{ status: number; body: Buffer }>;
  bundles: { getAgentBundle(req: object, opts: { signal: AbortSignal }): Promise<{ signingPublicKey: string }> };
}

type ActionKind = WorkOrderAction["kind"];
/** The message of member C ("deployProcess" -> DeployProcessAction); undefined for no member. */
export type ActionMessage<C extends ActionCase | undefined> = Extract<ActionKind, { case: C }>["value"];

/**
 * Runs the orders whose action is member C (undefined: orders that carry a desired state, not an
 * action). It is called with the whole order; `action` names the member it runs, which is what
 * lets the compiler hold it to the order type it is filed under.
 */
export interface Executor<C extends ActionCase | undefined = ActionCase | undefined> {
  (order: WorkOrder, ctx: ExecContext): Promise<ExecOutcome>;
  readonly action: C;
}

/**
 * The executor of action member C: `run` gets the order's action narrowed to C's message, or
 * undefined when the order carries none of that kind, which `run` refuses in its own words
 * (COMMAND_INVALID, UPLOAD_INVALID, ...) or, where an empty action means "all", runs as such.
 */
export function executorOf<C extends ActionCase>(
  action: C,
  run: (action: ActionMessage<C> | undefined, order: WorkOrder, ctx: ExecContext) => Promise<ExecOutcome>,
): Executor<C> {
  const exec = (order: WorkOrder, ctx: ExecContext) => {
    const kind = order.action?.kind;
    return run(kind?.case === action ? (kind.value as ActionMessage<C>) : undefined, order, ctx);
  };
  return Object.assign(exec, { action });
}

/** The executor of an order type without action: deploy_service, remove_service (the desired state is their payload). */
export function stateExecutor(run: (order: WorkOrder, ctx: ExecContext) => Promise<ExecOutcome>): Executor<undefined> {
  return Object.assign((order: WorkOrder, ctx: ExecContext) => run(order, ctx), { action: undefined });
}

export type DetailsInit = MessageInitShape<typeof WorkOrderResultDetailsSchema>;

/** A result with its duration measured from `startedMs` (a performance.now() reading). */
export function orderOutcome(
  code: string,
  message: string,
  startedMs: number,
  opts: { success: boolean; retriable?: boolean; details?: DetailsInit; services?: ServiceObservation[]; composePath?: string },
): ExecOutcome {
  const result = create(WorkOrderResultSchema, {
    success: opts.success,
    retriable: opts.retriable ?? false,
    code,
    message,
    details: { ...opts.details, durationMs: BigInt(Math.round(performance.now() - startedMs)) },
  });
  return { result, services: opts.services ?? [], composePath: opts.composePath ?? "" };
}

/** The reported form of a command run. */
export function commandResult(run: CommandRun): CommandResult {
  return create(CommandResultSchema, {
    program: run.program,
    args: run.args,
    exitCode: run.exitCode,
    stdout: run.stdout,
    stderr: run.stderr,
    timedOut: run.timedOut,
  });
}

/** The abort reason of an order whose lease the agent lost (see ExecContext.lease). */
export class LeaseLost extends Error {
  constructor(why: string) {
    super(`the agent lost the order's lease (${why})`);
    this.name = "LeaseLost";
  }
}

/** Why an order's signal aborted, for a CANCELLED or TIMEOUT message. */
export function abortReason(signal: AbortSignal): string {
  const r = signal.reason;
  return (r instanceof Error ? r.message : String(r ?? "")).slice(0, 200);
}

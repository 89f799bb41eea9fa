// exec_service: one command inside a running container of a tenant's compose service, without a
// terminal, as an operator asked for it.
//
//   1. the action holds (common/action-rules.ts, as the controller checked it)  -> EXEC_INVALID
//   2. the tenant's project is one this agent applied                          -> PROJECT_NOT_FOUND
//   3. the service is the project's and runs here: its running containers by
//      compose's labels, the replica asked for (0: the lowest-numbered one)    -> SERVICE_NOT_RUNNING
//                                                       (the engine silent:  DOCKER_UNAVAILABLE)
//   4. `docker exec [-i] [--user U] [--workdir D] [-e K=V]... CONTAINER argv...` (argv as given,
//      no shell), stdin written then closed, under the order's cancel and timeout (1 h when it
//      sets none); each stream's first 1 MiB kept, the project's secret values blanked
//                                                                              -> EXEC_OK (exit 0),
//      EXEC_FAILED (another exit code; not retried: the command ran), CANCELLED, TIMEOUT
//
// Stopping `docker exec` (a cancel, the timeout) ends the client only: Docker leaves a process it
// started in a container running when its client goes, so the message says that it may go on.
import { create } from "@bufbuild/protobuf";
import { execa } from "execa";
import { ExecOutputSchema, type ExecOutput } from "../../gen/skipper/v1/work_order_pb.js";
import type { ExecServiceAction } from "../../gen/skipper/v1/order_action_pb.js";
import { execActionProblem } from "../../common/action-rules.js";
import { ID_PATTERN } from "../../common/ids.js";
import type { ServiceContainer } from "../engine/project-containers.js";
import { projectSecretValues } from "../engine/project-secrets.js";
import { projectDir } from "../engine/project-state.js";
import { serviceContainerOf } from "../engine/service-container.js";
import { scrub, withoutAgentSecrets } from "../engine/run-command.js";
import { abortReason, executorOf, orderOutcome, type ExecOutcome } from "./executor.js";
import { engineEnv } from "../engine/engine-env.js";

/** At most this much of stdout and of stderr is reported (the head; `truncated` says more came). */
export const EXEC_OUTPUT_CAP_BYTES = 1024 * 1024;
/**
 * An order without a timeout of its own is stopped after this: the agent runs one order at a time,
 * and a command that never ends would hold every other order of the node.
 */
export const EXEC_DEFAULT_TIMEOUT_MS = 60 * 60 * 1000;
// Kept beyond the cap so that a secret value straddling it is blanked before the cut.
const SCRUB_MARGIN_BYTES = 64 * 1024;

export const execService = executorOf("execService", async (action, order, ctx) => {
  const started = performance.now();
  const done = (code: string, message: string, extra: Parameters<typeof orderOutcome>[3] = { success: false }) =>
    orderOutcome(code, message, started, extra);
  const tenantId = order.target?.tenantId ?? "";
  if (!ID_PATTERN.test(tenantId)) return done("EXEC_INVALID", `tenant id ${JSON.stringify(tenantId)} cannot name a project`);
  if (!action) return done("EXEC_INVALID", "the order carries no command (action.exec_service)");
  const problem = execActionProblem(action);
  if (problem) return done("EXEC_INVALID", `${problem.field} ${problem.problem}`);

  const found = await serviceContainerOf(ctx.config.workDir, tenantId, action.service, action.replica);
  if (!("container" in found)) return done(found.code, found.message, { success: false, retriable: found.code === "DOCKER_UNAVAILABLE" });
  const { container } = found;
  if (ctx.signal.aborted) return done("CANCELLED", `cancelled before the command ran: ${abortReason(ctx.signal) || "no reason given"}`);

  const hidden = await projectSecretValues(projectDir(ctx.config.workDir, tenantId));
  const ownTimeout = order.timeout ? undefined : EXEC_DEFAULT_TIMEOUT_MS;
  const ran = await dockerExec(container, action, { hidden, signal: ctx.signal, timeoutMs: ownTimeout });
  return outcomeOf(ran, action, ctx.signal, started);
});

interface ExecRun {
  output: ExecOutput;
  cancelled: boolean;
  /** docker itself refused: the container went away between the look and the exec. */
  gone: boolean;
}

interface ExecLimits {
  /** Secret values to blank from the output. */
  hidden: string[];
  signal: AbortSignal;
  /** The executor's own deadline, for an order that carries none. */
  timeoutMs: number | undefined;
}

async function dockerExec(container: ServiceContainer, a: ExecServiceAction, limits: ExecLimits): Promise<ExecRun> {
  const { hidden, signal } = limits;
  const withStdin = a.stdin.length > 0;
  const args = ["exec", ...(withStdin ? ["-i"] : [])];
  if (a.user !== "") args.push("--user", a.user);
  if (a.workdir !== "") args.push("--workdir", a.workdir);
  for (const [k, v] of Object.entries(a.env).sort(([x], [y]) => (x < y ? -1 : 1))) args.push("--env", `${k}=${v}`);
  args.push(container.id, ...a.argv);
  const child = execa("docker", args, {
    reject: false,
    buffer: false,
    // An SSH node's engine when a relay runs it (engine-env.ts).
    env: { ...withoutAgentSecrets(), ...engineEnv() },
    extendEnv: true,
    ...(withStdin ? { input: Buffer.from(a.stdin) } : { stdin: "ignore" as const }),
    cancelSignal: signal,
    ...(limits.timeoutMs ? { timeout: limits.timeoutMs } : {}),
    killSignal: "SIGTERM",
    forceKillAfterDelay: 5000,
  });
  const stdout = new HeadBuffer();
  const stderr = new HeadBuffer();
  child.stdout?.on("data", (c: Buffer) => stdout.add(c));
  child.stderr?.on("data", (c: Buffer) => stderr.add(c));
  const r = await child;
  const out = stdout.text(hidden);
  const err = stderr.text(hidden);
  const exitCode = typeof r.exitCode === "number" ? r.exitCode : -1;
  const output = create(ExecOutputSchema, {
    service: a.service,
    container: container.name,
    exitCode,
    stdout: out,
    stderr: (r as { code?: string }).code === "ENOENT" ? "docker: not found" : err,
    truncated: stdout.cut || stderr.cut,
    timedOut: r.timedOut === true || (signal.aborted && (signal.reason as Error | undefined)?.name === "OrderTimeout"),
  });
  // `docker exec` answers 1 with the daemon's words when the container is no longer there.
  const gone = exitCode === 1 && /^Error response from daemon: .*(is not running|No such container)/m.test(err);
  return { output, cancelled: r.isCanceled === true || signal.aborted, gone };
}

function outcomeOf(ran: ExecRun, a: ExecServiceAction, signal: AbortSignal, started: number): ExecOutcome {
  const o = ran.output;
  const details = { exec: o };
  const program = JSON.stringify(a.argv[0] ?? "");
  if (ran.cancelled)
    return orderOutcome(
      "CANCELLED",
      `stopped docker exec in ${o.container}: ${abortReason(signal) || "cancelled"}; the command may go on inside the container`,
      started,
      { success: false, details },
    );
  if (o.timedOut && !signal.aborted)
    return orderOutcome(
      "TIMEOUT",
      `stopped docker exec in ${o.container} after ${EXEC_DEFAULT_TIMEOUT_MS / 60_000} min (the order set no timeout); the command may go on inside the container`,
      started,
      { success: false, details },
    );
  if (ran.gone)
    return orderOutcome("SERVICE_NOT_RUNNING", `container ${o.container} stopped before the command ran: ${o.stderr.trim()}`, started, {
      success: false,
      details,
    });
  if (o.exitCode === 0)
    return orderOutcome("EXEC_OK", `${program} in ${o.container} exited 0${o.truncated ? " (output cut at 1 MiB)" : ""}`, started, {
      success: true,
      details,
    });
  return orderOutcome("EXEC_FAILED", `${program} in ${o.container} exited with code ${o.exitCode}`, started, {
    success: false,
    retriable: false,
    details,
  });
}

// The first bytes of a stream, up to the cap and a margin; `cut` once anything was dropped.
class HeadBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  cut = false;

  add(chunk: Buffer): void {
    const room = EXEC_OUTPUT_CAP_BYTES + SCRUB_MARGIN_BYTES - this.size;
    if (chunk.length > room) this.cut = true;
    if (room <= 0) return;
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.chunks.push(kept);
    this.size += kept.length;
  }

  /** The kept text, secret values blanked, then cut to the cap. */
  text(hidden: string[]): string {
    const all = Buffer.from(scrub(Buffer.concat(this.chunks).toString("utf8"), hidden));
    if (all.length <= EXEC_OUTPUT_CAP_BYTES) return all.toString("utf8");
    this.cut = true;
    return all.subarray(0, EXEC_OUTPUT_CAP_BYTES).toString("utf8");
  }
}

// read_logs: the recent lines of a tenant's containers, as the engine kept them.
//
//   1. the tenant's project must be one this agent applied      -> PROJECT_NOT_FOUND
//      named services must be the project's; limits in range     -> LOGS_INVALID
//   2. `docker logs --timestamps --tail N [--since T]` per container, stdout and stderr merged by
//      time                                                      -> DOCKER_UNAVAILABLE
//   3. each line capped (4 KiB), the whole answer capped (256 KiB, newest kept), and every value
//      of the project's secrets (its secret directory, its secret-shaped .env values) blanked
//                                                                -> LOGS_OK
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ContainerLogsSchema, LogLineSchema, type ContainerLogs, type LogLine } from "../../gen/skipper/v1/work_order_pb.js";
import { ReadLogsActionSchema } from "../../gen/skipper/v1/order_action_pb.js";
import { COMPOSE_SERVICE } from "../../common/action-rules.js";
import { ID_PATTERN } from "../../common/ids.js";
import { EngineError, readProjectContainers } from "../engine/project-containers.js";
import { projectSecretValues } from "../engine/project-secrets.js";
import { projectDir, readProjectState } from "../engine/project-state.js";
import { runCommand, scrub } from "../engine/run-command.js";
import { commandResult, executorOf, orderOutcome } from "./executor.js";

export const DEFAULT_TAIL_LINES = 200;
export const MAX_TAIL_LINES = 5000;
const MAX_LINE_BYTES = 4096;
const MAX_TOTAL_BYTES = 256 * 1024;
// `docker logs --timestamps` puts an RFC 3339 time with nanoseconds before each line.
const STAMPED = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z (.*)$/;

export const readLogs = executorOf("readLogs", async (given, order, ctx) => {
  const started = performance.now();
  const action = given ?? create(ReadLogsActionSchema);
  const done = (code: string, message: string, extra: Parameters<typeof orderOutcome>[3] = { success: false }) =>
    orderOutcome(code, message, started, extra);
  const tenantId = order.target?.tenantId ?? "";
  if (!ID_PATTERN.test(tenantId)) return done("LOGS_INVALID", `tenant id ${JSON.stringify(tenantId)} cannot name a project`);
  const tail = action.tailLines || DEFAULT_TAIL_LINES;
  if (tail > MAX_TAIL_LINES) return done("LOGS_INVALID", `tail_lines must be at most ${MAX_TAIL_LINES}`);
  const bad = action.services.find((s) => !COMPOSE_SERVICE.test(s));
  if (bad !== undefined) return done("LOGS_INVALID", `${JSON.stringify(bad)} is not a compose service name`);
  const state = await readProjectState(ctx.config.workDir, tenantId);
  if (!state) return done("PROJECT_NOT_FOUND", `tenant ${tenantId} has no project applied on this node`);
  const unknown = action.services.filter((s) => !state.services.includes(s));
  if (unknown.length > 0)
    return done("LOGS_INVALID", `project ${state.project_name} has no service ${unknown.join(", ")} (it has ${state.services.join(", ")})`);
  const wanted = action.services.length > 0 ? action.services : state.services;

  let containers: Awaited<ReturnType<typeof readProjectContainers>>;
  try {
    containers = await readProjectContainers(state.project_name);
  } catch (e) {
    if (e instanceof EngineError) return done("DOCKER_UNAVAILABLE", e.message, { success: false, retriable: true });
    throw e;
  }
  const hidden = await projectSecretValues(projectDir(ctx.config.workDir, tenantId));
  const since = action.since ? timestampDate(action.since).toISOString() : undefined;
  const out: ContainerLogs[] = [];
  for (const service of [...wanted].sort()) {
    for (const c of containers.byService.get(service) ?? []) {
      const args = ["logs", "--timestamps", "--tail", String(tail), ...(since ? ["--since", since] : []), c.containerId];
      const run = await runCommand("docker", args, { timeoutMs: 30_000, uncapped: true, secrets: hidden, signal: ctx.signal });
      if (run.cancelled) return done("CANCELLED", "stopped", { success: false });
      if (run.exitCode !== 0) {
        return done("DOCKER_UNAVAILABLE", `docker logs ${c.name} failed: ${run.stderr.trim().split("\n").at(-1) ?? ""}`, {
          success: false,
          retriable: true,
          details: { command: commandResult(run) },
        });
      }
      const lines = [...parse(run.stdout, "stdout", hidden), ...parse(run.stderr, "stderr", hidden)].sort(byTime);
      out.push(create(ContainerLogsSchema, { service, container: c.name, lines, truncated: lines.length >= tail }));
    }
  }
  const capped = capTotal(out);
  const count = out.reduce((n, c) => n + c.lines.length, 0);
  return done("LOGS_OK", `${count} line(s) from ${out.length} container(s)${capped ? " (cut to the newest 256 KiB)" : ""}`, {
    success: true,
    details: { logs: out },
  });
});

function parse(text: string, stream: string, hidden: string[]): LogLine[] {
  const out: LogLine[] = [];
  for (const raw of text.split("\n")) {
    if (raw === "") continue;
    const m = STAMPED.exec(raw);
    const at = m ? new Date(`${m[1]}${(m[2] ?? "").slice(0, 4)}Z`) : undefined;
    let line = scrub(m ? m[3]! : raw, hidden);
    if (Buffer.byteLength(line) > MAX_LINE_BYTES) line = `${Buffer.from(line).subarray(0, MAX_LINE_BYTES).toString("utf8")}…`;
    out.push(create(LogLineSchema, { time: at && !Number.isNaN(at.getTime()) ? timestampFromDate(at) : undefined, stream, text: line }));
  }
  return out;
}

function byTime(a: LogLine, b: LogLine): number {
  const t = (l: LogLine) => (l.time ? timestampDate(l.time).getTime() : 0);
  return t(a) - t(b);
}

// Drops the oldest lines, across containers, until the answer fits; true when it dropped any.
function capTotal(logs: ContainerLogs[]): boolean {
  let total = logs.reduce((n, c) => n + c.lines.reduce((m, l) => m + Buffer.byteLength(l.text) + 48, 0), 0);
  let cut = false;
  while (total > MAX_TOTAL_BYTES) {
    let oldest: ContainerLogs | undefined;
    for (const c of logs) if (c.lines.length > 0 && (!oldest || byTime(c.lines[0]!, oldest.lines[0]!) < 0)) oldest = c;
    if (!oldest) break;
    const line = oldest.lines.shift()!;
    total -= Buffer.byteLength(line.text) + 48;
    oldest.truncated = true;
    cut = true;
  }
  return cut;
}

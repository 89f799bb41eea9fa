// Rules for a tenant's deploy safety (health-gate probes and deadline, pre/post-deploy hooks) and
// for command specs, which ad-hoc execute_command orders share. They check shape only; whether a
// node may run a program is the node's allow-list's business.
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { CommandSpec, DeploySafety, HealthProbe } from "../../gen/skipper/v1/safety_pb.js";
import { ENV_KEY, PROGRAM, hostProblem, urlProblem } from "../../common/action-rules.js";
import { invalid } from "../base/errors.js";

const MAX_COMMAND_TIMEOUT_MS = 60 * 60 * 1000;
const MAX_PROBE_TIMEOUT_MS = 60_000;

/** Checks a tenant's deploy safety: gate probes and deadline, hook commands. */
export function checkSafety(s: DeploySafety | undefined, field: string): void {
  if (!s) return;
  s.healthGate?.probes.forEach((p, i) => checkProbe(p, `${field}.health_gate.probes[${i}]`));
  const deadline = s.healthGate?.deadline ? durationMs(s.healthGate.deadline) : 0;
  if (deadline < 0 || deadline > MAX_COMMAND_TIMEOUT_MS) fail(`${field}.health_gate.deadline`, "must be at most 1h");
  s.preDeploy.forEach((c, i) => checkCommandSpec(c, `${field}.pre_deploy[${i}]`));
  s.postDeploy.forEach((c, i) => checkCommandSpec(c, `${field}.post_deploy[${i}]`));
  if (s.quarantineAfter > 100) fail(`${field}.quarantine_after`, "must be at most 100 (0 means 5)");
}

/** Checks one health probe (http url and status, or tcp host and port; timeout). */
export function checkProbe(p: HealthProbe, field: string): void {
  if (p.kind.case === "http") {
    const problem = urlProblem(p.kind.value.url);
    if (problem) fail(`${field}.http.url`, problem);
    if (p.kind.value.expectStatus !== 0 && (p.kind.value.expectStatus < 100 || p.kind.value.expectStatus > 599))
      fail(`${field}.http.expect_status`, "must be an HTTP status");
  } else if (p.kind.case === "tcp") {
    const problem = hostProblem(p.kind.value.host);
    if (problem) fail(`${field}.tcp.host`, problem);
    if (p.kind.value.port < 1 || p.kind.value.port > 65535) fail(`${field}.tcp.port`, "must be 1-65535");
  } else fail(field, "needs http or tcp");
  if (p.timeout && (durationMs(p.timeout) <= 0 || durationMs(p.timeout) > MAX_PROBE_TIMEOUT_MS))
    fail(`${field}.timeout`, "must be positive and at most 60s");
}

/** Checks a command's shape (argv, timeout, directory, env); the allow-list is the node's business. */
export function checkCommandSpec(c: CommandSpec | undefined, field: string): void {
  if (!c || c.argv.length === 0 || c.argv[0] === "") fail(`${field}.argv`, "needs at least a program");
  if (c.argv.some((a) => a.includes("\0"))) fail(`${field}.argv`, "must not contain NUL bytes");
  if (!PROGRAM.test(c.argv[0]!)) fail(`${field}.argv`, "argv[0] must be a program name or absolute path, without shell syntax");
  if (c.timeout && (durationMs(c.timeout) <= 0 || durationMs(c.timeout) > MAX_COMMAND_TIMEOUT_MS))
    fail(`${field}.timeout`, "must be positive and at most 1h");
  if (c.workingDir !== "" && !c.workingDir.startsWith("/")) fail(`${field}.working_dir`, "must be absolute");
  for (const k of Object.keys(c.env)) if (!ENV_KEY.test(k)) fail(`${field}.env`, `${JSON.stringify(k)} is not a variable name`);
}

function fail(field: string, problem: string): never {
  throw invalid(`${field} ${problem}`, { field });
}

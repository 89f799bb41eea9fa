// Orders on a tenant's compose project that is already on this host:
//   restart_service  `compose restart [services]`, then the services must run again within the
//                    ready timeout                     -> RESTART_OK, SERVICES_NOT_RUNNING,
//                    PROJECT_NOT_FOUND, COMPOSE_FAILED, DOCKER_UNAVAILABLE, CANCELLED
//   rollback         deploys the spec the controller resolved (the order's desired_state) like
//                    deploy_service does               -> ROLLBACK_OK or the deploy's failure code
import { access } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { WorkOrderResultSchema } from "../../gen/skipper/v1/work_order_pb.js";
import { ID_PATTERN } from "../../common/ids.js";
import { COMPOSE_SERVICE } from "../../common/action-rules.js";
import { EngineError } from "../engine/project-containers.js";
import { projectDir, readProjectState } from "../engine/project-state.js";
import { runCommand } from "../engine/run-command.js";
import { deployContext } from "./deploy-context.js";
import { deployService } from "./deploy-service.js";
import { abortReason, commandResult, executorOf, orderOutcome } from "./executor.js";
import { awaitHealthy } from "./health-gate.js";

/** Restarts the named services of the tenant's project (all when none are named) and waits for them. */
export const restartService = executorOf("restartService", async (action, order, ctx) => {
  const started = performance.now();
  const tenantId = order.target?.tenantId ?? "";
  const wanted = action?.services ?? [];
  const done = (code: string, message: string, extra: Parameters<typeof orderOutcome>[3] = { success: false }) =>
    orderOutcome(code, message, started, extra);
  if (!ID_PATTERN.test(tenantId)) return done("RESTART_INVALID", `tenant id ${JSON.stringify(tenantId)} cannot name a directory`);
  const bad = wanted.find((s) => !COMPOSE_SERVICE.test(s));
  if (bad !== undefined) return done("RESTART_INVALID", `${JSON.stringify(bad)} is not a compose service name`);
  const state = await readProjectState(ctx.config.workDir, tenantId);
  const dir = projectDir(ctx.config.workDir, tenantId);
  const file = join(dir, "docker-compose.yml");
  if (
    !state ||
    !(await access(file).then(
      () => true,
      () => false,
    ))
  )
    return done("PROJECT_NOT_FOUND", `tenant ${tenantId} has no project applied on this node`);
  const unknown = wanted.filter((s) => !state.services.includes(s));
  if (unknown.length > 0)
    return done(
      "RESTART_INVALID",
      `project ${state.project_name} has no service ${unknown.join(", ")} (it has ${state.services.join(", ")})`,
    );
  const compose = ctx.host.compose;
  if (!compose)
    return done("DOCKER_UNAVAILABLE", ctx.host.capabilities.message || "no Compose implementation found", {
      success: false,
      retriable: true,
    });
  const args = [...compose.baseArgs, "--project-name", state.project_name, "--file", file, "--project-directory", dir];
  if (
    await access(join(dir, ".env")).then(
      () => true,
      () => false,
    )
  )
    args.push("--env-file", join(dir, ".env"));
  args.push("restart", ...wanted);
  const run = await runCommand(compose.program, args, { timeoutMs: ctx.config.composeTimeoutMs, cwd: dir, signal: ctx.signal });
  const details = { command: commandResult(run) };
  if (run.cancelled) return done("CANCELLED", `stopped: ${abortReason(ctx.signal)}`, { success: false, details });
  if (run.timedOut || run.exitCode !== 0)
    return done("COMPOSE_FAILED", `compose restart ${run.timedOut ? "timed out" : `failed (exit ${run.exitCode})`}`, {
      success: false,
      retriable: true,
      details,
    });
  try {
    const v = await awaitHealthy(state.project_name, state.services, {
      deadlineMs: ctx.config.readyTimeoutMs,
      probes: [],
      signal: ctx.signal,
    });
    const extra = { services: v.observed, details: { ...details, services: v.observed } };
    if (v.cancelled) return done("CANCELLED", `stopped: ${abortReason(ctx.signal)}`, { success: false, ...extra });
    if (v.failure) return done("SERVICES_NOT_RUNNING", v.failure, { success: false, retriable: true, ...extra });
    return done("RESTART_OK", `restarted ${wanted.length > 0 ? wanted.join(", ") : `every service of ${state.project_name}`}`, {
      success: true,
      ...extra,
    });
  } catch (e) {
    if (e instanceof EngineError) return done("DOCKER_UNAVAILABLE", e.message, { success: false, retriable: true, details });
    throw e;
  }
});

/** Deploys the spec the controller resolved for a rollback; ROLLBACK_OK with both spec hashes. */
export const rollbackProject = executorOf("rollback", async (action, order, ctx) => {
  const out = await deployService(order, deployContext(ctx));
  if (out.result.code !== "APPLY_OK") return out;
  const ds = order.desiredState;
  const result = create(WorkOrderResultSchema, {
    ...out.result,
    code: "ROLLBACK_OK",
    message: `restored spec ${(ds?.specHash ?? "").slice(0, 12)} from ${action?.resolvedFrom || "the order"}; ${out.result.message}`,
  });
  result.details!.rollback = {
    $typeName: "skipper.v1.RollbackDetails",
    failedSpecHash: action?.replacesSpecHash ?? "",
    restoredSpecHash: ds?.specHash ?? "",
    reason: "requested",
  };
  return { ...out, result };
});

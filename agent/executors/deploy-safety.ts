// The safe-deploy steps around compose up: the tenant's pre- and post-deploy hooks (allow-listed
// commands, argv only), and the automatic rollback when a deploy fails its health gate: the
// last spec that applied successfully on this host is deployed again (its process modules at the
// versions that ran then, and the failed spec's new modules stopped), and the result says
// ROLLED_BACK with both specs (secret values blanked) so nobody has to guess what runs.
import { clone, create } from "@bufbuild/protobuf";
import { ComposeProjectSchema, type ComposeProject } from "../../gen/skipper/v1/resource_pb.js";
import type { CommandSpec } from "../../gen/skipper/v1/safety_pb.js";
import { WorkOrderSchema, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { isSecretKey } from "../../common/logging/redact.js";
import { appliedRoutes, processSpecOf, readAppliedSpec, type AppliedSpec } from "../engine/applied-spec.js";
import { readAppliedSecrets } from "../engine/project-secrets.js";
import { projectDir } from "../engine/project-state.js";
import { SecretKeyRefSchema } from "../../gen/skipper/v1/secret_pb.js";
import { describeRun, runCommandSpec, succeeded } from "../engine/command-spec.js";
import type { CommandRun } from "../engine/run-command.js";
import { outcome, type DeployContext, type DeployOutcome, type Parts } from "./deploy-context.js";
import { stopModules } from "./deploy-processes.js";

/** Runs hooks in order; the first failure is returned (undefined when all passed). */
export async function runHooks(
  hooks: CommandSpec[],
  phase: string,
  ctx: DeployContext,
  dir: string,
): Promise<{ message: string; run?: CommandRun } | undefined> {
  for (const hook of hooks) {
    const r = await runCommandSpec(hook, ctx.allowCommands ?? [], { defaultCwd: dir, signal: ctx.signal });
    ctx.log.info(
      { action: "hook", result: succeeded(r) ? "ok" : "failed", metadata: { phase, program: hook.argv[0], message: describeRun(r) } },
      `${phase} hook ${hook.argv[0]}`,
    );
    if (!succeeded(r))
      return { message: `${phase} hook ${hook.argv[0] ?? ""}: ${describeRun(r)}`, run: r.kind === "ran" ? r.run : undefined };
  }
  return undefined;
}

export interface GateFailure {
  failure: string;
  /** Result code whether or not the restore worked (default: ROLLED_BACK, or HEALTH_GATE_FAILED with nothing to restore). */
  code?: string;
  /** What the failed deploy observed. */
  parts: Parts;
  started: number;
  /** Deploys an order (the executor itself: the restore is a deploy of the recorded spec). */
  redeploy: (order: WorkOrder, ctx: DeployContext) => Promise<DeployOutcome>;
}

/** Restores the last applied spec after `order` failed its gate (or ran images of the wrong digest). */
export async function rollBack(order: WorkOrder, ctx: DeployContext, f: GateFailure): Promise<DeployOutcome> {
  const ds = order.desiredState!;
  // The lease is lost: another holder may be deploying this order now, and a restore would race
  // it. It is left as it is; the next holder deploys the same spec again and judges its own gate.
  if (ctx.lease?.aborted)
    return outcome(f.code ?? "CANCELLED", `${f.failure}; not rolled back: the lease was lost to the next holder`, f.started, f.parts);
  const applied = await readAppliedSpec(ctx.workDir, ds.tenantId);
  if (!applied || applied.spec_hash === ds.specHash) {
    return outcome(f.code ?? "HEALTH_GATE_FAILED", `${f.failure}; no earlier spec applied on this node to restore`, f.started, f.parts);
  }
  ctx.log.warn(
    {
      action: "rollback",
      result: "restoring",
      metadata: { failed_spec: ds.specHash, restored_spec: applied.spec_hash, reason: f.failure },
    },
    "health gate failed; restoring the previous spec",
  );
  const refs = (r: AppliedSpec["secret_env"]) =>
    Object.fromEntries(
      Object.entries(r ?? {}).map(([name, v]) => [name, create(SecretKeyRefSchema, { secretId: v.secret_id, key: v.key })]),
    );
  const restored = create(ComposeProjectSchema, {
    projectName: applied.project_name,
    composeFile: applied.compose_file,
    env: applied.env,
    secretEnv: refs(applied.secret_env),
    secretFiles: refs(applied.secret_files),
  });
  const restore = clone(WorkOrderSchema, order);
  restore.desiredState = {
    ...ds,
    serviceIds: applied.service_ids,
    composeProject: restored,
    composeServices: applied.compose_services,
    specHash: applied.spec_hash,
    registrySecretIds: applied.registry_secret_ids ?? [],
    // The versions that ran then, installed still: switching back downloads nothing.
    processes: (applied.processes ?? []).map(processSpecOf),
    // Routed as it was then (a record older than routes in records keeps the failed spec's).
    routes: appliedRoutes(applied) ?? ds.routes,
    safety: undefined,
  };
  // The restored spec runs with the values it ran with: the copy kept when it applied.
  const dir = projectDir(ctx.workDir, ds.tenantId);
  // The restore runs to its end even when the order was cancelled (or timed out): a half-restored
  // project is worse than either spec. Compose's own timeout still bounds it. Only a lost lease
  // stops it: the next holder redeploys the order and converges whatever it finds.
  const back = await f.redeploy(restore, { ...ctx, signal: ctx.lease, secrets: () => readAppliedSecrets(dir, applied.spec_hash) });
  // The restore stops the modules the restored spec does not declare only relative to itself: the
  // failed spec's own new modules are stopped here.
  const restoredModules = new Set((applied.processes ?? []).map((p) => p.module));
  const added = ds.processes.map((p) => p.module).filter((m) => !restoredModules.has(m));
  await stopModules(ctx.workDir, ds.tenantId, added, ctx.process);
  const rollback = {
    failedSpecHash: ds.specHash,
    failedProject: redacted(ds.composeProject),
    restoredSpecHash: applied.spec_hash,
    restoredProject: redacted(restored),
    reason: f.failure,
  };
  if (back.result.code !== "APPLY_OK") {
    return outcome(
      "ROLLBACK_FAILED",
      `${f.failure}; restoring spec ${applied.spec_hash.slice(0, 12)} failed too: ${back.result.code} ${back.result.message}`,
      f.started,
      { ...f.parts, services: back.services },
      { rollback },
    );
  }
  return outcome(
    f.code ?? "ROLLED_BACK",
    `${f.failure}; restored spec ${applied.spec_hash.slice(0, 12)} (applied by order ${applied.work_order_id})`,
    f.started,
    { ...f.parts, services: back.services },
    { rollback },
  );
}

/** The project with secret-shaped env values blanked, for results that end up in events. */
function redacted(p: ComposeProject | undefined): ComposeProject | undefined {
  if (!p) return undefined;
  const out = clone(ComposeProjectSchema, p);
  for (const k of Object.keys(out.env)) if (isSecretKey(k)) out.env[k] = "[REDACTED]";
  return out;
}

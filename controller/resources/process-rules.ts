// Field rules of process modules: a deploy_process order's spec (dispatch/action-checks.ts) and a
// tenant's declared processes (TenantSpec.processes, resource-rules.ts), one rule for both. The
// agent checks a spec again before it runs anything (agent/executors/deploy-process.ts): it is the
// authority over its host.
import {
  ProcessModuleRun,
  type ProcessModuleSpec,
  type ProcessSource,
  type ProcessSpec,
  type TenantProcess,
} from "../../gen/skipper/v1/process_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { ENV_KEY, MODULE_NAME, MODULE_VERSION, SHA256_HEX, urlProblem } from "../../common/action-rules.js";
import { invalid } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { isSecretKey } from "../../common/logging/redact.js";
import { checkSelector } from "../domain/label-selector.js";
import type { Store } from "../store/store.js";
import { eachScannedResource } from "../store/each-page.js";

const MAX_PROCESSES = 16;
const MAX_ARGS = 64;
const MAX_ENV = 64;

/** A complete spec (module, version, source, sha256, argv, env), as deploy_process runs it. */
export function checkProcessSpec(s: ProcessSpec | undefined, f: string): asserts s is ProcessSpec {
  if (!s) fail(f, "is required");
  checkRunnable(s, f);
  if (s.version !== "latest" && (!MODULE_VERSION.test(s.version) || s.version === "active"))
    fail(`${f}.version`, `must match ${MODULE_VERSION.source} or be "latest"`);
  if (!SHA256_HEX.test(s.sha256)) fail(`${f}.sha256`, "must be 64 hex digits");
  checkSource(s.source, `${f}.source`);
}

/** A process source: an absolute path without '..', or an http(s) URL without credentials. */
export function checkSource(src: ProcessSource | undefined, f: string): void {
  if (src?.kind.case === "path") {
    if (!src.kind.value.startsWith("/") || src.kind.value.split("/").includes("..") || src.kind.value.includes("\0"))
      fail(`${f}.path`, "must be an absolute path without '..'");
  } else if (src?.kind.case === "url") {
    const p = urlProblem(src.kind.value);
    if (p) fail(`${f}.url`, p);
  } else fail(f, "needs a path or a url");
}

/**
 * A tenant's processes: each a complete spec, or an artifact with only module, argv and env (the
 * release fills the rest); modules unique in the tenant. Whether the artifact exists, is the
 * tenant's and is a process archive is checked against the store (references).
 */
export function checkTenantProcesses(ps: readonly TenantProcess[], f: string): void {
  if (ps.length > MAX_PROCESSES) fail(f, `may declare at most ${MAX_PROCESSES} processes`);
  const modules = new Map<string, number>();
  ps.forEach((p, i) => {
    const at = `${f}[${i}]`;
    if (p.artifactId === "") checkProcessSpec(p.spec, `${at}.spec`);
    else {
      checkId(p.artifactId, `${at}.artifact_id`);
      if (!p.spec) fail(`${at}.spec`, "is required (module, argv and env; the artifact gives version, source and sha256)");
      checkRunnable(p.spec, `${at}.spec`);
      if (p.spec.version !== "" || p.spec.sha256 !== "" || p.spec.source?.kind.case !== undefined)
        fail(`${at}.spec`, "must leave version, source and sha256 empty when artifact_id is set: the environment's release gives them");
    }
    // Values reach deployment records and snapshots with secret-shaped keys blanked, and a process
    // has no secret references yet: a secret in a process's env would be lost on a rollback.
    for (const k of Object.keys(p.spec?.env ?? {}))
      if (isSecretKey(k))
        fail(`${at}.spec.env.${k}`, "looks like a secret: process modules take no secret values yet (records would keep it blanked)");
    const module = p.spec?.module ?? "";
    const first = modules.get(module);
    if (first !== undefined) fail(`${at}.spec.module`, `repeats module ${module} of ${f}[${first}]: a module runs once per node`);
    modules.set(module, i);
  });
}

/** A process resource: a complete spec (as deploy_process's), a run state, a node selector. */
export function checkProcessModuleSpec(p: ProcessModuleSpec): void {
  const f = "desired_state.process";
  checkProcessSpec(p.spec, `${f}.spec`);
  if (!(p.run in ProcessModuleRun)) fail(`${f}.run`, "must be RUNNING or STOPPED");
  checkSelector(p.nodeSelector, `${f}.node_selector`);
  // The same reason as a tenant's: the module's env reaches events and orders' records blanked.
  for (const k of Object.keys(p.spec?.env ?? {}))
    if (isSecretKey(k)) fail(`${f}.spec.env.${k}`, "looks like a secret: process modules take no secret values yet");
}

/**
 * A module name is one owner's on a node: a process resource may not name a module any tenant
 * declares (TenantSpec.processes) or another process resource declares, nor a tenant one a
 * process resource declares. Refused with
 * INVALID_REQUEST, details.reason MODULE_CLAIMED_BY_TENANT (or MODULE_CLAIMED_BY_PROCESS) and the
 * owner, whatever the placements: labels change, and two owners would stop each other's process.
 */
export async function checkModulesUnclaimed(store: Pick<Store, "scanResources">, next: Resource): Promise<void> {
  const k = next.desiredState?.kind;
  if (k?.case === "process") {
    const module = k.value.spec?.module ?? "";
    for await (const t of eachScannedResource(store, { resourceType: "tenant" })) {
      if (t.desiredState?.kind.case !== "tenant") continue;
      if (!t.desiredState.kind.value.processes.some((p) => p.spec?.module === module)) continue;
      throw invalid(
        `desired_state.process.spec.module ${module} is declared by tenant ${t.id}'s processes: a module is one owner's on a node`,
        {
          field: "desired_state.process.spec.module",
          reason: "MODULE_CLAIMED_BY_TENANT",
          module_owner: `tenant/${t.id}`,
        },
      );
    }
    // Nor another process resource: two selectors may match one node, and two versions of one
    // module would redeploy over each other there forever.
    for await (const r of eachScannedResource(store, { resourceType: "process" })) {
      if (r.id === next.id || r.desiredState?.kind.case !== "process" || r.desiredState.kind.value.spec?.module !== module) continue;
      throw invalid(`desired_state.process.spec.module ${module} is declared by process ${r.id}: a module is one owner's on a node`, {
        field: "desired_state.process.spec.module",
        reason: "MODULE_CLAIMED_BY_PROCESS",
        module_owner: `process/${r.id}`,
      });
    }
  } else if (k?.case === "tenant" && k.value.processes.length > 0) {
    const mine = new Map(k.value.processes.map((p, i) => [p.spec?.module ?? "", i]));
    for await (const r of eachScannedResource(store, { resourceType: "process" })) {
      const i = r.desiredState?.kind.case === "process" ? mine.get(r.desiredState.kind.value.spec?.module ?? "") : undefined;
      if (i === undefined) continue;
      throw invalid(`desired_state.tenant.processes[${i}].spec.module is declared by process ${r.id}: a module is one owner's on a node`, {
        field: `desired_state.tenant.processes[${i}].spec.module`,
        reason: "MODULE_CLAIMED_BY_PROCESS",
        module_owner: `process/${r.id}`,
      });
    }
  }
}

// Module, argv and env: what a spec needs whatever gives its version.
function checkRunnable(s: ProcessSpec, f: string): void {
  if (!MODULE_NAME.test(s.module)) fail(`${f}.module`, `must match ${MODULE_NAME.source}`);
  if (s.argv.length === 0 || s.argv[0] === "" || s.argv[0]!.startsWith("/") || s.argv[0]!.split("/").includes(".."))
    fail(`${f}.argv`, "argv[0] must be a path inside the version directory (e.g. bin/server)");
  if (s.argv.length > MAX_ARGS) fail(`${f}.argv`, `may hold at most ${MAX_ARGS} arguments`);
  if (s.argv.some((a) => a.includes("\0"))) fail(`${f}.argv`, "may not contain NUL bytes");
  if (Object.keys(s.env).length > MAX_ENV) fail(`${f}.env`, `may hold at most ${MAX_ENV} variables`);
  for (const [k, v] of Object.entries(s.env)) {
    if (!ENV_KEY.test(k)) fail(`${f}.env`, `${JSON.stringify(k.slice(0, 64))} is not a variable name`);
    if (v.includes("\0")) fail(`${f}.env.${k}`, "may not contain NUL bytes");
  }
}

function fail(field: string, message: string): never {
  throw invalid(`${field} ${message}`, { field });
}

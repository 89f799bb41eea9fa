// The last spec of a tenant's project that applied successfully on this host, kept beside the
// project as .skipper-applied.json (mode 0600: the env may hold secrets). A deploy whose health
// gate fails restores it; a rollback order may name it. Written atomically (temp, fsync, rename)
// after every successful apply, so it is always a spec that once ran healthy here. Its process
// modules are recorded with the version that ran (a "latest" resolved), so a restore switches
// back to an installed version without asking the source. Its proxy routes are recorded too, so
// a restore routes as the restored spec did: the deploy that switches the traffic stages the
// routes of the spec it applies (.skipper-routes.json, by spec hash: the hash covers the routes),
// and the record of that spec takes them.
import { readdir, readFile } from "node:fs/promises";
import { create, fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { ProcessSpecSchema, type ProcessSpec } from "../../gen/skipper/v1/process_pb.js";
import { ProxyRouteSchema, type ProxyRoute } from "../../gen/skipper/v1/proxy_pb.js";
import { writeFileAtomic } from "./durable-file.js";
import { join } from "node:path";
import { projectDir } from "./project-state.js";

export const APPLIED_FILE = ".skipper-applied.json";
const ROUTES_FILE = ".skipper-routes.json";

export interface AppliedSpec {
  schema_version: "v1";
  tenant_id: string;
  project_name: string;
  spec_hash: string;
  work_order_id: string;
  compose_file: string;
  env: Record<string, string>;
  /** The project's references to secret values (the values are in the applied secret directory). */
  secret_env?: Record<string, { secret_id: string; key: string }>;
  secret_files?: Record<string, { secret_id: string; key: string }>;
  registry_secret_ids?: string[];
  /** service resource id -> compose service, as the order that applied it said. */
  compose_services: Record<string, string>;
  service_ids: string[];
  /** The tenant's process modules as they ran (absent in records written before processes). */
  processes?: AppliedProcess[];
  /**
   * The spec's proxy routes (ProxyRoute as JSON); absent in records written before routes were
   * recorded, or of a spec whose deploy staged none (one of process modules alone).
   */
  routes?: JsonObject[];
  applied_at: string;
}

/** A process module of an applied spec: its ProcessSpec, the version being the one that ran. */
export interface AppliedProcess {
  module: string;
  version: string;
  source: { path?: string; url?: string };
  sha256: string;
  argv: string[];
  env: Record<string, string>;
}

/** The record of `spec` run at `version`. */
export function appliedProcess(spec: ProcessSpec, version: string): AppliedProcess {
  const src = spec.source?.kind;
  return {
    module: spec.module,
    version,
    source: src?.case === "path" ? { path: src.value } : src?.case === "url" ? { url: src.value } : {},
    sha256: spec.sha256,
    argv: [...spec.argv],
    env: { ...spec.env },
  };
}

/** The ProcessSpec a recorded module runs with again. */
export function processSpecOf(p: AppliedProcess): ProcessSpec {
  const kind =
    p.source.path !== undefined
      ? { case: "path" as const, value: p.source.path }
      : p.source.url !== undefined
        ? { case: "url" as const, value: p.source.url }
        : { case: undefined };
  return create(ProcessSpecSchema, { module: p.module, version: p.version, source: { kind }, sha256: p.sha256, argv: p.argv, env: p.env });
}

/** Records `spec` as the tenant's last applied; its routes are those staged for its spec hash unless it carries its own. */
export async function writeAppliedSpec(workDir: string, spec: AppliedSpec): Promise<void> {
  const dir = projectDir(workDir, spec.tenant_id);
  const routes = spec.routes ?? (await stagedRoutes(dir, spec.spec_hash));
  const record = routes === undefined ? spec : { ...spec, routes };
  await writeFileAtomic(join(dir, APPLIED_FILE), `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 });
}

/** Stages the routes of the spec `specHash` a deploy is applying, for its record when it applies. */
export async function stageSpecRoutes(workDir: string, tenantId: string, specHash: string, routes: readonly ProxyRoute[]): Promise<void> {
  const staged: StagedRoutes = { spec_hash: specHash, routes: routes.map((r) => toJson(ProxyRouteSchema, r) as JsonObject) };
  await writeFileAtomic(join(projectDir(workDir, tenantId), ROUTES_FILE), `${JSON.stringify(staged)}\n`, { mode: 0o600 });
}

/** The routes an applied spec recorded, or undefined when it recorded none (an older record). */
export function appliedRoutes(spec: AppliedSpec): ProxyRoute[] | undefined {
  return spec.routes?.map((r) => fromJson(ProxyRouteSchema, r));
}

interface StagedRoutes {
  spec_hash: string;
  routes: JsonObject[];
}

// The routes staged for `specHash`, or undefined (none staged, or staged for another spec).
async function stagedRoutes(dir: string, specHash: string): Promise<JsonObject[] | undefined> {
  try {
    const staged = JSON.parse(await readFile(join(dir, ROUTES_FILE), "utf8")) as StagedRoutes;
    return staged.spec_hash === specHash && Array.isArray(staged.routes) ? staged.routes : undefined;
  } catch {
    return undefined;
  }
}

/** The recorded spec, or undefined when there is none (or it cannot be read). */
export async function readAppliedSpec(workDir: string, tenantId: string): Promise<AppliedSpec | undefined> {
  try {
    const s = JSON.parse(await readFile(join(projectDir(workDir, tenantId), APPLIED_FILE), "utf8")) as AppliedSpec;
    return s.schema_version === "v1" && s.tenant_id === tenantId ? s : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The process modules the applied specs of tenants other than `tenantId` declare. Module names
 * are the node's (one tenant each); when one moves between tenants, the tenant that dropped it
 * must not stop it under the one that took it.
 */
export async function modulesOfOtherTenants(workDir: string, tenantId: string): Promise<Set<string>> {
  const out = new Set<string>();
  const tenants = await readdir(join(workDir, "tenants")).catch(() => [] as string[]);
  for (const t of tenants) {
    if (t === tenantId) continue;
    for (const p of (await readAppliedSpec(workDir, t))?.processes ?? []) out.add(p.module);
  }
  return out;
}

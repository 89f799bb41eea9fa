// The agent's record of each compose project it manages, kept beside the project's files as
// <work-dir>/tenants/<tenant>/.skipper-state.json: which order last applied it successfully,
// with which spec hash and which compose services. Heartbeats report every recorded project
// with what the engine shows for it, so the controller can see drift. A project of process modules
// only (no compose file) records no services: it has no containers to drift, and is observed
// without asking the engine, so a host without Docker reports it too.
import { mkdir, readdir, readFile } from "node:fs/promises";
import { writeFileAtomic } from "./durable-file.js";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { ProjectObservationSchema, type ProjectObservation } from "../../gen/skipper/v1/resource_pb.js";
import { ID_PATTERN } from "../../common/ids.js";
import { observeServices, readProjectContainers } from "./project-containers.js";

export const STATE_FILE = ".skipper-state.json";

export interface ProjectState {
  schema_version: "v1";
  project_name: string;
  tenant_id: string;
  spec_hash: string;
  work_order_id: string;
  services: string[];
  applied_at: string;
}

/** The directory of a tenant's project under the work dir. */
export function projectDir(workDir: string, tenantId: string): string {
  if (!ID_PATTERN.test(tenantId)) throw new Error(`tenant id ${JSON.stringify(tenantId)} cannot name a directory`);
  return join(workDir, "tenants", tenantId);
}

/** Records a successful apply (atomically: temp file, fsync, rename). */
export async function writeProjectState(workDir: string, state: ProjectState): Promise<void> {
  const dir = projectDir(workDir, state.tenant_id);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await writeFileAtomic(join(dir, STATE_FILE), `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
}

/** The compose project name the last successful deploy recorded for a tenant, else the tenant id (deploy's default). */
export async function recordedProjectName(workDir: string, tenantId: string): Promise<string> {
  return (await readProjectState(workDir, tenantId))?.project_name || tenantId;
}

/** A tenant's record, or undefined when it never applied successfully here (or it is unreadable). */
export async function readProjectState(workDir: string, tenantId: string): Promise<ProjectState | undefined> {
  if (!ID_PATTERN.test(tenantId)) return undefined;
  try {
    const s = JSON.parse(await readFile(join(workDir, "tenants", tenantId, STATE_FILE), "utf8")) as ProjectState;
    return s.schema_version === "v1" && s.tenant_id === tenantId ? s : undefined;
  } catch {
    return undefined;
  }
}

/** Every recorded project under the work dir. Unreadable records are skipped. */
export async function readProjectStates(workDir: string): Promise<ProjectState[]> {
  let names: string[];
  try {
    names = await readdir(join(workDir, "tenants"));
  } catch {
    return [];
  }
  const out: ProjectState[] = [];
  for (const name of names.sort()) {
    const s = await readProjectState(workDir, name);
    if (s) out.push(s);
  }
  return out;
}

/** The recorded projects (or one tenant's) as the engine shows them now; throws when the engine does not answer. */
export async function observeProjects(workDir: string, tenantId?: string): Promise<ProjectObservation[]> {
  const out: ProjectObservation[] = [];
  const states =
    tenantId === undefined
      ? await readProjectStates(workDir)
      : [await readProjectState(workDir, tenantId)].filter((s): s is ProjectState => s !== undefined);
  for (const s of states) {
    const seen = s.services.length === 0 ? { byService: new Map() } : await readProjectContainers(s.project_name);
    out.push(
      create(ProjectObservationSchema, {
        projectName: s.project_name,
        tenantId: s.tenant_id,
        specHash: s.spec_hash,
        workOrderId: s.work_order_id,
        services: observeServices(s.services, seen),
      }),
    );
  }
  return out;
}

/**
 * What a heartbeat reports of the recorded projects: with the engine, each as it shows them;
 * without, the same when none needs the engine to be observed (each has no services: process
 * modules only), else undefined, since then it cannot be told.
 */
export async function observeForHeartbeat(workDir: string, engine: boolean): Promise<ProjectObservation[] | undefined> {
  if (engine) return observeProjects(workDir);
  const states = await readProjectStates(workDir);
  return states.every((s) => s.services.length === 0) ? observeProjects(workDir) : undefined;
}

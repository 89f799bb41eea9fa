// A rollback's spec comes from a deployment record or a finished order, and both are kept without
// secret values (one copy of a secret lives in the resource that holds it, not one per apply). The
// rollback runs the old spec with the secrets it has now: each placeholder is filled from the same
// place (compose path or env key) in the tenant's current spec. That is also what a rollback should
// do with a rotated credential: the old one may be revoked. When the secrets did not change, the
// restored project is byte for byte the one deployed, with the same spec hash.
import { clone, create } from "@bufbuild/protobuf";
import { ComposeProjectSchema, type ComposeProject, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderDesiredStateSchema, type WorkOrderDesiredState } from "../../gen/skipper/v1/work_order_pb.js";
import { hasPlaceholder, restoreCompose, restoreEnv, SecretsUnavailable } from "../../common/logging/restore-secrets.js";
import { conflict } from "../base/errors.js";
import { projectHash, renderProject } from "./render-project.js";
import { missingSecret, registrySecrets, secretUses } from "../resources/secret-refs.js";
import { allResources } from "../store/each-page.js";
import type { Store } from "../store/store.js";

/**
 * `ds` with the secret values its project lacks taken from the tenant's current spec, and its
 * references to secret resources checked against the secrets the tenant has now (the node gets
 * their current values, and logs in with the tenant's current registry credentials).
 */
export async function withCurrentSecrets(store: Store, tenant: Resource, ds: WorkOrderDesiredState): Promise<WorkOrderDesiredState> {
  const withRefs = await withCurrentSecretResources(store, tenant, ds);
  const stored = withRefs.composeProject;
  if (!stored || !lacksSecrets(stored)) return withRefs;
  const current = await currentProject(store, tenant);
  let project: ComposeProject;
  try {
    project = create(ComposeProjectSchema, {
      projectName: stored.projectName,
      composeFile: restoreCompose(stored.composeFile, current.composeFile),
      env: restoreEnv(stored.env, current.env),
      secretEnv: stored.secretEnv,
      secretFiles: stored.secretFiles,
    });
  } catch (e) {
    if (!(e instanceof SecretsUnavailable)) throw e;
    throw conflict(`the spec to roll back to needs secrets tenant ${tenant.id} no longer has (${e.missing.join(", ")})`, {
      tenant_id: tenant.id,
      reason: "SECRETS_UNAVAILABLE",
      missing: e.missing.join(", "),
    });
  }
  const out = clone(WorkOrderDesiredStateSchema, withRefs);
  out.composeProject = project;
  out.specHash = projectHash(project, ds.composeServices, out, ds.processes, ds.routes);
  return out;
}

// The secret resources the project names must still exist with their values (else CONFLICT,
// SECRETS_UNAVAILABLE); the order lists them at their versions now, and the tenant's registry
// credentials as they are now. The spec hash stays the one deployed.
async function withCurrentSecretResources(store: Store, tenant: Resource, ds: WorkOrderDesiredState): Promise<WorkOrderDesiredState> {
  const p = ds.composeProject;
  const refs = [...Object.values(p?.secretEnv ?? {}), ...Object.values(p?.secretFiles ?? {})];
  const secrets = new Map(
    (await allResources(store, { resourceType: "secret", tenantId: tenant.id, pageSize: 500 })).map((r) => [r.id, r]),
  );
  const registries = registrySecrets(secrets);
  if (refs.length === 0 && registries.length === 0 && ds.secretUses.length === 0 && ds.registrySecretIds.length === 0) return ds;
  const missing = missingSecret(
    refs.map((ref) => ({ field: "compose_project", ref })),
    secrets,
  );
  if (missing) {
    throw conflict(`the spec to roll back to needs secrets tenant ${tenant.id} no longer has (${missing})`, {
      tenant_id: tenant.id,
      reason: "SECRETS_UNAVAILABLE",
      missing,
    });
  }
  const out = clone(WorkOrderDesiredStateSchema, ds);
  out.secretUses = secretUses(refs, registries, secrets);
  out.registrySecretIds = registries.map((r) => r.id);
  return out;
}

function lacksSecrets(p: ComposeProject): boolean {
  return hasPlaceholder(p.composeFile) || Object.values(p.env).some(hasPlaceholder);
}

// The tenant's project as it would render now with all its services, wherever they are placed:
// secrets sit at the same compose paths on every node.
async function currentProject(store: Store, tenant: Resource): Promise<ComposeProject> {
  const services = await allResources(store, { resourceType: "service", tenantId: tenant.id, pageSize: 500 });
  return renderProject({ tenant, services, networks: new Map(), volumes: new Map(), limits: new Map() }).project;
}

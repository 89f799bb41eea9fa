// What the controller knows of each resource kind, one entry each, in a table the compiler checks
// for completeness (a kind of common/resource-kinds.ts without an entry here does not build):
// the rules its spec obeys beyond the contract's types, the resources it names, which tenants'
// passes a change of it may move, whether the reconciler writes its convergence, and whether
// deleting it may remove data on nodes. Everything else that asks "what kind is this?" derives
// from this table or from common/resource-kinds.ts.
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { type RESOURCE_KINDS, RESOURCE_TYPES, typeOfCase, type ResourceType, type SpecOf } from "../../common/resource-kinds.js";
import type { ResourceSpec } from "../../gen/skipper/v1/resource_pb.js";
import { checkFreezeSpec, checkNodeSpec, checkSecretSpec, checkServiceSpec, checkTenantSpec, checkTenantRef } from "./resource-rules.js";
import { secretRefsOf } from "./secret-refs.js";
import { checkProcessModuleSpec } from "./process-rules.js";
import { checkAgentUpdateSpec } from "./agent-update-rules.js";
import { checkArtifactSpec, checkDeliverySpec, checkEnvironmentSpec, checkGitSourceSpec } from "./delivery-rules.js";

/** One outgoing reference and the request field it came from. */
export interface Reference {
  type: ResourceType;
  id: string;
  field: string;
  /** A secret reference's value name: the secret must hold it. */
  key?: string;
}

type CaseOf<T extends ResourceType> = (typeof RESOURCE_KINDS)[T]["case"];

/** The controller's facts of one kind. */
export interface ControllerKind<T extends ResourceType> {
  /**
   * Field rules of its spec the contract's types do not say (ids, names, sizes, policies):
   * throws INVALID_REQUEST naming the field. Checked before anything is written; "none" when
   * the contract's types are the whole rule. `id` is the resource's (already a valid id).
   */
  readonly check: ((spec: SpecOf<CaseOf<T>>, id: string) => void) | "none";
  /**
   * The resources its desired state names, each with its request field (they must exist when
   * it is written, and hold it back from deletion). Absent: it names none.
   */
  readonly references?: (spec: SpecOf<CaseOf<T>>, r: Resource) => Reference[];
  /**
   * Which tenants' reconcile passes a change of it may move: its own tenant's, every tenant's
   * (what it says applies by label or across tenants), or none (the controller's own records).
   */
  readonly wakes: "its tenant" | "every tenant" | "none";
  /** Whether the reconciler writes its convergence (the others' is derived when read). */
  readonly reconciled: boolean;
  /** Whether nodes hold data of it that a delete with delete_data removes. */
  readonly holdsData: boolean;
}

/** Every kind's controller facts. */
export const CONTROLLER_KINDS: { readonly [T in ResourceType]: ControllerKind<T> } = {
  // A process's artifact_id is not a reference: an artifact is its tenant's, so a tenant and the
  // artifact it runs could never both be written first. An artifact no environment of the tenant
  // promotes leaves the tenant PROMOTION_PENDING saying so (delivery/resolve/).
  tenant: {
    check: checkTenantSpec,
    references: (spec, r) => [
      ...secretReferences(r),
      ...Object.entries(spec.compose?.artifactImages ?? {}).flatMap(([name, a]) =>
        ref("artifact", a, `tenant.compose.artifact_images.${name}`),
      ),
    ],
    wakes: "its tenant",
    reconciled: true,
    holdsData: false,
  },
  // Nodes carry placement labels: any tenant may move.
  // An SSH node's key is the fleet's (a secret of no tenant): a tenant's secret never leaves for a relay.
  node: {
    check: checkNodeSpec,
    references: (spec) =>
      spec.ssh?.keySecret && spec.ssh.keySecret.secretId !== ""
        ? [
            {
              type: "secret",
              id: spec.ssh.keySecret.secretId,
              key: spec.ssh.keySecret.key,
              field: "desired_state.node.ssh.key_secret.secret_id",
            },
          ]
        : [],
    wakes: "every tenant",
    reconciled: false,
    holdsData: false,
  },
  service: {
    check: checkServiceSpec,
    references: (spec, r) => [
      ...ref("tenant", spec.tenantId, "service.tenant_id"),
      ...refs("network", spec.networkIds, "service.network_ids"),
      ...refs("volume", spec.volumeIds, "service.volume_ids"),
      ...ref("resource_limits", spec.resourceLimitsId, "service.resource_limits_id"),
      ...refs("service", spec.dependsOn, "service.depends_on"),
      ...ref("artifact", spec.artifactId, "service.artifact_id"),
      ...secretReferences(r),
    ],
    wakes: "its tenant",
    reconciled: true,
    holdsData: true,
  },
  deployment: { check: "none", wakes: "none", reconciled: false, holdsData: false },
  // Limits apply by label.
  resource_limits: { check: "none", wakes: "every tenant", reconciled: false, holdsData: false },
  network: {
    check: (spec) => checkTenantRef(spec.tenantId, "desired_state.network.tenant_id"),
    references: (spec) => ref("tenant", spec.tenantId, "network.tenant_id"),
    wakes: "its tenant",
    reconciled: false,
    holdsData: false,
  },
  volume: {
    check: (spec) => checkTenantRef(spec.tenantId, "desired_state.volume.tenant_id"),
    references: (spec) => ref("tenant", spec.tenantId, "volume.tenant_id"),
    wakes: "its tenant",
    reconciled: false,
    holdsData: true,
  },
  rollout: { check: "none", wakes: "none", reconciled: false, holdsData: false },
  // A freeze may cover any tenant's nodes.
  freeze: { check: checkFreezeSpec, wakes: "every tenant", reconciled: false, holdsData: false },
  secret: {
    check: checkSecretSpec,
    references: (spec) => ref("tenant", spec.tenantId, "secret.tenant_id"),
    wakes: "its tenant",
    reconciled: false,
    holdsData: false,
  },
  // The promotion loop has its own triggers (controller/promotion/): a change of these moves a
  // tenant only through its environment's status.
  artifact: {
    check: checkArtifactSpec,
    references: (spec) => [
      ...ref("tenant", spec.tenantId, "artifact.tenant_id"),
      ...(spec.source.case === "image" ? ref("secret", spec.source.value.registrySecretId, "artifact.image.registry_secret_id") : []),
    ],
    wakes: "none",
    reconciled: false,
    holdsData: false,
  },
  artifact_version: {
    check: "none",
    references: (spec) => ref("artifact", spec.artifactId, "artifact_version.artifact_id"),
    wakes: "none",
    reconciled: false,
    holdsData: false,
  },
  delivery: {
    check: checkDeliverySpec,
    references: (spec) => spec.releases.flatMap((g, i) => refs("artifact", g.artifactIds, `delivery.releases[${i}].artifact_ids`)),
    wakes: "none",
    reconciled: false,
    holdsData: false,
  },
  // Its tenants resolve their artifacts through it, by id and by label.
  environment: {
    check: checkEnvironmentSpec,
    references: (spec) => [
      ...ref("delivery", spec.deliveryId, "environment.delivery_id"),
      ...refs("tenant", spec.tenantIds, "environment.tenant_ids"),
      ...refs("artifact", spec.artifactIds, "environment.artifact_ids"),
      ...spec.dependsOn.flatMap((d, i) => ref("environment", d.environmentId, `environment.depends_on[${i}].environment_id`)),
    ],
    wakes: "every tenant",
    reconciled: false,
    holdsData: false,
  },
  // Its webhook's secret is the fleet's (a secret of no tenant).
  git_source: {
    check: checkGitSourceSpec,
    references: (spec) =>
      spec.webhookSecret && spec.webhookSecret.secretId !== ""
        ? [
            {
              type: "secret",
              id: spec.webhookSecret.secretId,
              key: spec.webhookSecret.key,
              field: "desired_state.git_source.webhook_secret.secret_id",
            },
          ]
        : [],
    wakes: "none",
    reconciled: false,
    holdsData: false,
  },
  // The process reconciler (reconcile/process-pass.ts) has its own loop and writes its status;
  // uninstalling is not done (its versions stay on the nodes, stopped), so it holds no data.
  process: { check: checkProcessModuleSpec, wakes: "none", reconciled: false, holdsData: false },
  // Written by an upload (boundary/agent-version-route.ts), which checks and signs the bundle.
  agent_version: { check: "none", wakes: "none", reconciled: false, holdsData: false },
  // The agent update pass (reconcile/agent-update-pass.ts) has its own loop and writes its status.
  agent_update: {
    check: checkAgentUpdateSpec,
    references: (spec) => ref("agent_version", spec.version, "agent_update.version"),
    wakes: "none",
    reconciled: false,
    holdsData: false,
  },
};

/** Checks a spec's field rules, by its kind (INVALID_REQUEST naming the field). */
export function checkSpecFields(spec: ResourceSpec, id: string): void {
  const k = spec.kind;
  if (!k.case) return;
  const check = CONTROLLER_KINDS[typeOfCase(k.case)].check as ((spec: unknown, id: string) => void) | "none";
  if (check !== "none") check(k.value, id);
}

/** The references a resource's desired state makes. */
export function referencesOf(r: Resource): Reference[] {
  const k = r.desiredState?.kind;
  if (!k?.case) return [];
  const of = CONTROLLER_KINDS[typeOfCase(k.case)].references as ((spec: unknown, r: Resource) => Reference[]) | undefined;
  return of ? of(k.value, r) : [];
}

/** Kinds that can name others: what to scan for dependents (in the table's order). */
export const REFERRING_KINDS: readonly ResourceType[] = RESOURCE_TYPES.filter((t) => CONTROLLER_KINDS[t].references !== undefined);

// A reference to `type` from a single-id field (an empty id names nothing).
function ref(type: ResourceType, id: string, field: string): Reference[] {
  return id === "" ? [] : [{ type, id, field: `desired_state.${field}` }];
}

// References to `type` from a list field, each entry with its index.
function refs(type: ResourceType, ids: readonly string[], field: string): Reference[] {
  return ids.flatMap((id, i) => ref(type, id, `${field}[${i}]`));
}

// A tenant's or service's references to secret values (field ...secret_env.NAME.secret_id).
function secretReferences(r: Resource): Reference[] {
  return secretRefsOf(r).map(({ field, ref }) => ({ type: "secret", id: ref.secretId, key: ref.key, field: `${field}.secret_id` }));
}

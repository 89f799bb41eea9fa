// Rules every stored resource obeys, checked at the boundary before anything is written: the
// desired_state kind matches resource_type, ids are well-formed, and fields owned by agents
// (current_state, last_applied_state) are not set by admins.
import { checkSecretRefs } from "./secret-rules.js";
import { REGISTRY_HOST } from "../../common/action-rules.js";
import { checkFreeze, checkRolloutPolicy, checkWindows } from "./rollout-rules.js";
import { checkSafety } from "./safety-rules.js";
import { checkComposeFile } from "./compose-rules.js";
import { equals } from "@bufbuild/protobuf";
import { ResourceSpecSchema, ResourceStatusSchema, type ResourceSpec, type ResourceStatus } from "../../gen/skipper/v1/resource_pb.js";
import { invalid } from "../errors.js";
import type { ResourceType } from "../../common/ids.js";
import { checkId } from "../id-checks.js";
import { checkLabelKey, checkSelector } from "../store/label-selector.js";

const CASE_OF: Record<ResourceType, NonNullable<ResourceSpec["kind"]["case"]>> = {
  tenant: "tenant",
  node: "node",
  service: "service",
  deployment: "deployment",
  resource_limits: "resourceLimits",
  network: "network",
  volume: "volume",
  rollout: "rollout",
  freeze: "freeze",
  secret: "secret",
};

/** The oneof case name used for a resource type's spec and status. */
export function kindCase(type: ResourceType): NonNullable<ResourceSpec["kind"]["case"]> {
  return CASE_OF[type];
}

/** Checks that a spec is present and of the resource's own kind. */
export function checkSpecKind(type: ResourceType, spec: ResourceSpec | undefined, field: string): ResourceSpec {
  if (!spec || spec.kind.case === undefined) {
    throw invalid(`${field} must set the '${type}' member`, { field });
  }
  if (spec.kind.case !== CASE_OF[type]) {
    throw invalid(`${field} is a '${spec.kind.case}' state but the resource type is '${type}'`, { field });
  }
  return spec;
}

/** Checks that an observed status (if set) is of the resource's own kind. */
export function checkStatusKind(type: ResourceType, status: ResourceStatus | undefined, field: string): void {
  if (status && status.kind.case !== undefined && status.kind.case !== CASE_OF[type]) {
    throw invalid(`${field} is a '${status.kind.case}' state but the resource type is '${type}'`, { field });
  }
}

/** Validates ids referenced from a spec (tenant, node, service, network, volume, limits), and a tenant's deploy safety. */
export function checkReferences(spec: ResourceSpec): void {
  const k = spec.kind;
  const ref = (v: string, field: string) => v !== "" && checkId(v, field);
  switch (k.case) {
    case "tenant":
      ref(k.value.deploymentPolicy?.targetNodeId ?? "", "desired_state.tenant.deployment_policy.target_node_id");
      k.value.serviceIds.forEach((s, i) => ref(s, `desired_state.tenant.service_ids[${i}]`));
      if (k.value.compose && k.value.compose.projectName !== "") checkProjectName(k.value.compose.projectName);
      checkComposeFile(k.value.compose?.composeFile ?? "");
      if (k.value.compose) {
        const c = k.value.compose;
        checkSecretRefs("desired_state.tenant.compose", c.env, c.secretEnv, c.secretFiles);
        checkPublicEnv("desired_state.tenant.compose.public_env", c.publicEnv);
        if (c.composeFile.trim() === "" && Object.keys(c.secretEnv).length + Object.keys(c.secretFiles).length > 0)
          throw invalid("desired_state.tenant.compose: secret_env and secret_files need a compose_file (services take their own)", {
            field: "desired_state.tenant.compose.compose_file",
          });
      }
      checkSafety(k.value.safety, "desired_state.tenant.safety");
      checkRolloutPolicy(k.value.rollout, "desired_state.tenant.rollout");
      checkWindows(k.value.maintenanceWindows, "desired_state.tenant.maintenance_windows");
      if ((k.value.pin?.reason.length ?? 0) > 1024)
        throw invalid("desired_state.tenant.pin.reason must be at most 1024 characters", { field: "desired_state.tenant.pin.reason" });
      break;
    case "service":
      ref(k.value.tenantId, "desired_state.service.tenant_id");
      k.value.networkIds.forEach((s, i) => ref(s, `desired_state.service.network_ids[${i}]`));
      k.value.volumeIds.forEach((s, i) => ref(s, `desired_state.service.volume_ids[${i}]`));
      ref(k.value.resourceLimitsId, "desired_state.service.resource_limits_id");
      checkSecretRefs("desired_state.service", k.value.env, k.value.secretEnv, k.value.secretFiles);
      checkPublicEnv("desired_state.service.public_env", k.value.publicEnv);
      break;
    case "network":
    case "volume":
      ref(k.value.tenantId, `desired_state.${k.case}.tenant_id`);
      break;
    case "secret":
      ref(k.value.tenantId, "desired_state.secret.tenant_id");
      if (k.value.registry !== "" && !REGISTRY_HOST.test(k.value.registry))
        throw invalid("desired_state.secret.registry must be a registry host (host or host:port, lowercase), e.g. registry.example.com", {
          field: "desired_state.secret.registry",
        });
      break;
    case "freeze":
      checkFreeze(k.value, "desired_state.freeze");
      break;
    case "node":
      checkSelector(k.value.labels, "desired_state.node.labels");
      checkTrustedKeys(k.value.trustedLabelKeys, "desired_state.node.trusted_label_keys");
      break;
    default:
      break;
  }
}

/** Checks a node's trusted_label_keys: label keys, each once. */
export function checkTrustedKeys(keys: string[], field: string): void {
  keys.forEach((k, i) => checkLabelKey(k, `${field}[${i}]`));
  if (new Set(keys).size !== keys.length) throw invalid(`${field} lists a key twice`, { field });
}

/** Compose project names become directory and engine names: lowercase, digits, '-' and '_'. */
export function checkProjectName(name: string): void {
  if (!/^[a-z0-9][a-z0-9_-]{0,62}$/.test(name)) {
    throw invalid("compose project_name must match ^[a-z0-9][a-z0-9_-]{0,62}$", {
      field: "desired_state.tenant.compose.project_name",
    });
  }
}

/** True when a status message carries nothing. */
export function isEmptyStatus(s: ResourceStatus | undefined): boolean {
  return !s || s.kind.case === undefined;
}

/** True when two specs are equal (absent == empty). */
export function sameSpec(a: ResourceSpec | undefined, b: ResourceSpec | undefined): boolean {
  if (!a || !b) return (a?.kind.case ?? undefined) === (b?.kind.case ?? undefined);
  return equals(ResourceSpecSchema, a, b);
}

/** True when two observed statuses are equal. */
export function sameStatus(a: ResourceStatus | undefined, b: ResourceStatus | undefined): boolean {
  if (!a || !b) return (a?.kind.case ?? undefined) === (b?.kind.case ?? undefined);
  return equals(ResourceStatusSchema, a, b);
}

// Names of variables viewers may see: variable names, at most 256 of them.
function checkPublicEnv(field: string, names: string[]): void {
  if (names.length > 256) throw invalid(`${field} lists more than 256 names`, { field });
  for (const name of names) {
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(name))
      throw invalid(`${field}: ${JSON.stringify(name.slice(0, 64))} is not a variable name`, { field });
  }
}

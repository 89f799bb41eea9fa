// Rules every stored resource obeys, checked at the boundary before anything is written: the
// desired_state kind matches resource_type, and each kind's own field rules (ids well-formed,
// names, sizes, policies), which controller/resources/kinds.ts files by kind.
import { checkSshTarget } from "./ssh-target-rules.js";
import { isCapabilityName } from "../../common/node-capabilities.js";
import { checkSecretRefs } from "./secret-rules.js";
import { REGISTRY_HOST } from "../../common/action-rules.js";
import { checkFreeze, checkRolloutPolicy, checkWindows } from "./rollout-rules.js";
import { checkSafety } from "./safety-rules.js";
import { checkTenantProcesses } from "./process-rules.js";
import { checkRoutes, checkUpdateOrder } from "./proxy-rules.js";
import { checkComposeFile } from "./compose-rules.js";
import { imageReferenceProblem } from "../../common/image-reference.js";
import { equals } from "@bufbuild/protobuf";
import {
  ResourceSpecSchema,
  ResourceStatusSchema,
  type NodeSpec,
  type ResourceSpec,
  type ResourceStatus,
  type ServiceSpec,
  type TenantSpec,
} from "../../gen/skipper/v1/resource_pb.js";
import type { FreezeSpec } from "../../gen/skipper/v1/rollout_pb.js";
import type { SecretSpec } from "../../gen/skipper/v1/secret_pb.js";
import { invalid } from "../base/errors.js";
import { specCase, type ResourceType } from "../../common/resource-kinds.js";
import { checkId } from "../base/id-checks.js";
import { checkLabelKey, checkSelector } from "../domain/label-selector.js";

/** Checks that a spec is present and of the resource's own kind. */
export function checkSpecKind(type: ResourceType, spec: ResourceSpec | undefined, field: string): ResourceSpec {
  if (!spec || spec.kind.case === undefined) {
    throw invalid(`${field} must set the '${type}' member`, { field });
  }
  if (spec.kind.case !== specCase(type)) {
    throw invalid(`${field} is a '${spec.kind.case}' state but the resource type is '${type}'`, { field });
  }
  return spec;
}

/** Checks that an observed status (if set) is of the resource's own kind. */
export function checkStatusKind(type: ResourceType, status: ResourceStatus | undefined, field: string): void {
  if (status && status.kind.case !== undefined && status.kind.case !== specCase(type)) {
    throw invalid(`${field} is a '${status.kind.case}' state but the resource type is '${type}'`, { field });
  }
}

// The field rules of each kind's spec (controller/resources/kinds.ts files them by kind).
const ref = (v: string, field: string) => v !== "" && checkId(v, field);

// A placement's required capabilities: names (common/node-capabilities.ts), at most 32.
function checkRequired(names: string[], field: string): void {
  if (names.length > 32) throw invalid(`${field} holds at most 32 names`, { field });
  const bad = names.find((n) => !isCapabilityName(n));
  if (bad !== undefined)
    throw invalid(`${field}: ${JSON.stringify(bad.slice(0, 64))} is not a capability name (e.g. compose.deploy)`, { field });
}

/** A tenant's ids, compose project, secrets, safety, rollout policy, windows and pin. */
export function checkTenantSpec(t: TenantSpec): void {
  ref(t.deploymentPolicy?.targetNodeId ?? "", "desired_state.tenant.deployment_policy.target_node_id");
  checkRequired(t.deploymentPolicy?.requiredCapabilities ?? [], "desired_state.tenant.deployment_policy.required_capabilities");
  t.serviceIds.forEach((s, i) => ref(s, `desired_state.tenant.service_ids[${i}]`));
  if (t.compose && t.compose.projectName !== "") checkProjectName(t.compose.projectName);
  checkComposeFile(t.compose?.composeFile ?? "");
  if (t.compose) {
    const c = t.compose;
    checkSecretRefs("desired_state.tenant.compose", c.env, c.secretEnv, c.secretFiles);
    checkPublicEnv("desired_state.tenant.compose.public_env", c.publicEnv);
    checkArtifactImages(c.artifactImages, c.composeFile);
    if (c.composeFile.trim() === "" && Object.keys(c.secretEnv).length + Object.keys(c.secretFiles).length > 0)
      throw invalid("desired_state.tenant.compose: secret_env and secret_files need a compose_file (services take their own)", {
        field: "desired_state.tenant.compose.compose_file",
      });
  }
  checkTenantProcesses(t.processes, "desired_state.tenant.processes");
  checkRoutes(t.routes, t.compose?.composeFile ?? "", "desired_state.tenant.routes");
  checkSafety(t.safety, "desired_state.tenant.safety");
  checkRolloutPolicy(t.rollout, "desired_state.tenant.rollout");
  checkWindows(t.maintenanceWindows, "desired_state.tenant.maintenance_windows");
  if ((t.pin?.reason.length ?? 0) > 1024)
    throw invalid("desired_state.tenant.pin.reason must be at most 1024 characters", { field: "desired_state.tenant.pin.reason" });
}

/** A service's ids, secret references, public variable names and image reference. */
export function checkServiceSpec(s: ServiceSpec): void {
  ref(s.tenantId, "desired_state.service.tenant_id");
  checkRequired(s.placement?.requiredCapabilities ?? [], "desired_state.service.placement.required_capabilities");
  s.networkIds.forEach((id, i) => ref(id, `desired_state.service.network_ids[${i}]`));
  s.volumeIds.forEach((id, i) => ref(id, `desired_state.service.volume_ids[${i}]`));
  ref(s.resourceLimitsId, "desired_state.service.resource_limits_id");
  checkSecretRefs("desired_state.service", s.env, s.secretEnv, s.secretFiles);
  checkPublicEnv("desired_state.service.public_env", s.publicEnv);
  checkUpdateOrder(s.updateOrder, "desired_state.service.update_order");
  if (s.artifactId !== "") {
    checkId(s.artifactId, "desired_state.service.artifact_id");
    if (s.image !== "")
      throw invalid("desired_state.service.image must be empty when artifact_id is set: the artifact's promoted version is the image", {
        field: "desired_state.service.image",
      });
  }
  // Empty: the service describes one of its tenant's own compose file, which names the image.
  const problem = s.image === "" ? undefined : imageReferenceProblem(s.image);
  if (problem)
    throw invalid(`desired_state.service.image ${JSON.stringify(s.image.slice(0, 256))} ${problem}`, {
      field: "desired_state.service.image",
    });
}

// Compose services whose image is an artifact's promoted version: names as Compose spells them.
const COMPOSE_SERVICE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/;
function checkArtifactImages(images: Record<string, string>, composeFile: string): void {
  const field = "desired_state.tenant.compose.artifact_images";
  const names = Object.keys(images);
  if (names.length === 0) return;
  if (composeFile.trim() === "") throw invalid(`${field} needs a compose_file whose services it names`, { field });
  if (names.length > 64) throw invalid(`${field} may name at most 64 services`, { field });
  for (const [name, artifact] of Object.entries(images)) {
    if (!COMPOSE_SERVICE.test(name))
      throw invalid(`${field}: ${JSON.stringify(name.slice(0, 64))} is not a compose service name`, {
        field: `${field}.${name.slice(0, 64)}`,
      });
    checkId(artifact, `${field}.${name}`);
  }
}

/** A tenant id named by a kind's spec (network, volume). */
export function checkTenantRef(tenantId: string, field: string): void {
  ref(tenantId, field);
}

/** A secret's tenant and registry host. */
export function checkSecretSpec(s: SecretSpec): void {
  ref(s.tenantId, "desired_state.secret.tenant_id");
  if (s.registry !== "" && !REGISTRY_HOST.test(s.registry))
    throw invalid("desired_state.secret.registry must be a registry host (host or host:port, lowercase), e.g. registry.example.com", {
      field: "desired_state.secret.registry",
    });
}

/** A freeze's scope and window. */
export function checkFreezeSpec(f: FreezeSpec): void {
  checkFreeze(f, "desired_state.freeze");
}

/** A node's labels and trusted label keys. */
export function checkNodeSpec(n: NodeSpec): void {
  checkSelector(n.labels, "desired_state.node.labels");
  checkTrustedKeys(n.trustedLabelKeys, "desired_state.node.trusted_label_keys");
  if (n.ssh) checkSshTarget(n.ssh);
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

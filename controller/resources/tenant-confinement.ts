// What confines a tenant whoever writes it (proto TenantPolicy): which nodes it may run on and
// what its compose files may ask of a host. An admin whose scope is every tenant sets the policy;
// the rules here hold every other write to it, when the write is made:
//   - nobody else may set or change a tenant's policy;
//   - a caller whose scope is limited to some tenants may change a tenant's (or its service's)
//     placement only inside the tenant's node pool, and not at all while it has none;
//   - a target node outside the pool is refused to everyone;
//   - a compose file (and a volume's or network's driver) may ask only what the policy's level
//     allows; with no level set, a scoped caller may add nothing RESTRICTED forbids.
// The reconciler confines placement again on every pass (nodePool), and the node checks the
// compose project against the policy before it runs anything (common/compose-policy.ts).
import { equals } from "@bufbuild/protobuf";
import { Permission } from "../../gen/skipper/v1/access_pb.js";
import {
  ComposePolicyLevel,
  DeploymentPolicySchema,
  type DeploymentPolicy,
  type Resource,
  type TenantPolicy,
  TenantPolicySchema,
} from "../../gen/skipper/v1/resource_pb.js";
import { composeViolations, levelName, type ComposeRules } from "../../common/compose-policy.js";
import { holds } from "../auth/admission.js";
import type { CallInfo } from "../base/context.js";
import { forbidden } from "../base/errors.js";
import type { Store } from "../store/store.js";
import { inNodePool } from "./node-pool.js";

const POLICY_FIELD = "desired_state.tenant.policy";

/** Throws FORBIDDEN unless `call` may turn `before` (absent: a create) into `next` under its tenant's policy. */
export async function checkConfinement(
  call: Pick<CallInfo, "principal" | "tenants">,
  store: Pick<Store, "getResource">,
  before: Resource | undefined,
  next: Resource,
): Promise<void> {
  const kind = next.desiredState?.kind;
  if (!kind) return;
  const scoped = !call.tenants.unrestricted;
  switch (kind.case) {
    case "tenant": {
      const old = before?.desiredState?.kind.case === "tenant" ? before.desiredState.kind.value : undefined;
      const policy = kind.value.policy;
      if (!samePolicy(old?.policy, policy) && !(holds(call.principal, Permission.ADMIN) && !scoped)) {
        throw forbidden(`a tenant's policy is set by an admin whose scope is every tenant`, { field: POLICY_FIELD, permission: "admin" });
      }
      await checkPlacement(
        store,
        scoped,
        next.id,
        policy,
        old?.deploymentPolicy,
        kind.value.deploymentPolicy,
        "desired_state.tenant.deployment_policy",
      );
      checkCompose(
        scoped,
        policy,
        old?.compose?.composeFile ?? "",
        kind.value.compose?.composeFile ?? "",
        "desired_state.tenant.compose.compose_file",
      );
      return;
    }
    case "service": {
      const old = before?.desiredState?.kind.case === "service" ? before.desiredState.kind.value : undefined;
      const policy = await policyOf(store, kind.value.tenantId);
      await checkPlacement(
        store,
        scoped,
        kind.value.tenantId,
        policy,
        old?.placement,
        kind.value.placement,
        "desired_state.service.placement",
      );
      return;
    }
    case "volume":
    case "network": {
      const old = before?.desiredState?.kind.case === kind.case ? before.desiredState.kind.value.driver : "";
      const policy = await policyOf(store, kind.value.tenantId);
      // The driver, as the compose file the node is given declares it.
      const file = (driver: string) => `${kind.case}s:\n  x:\n    driver: ${JSON.stringify(driver)}\n`;
      checkCompose(scoped, policy, file(old), file(kind.value.driver), `desired_state.${kind.case}.driver`);
      return;
    }
    default:
      return;
  }
}

/** The policy of tenant `tenantId` (undefined when it has none, or is absent). */
async function policyOf(store: Pick<Store, "getResource">, tenantId: string): Promise<TenantPolicy | undefined> {
  const t = tenantId === "" ? undefined : await store.getResource("tenant", tenantId);
  return t?.desiredState?.kind.case === "tenant" ? t.desiredState.kind.value.policy : undefined;
}

async function checkPlacement(
  store: Pick<Store, "getResource">,
  scoped: boolean,
  tenantId: string,
  policy: TenantPolicy | undefined,
  old: DeploymentPolicy | undefined,
  next: DeploymentPolicy | undefined,
  field: string,
): Promise<void> {
  const pool = policy?.nodeSelector ?? {};
  const hasPool = Object.keys(pool).length > 0;
  const changed = !equals(DeploymentPolicySchema, old ?? EMPTY_PLACEMENT, next ?? EMPTY_PLACEMENT);
  if (scoped && changed && !hasPool) {
    throw forbidden(
      `tenant ${tenantId} has no node pool: an admin sets ${POLICY_FIELD}.node_selector before a caller scoped to some tenants may place it`,
      { field, tenant_id: tenantId },
    );
  }
  const target = next?.targetNodeId ?? "";
  if (!hasPool || target === "" || !changed) return;
  const node = await store.getResource("node", target);
  if (!node || !inNodePool(node, pool)) {
    throw forbidden(`node ${target} is outside tenant ${tenantId}'s node pool (${selectorText(pool)})`, {
      field: `${field}.target_node_id`,
      node_id: target,
      tenant_id: tenantId,
    });
  }
}

function checkCompose(scoped: boolean, policy: TenantPolicy | undefined, oldFile: string, newFile: string, field: string): void {
  const level = policy?.compose?.level ?? ComposePolicyLevel.UNSPECIFIED;
  const rules: ComposeRules = {
    level: level === ComposePolicyLevel.UNSPECIFIED && scoped ? ComposePolicyLevel.RESTRICTED : level,
    allowedHostPaths: policy?.compose?.allowedHostPaths ?? [],
  };
  let found = composeViolations(newFile, rules);
  // With no level set, a scoped caller keeps what an admin wrote but may add nothing.
  if (level === ComposePolicyLevel.UNSPECIFIED && found.length > 0) {
    const had = new Set(composeViolations(oldFile, rules).map((v) => `${v.path}\0${v.rule}`));
    found = found.filter((v) => !had.has(`${v.path}\0${v.rule}`));
  }
  const first = found[0];
  if (!first) return;
  const why =
    level === ComposePolicyLevel.UNSPECIFIED ? "a caller scoped to some tenants writes at level restricted" : "the tenant's policy";
  throw forbidden(`${field}: ${first.message}; ${why} (${POLICY_FIELD}.compose)`, {
    field,
    path: first.path,
    rule: first.rule,
    level: levelName(rules.level),
    violations: found.map((v) => `${v.path}: ${v.rule}`),
  });
}

const EMPTY_PLACEMENT: DeploymentPolicy = {
  $typeName: "skipper.v1.DeploymentPolicy",
  targetNodeId: "",
  nodeSelector: {},
  requiredCapabilities: [],
};

function samePolicy(a: TenantPolicy | undefined, b: TenantPolicy | undefined): boolean {
  const empty = { $typeName: "skipper.v1.TenantPolicy", nodeSelector: {} } as TenantPolicy;
  return equals(TenantPolicySchema, a ?? empty, b ?? empty);
}

function selectorText(pool: Record<string, string>): string {
  return Object.entries(pool)
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
}

// Which environment a tenant follows: the environments that list it in tenant_ids or select it by
// its labels. Pure. A tenant follows at most one: its rendered spec carries one release, which
// the promotion loop reads back (TenantStatus.release) to learn that the environment runs it.
import type { EnvironmentSpec, EnvironmentStatus } from "../../../gen/skipper/v1/delivery_pb.js";
import { matchesTerms, parseLabelSelector } from "../../domain/label-selector.js";

/** An environment as resolution reads it. */
export interface EnvironmentView {
  id: string;
  spec: EnvironmentSpec;
  status: EnvironmentStatus;
}

/** The environments holding tenant `tenantId` (labels: its metadata labels), by id. */
export function environmentsOfTenant(
  tenantId: string,
  labels: Record<string, string>,
  envs: readonly EnvironmentView[],
): EnvironmentView[] {
  return envs
    .filter((e) => e.spec.tenantIds.includes(tenantId) || selects(e.spec.tenantSelector, labels))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
}

function selects(selector: string, labels: Record<string, string>): boolean {
  if (selector === "") return false;
  try {
    return matchesTerms(labels, parseLabelSelector(selector));
  } catch {
    // Checked when the environment was written; a selector that no longer parses selects nothing.
    return false;
  }
}

// A deployment's status (phase, result, times) is written in one place: every order transition
// that moves a deployment on goes through updateDeployment, or writes deploymentEdit with its step.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { DeploymentStatusSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { isSkipperError } from "../base/errors.js";
import type { ResourceEdit, Store } from "../store/store.js";

export type DeploymentStatusValue = Extract<NonNullable<Resource["currentState"]>["kind"], { case: "deployment" }>["value"];

/** Applies `mutate` to deployment `id`'s status; a deployment that is gone (or no id) is left alone. */
export async function updateDeployment(
  store: Store,
  id: string,
  mutate: (status: DeploymentStatusValue, dep: Resource) => void,
): Promise<void> {
  if (id === "") return;
  try {
    await store.updateResource("deployment", id, statusMutation(mutate));
  } catch (e) {
    if (isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND") return;
    throw e;
  }
}

/**
 * updateDeployment as an edit written with a work order's step (store.ts ResourceEdit): none
 * without an id; a deployment that is gone is passed over by the store.
 */
export function deploymentEdit(id: string, mutate: (status: DeploymentStatusValue, dep: Resource) => void): ResourceEdit[] {
  return id === "" ? [] : [{ resourceType: "deployment", id, mutate: statusMutation(mutate) }];
}

// What both make of `mutate`: the change of the stored deployment (its status made if it has none).
function statusMutation(mutate: (status: DeploymentStatusValue, dep: Resource) => void): (dep: Resource) => Resource {
  return (dep) => {
    if (dep.currentState?.kind.case !== "deployment") {
      dep.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "deployment", value: create(DeploymentStatusSchema) } };
    }
    const kind = dep.currentState!.kind;
    if (kind.case === "deployment") mutate(kind.value, dep);
    dep.updatedAt = timestampFromDate(new Date());
    return dep;
  };
}

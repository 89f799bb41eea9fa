// A deploy stores its deployment record and then its work order (order-issuer.ts). A crash
// between the two (crash point reconcile.after-deployment) leaves a deployment no order will ever
// finish, while the next pass issues a new deployment for the same target. At start-up, before
// the reconciler runs, such deployments are failed (ORDER_NOT_ISSUED) so none stays pending for ever.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { DeploymentPhase, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { recordEvents, transitionEventId } from "../events/event-recorder.js";
import { updateDeployment } from "../resources/deployment-status.js";
import { eachScannedResource } from "../store/each-page.js";
import type { Store } from "../store/store.js";

export const NOT_ISSUED = "ORDER_NOT_ISSUED";

/** Fails every pending deployment whose work order was never stored; returns how many. Call before the reconciler starts. */
export async function failUnissuedDeployments(store: Store, now: Date): Promise<number> {
  const orphans: Resource[] = [];
  for await (const d of eachScannedResource(store, { resourceType: "deployment", deploymentPhases: [DeploymentPhase.PENDING] })) {
    const s = d.currentState?.kind.case === "deployment" ? d.currentState.kind.value : undefined;
    if (s?.phase === DeploymentPhase.PENDING && !(await store.getWorkOrder(s.workOrderId))) orphans.push(d);
  }
  const message = "the controller stopped after storing this deployment and before storing its work order; nothing was sent";
  for (const d of orphans) {
    const spec = d.desiredState?.kind.case === "deployment" ? d.desiredState.kind.value : undefined;
    await updateDeployment(store, d.id, (s) => {
      s.phase = DeploymentPhase.FAILED;
      s.resultCode = NOT_ISSUED;
      s.message = message;
      s.finishedAt = timestampFromDate(now);
    });
    await recordEvents(store, [
      {
        id: transitionEventId(d.id, "deployment_failed"),
        type: "deployment_failed",
        requestId: d.metadata?.requestId ?? "",
        correlationId: d.metadata?.correlationId ?? "",
        resourceType: "deployment",
        resourceId: d.id,
        deploymentId: d.id,
        tenantId: spec?.tenantId,
        nodeId: spec?.nodeId,
        data: { code: NOT_ISSUED, message },
        at: now,
      },
    ]);
  }
  return orphans.length;
}

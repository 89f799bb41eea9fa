// Ids of work orders and deployments: UUIDv7, whose leading bits are the time of their making and
// which this process makes in increasing order, even within one millisecond. Orders and
// deployments are listed by (created_at, id) and by id; with random ids, two made in the same
// millisecond (one reconcile pass issues many with one `now`) came back in a random order, and
// the older of two pending orders was not always taken first.
import { v7 as uuidv7 } from "uuid";

/** A new work order's id. */
export function newWorkOrderId(): string {
  return uuidv7();
}

/** A new deployment's id. */
export function newDeploymentId(): string {
  return `deploy-${uuidv7()}`;
}

// What wakes the promotion loop, in one place: each method names something that happened and maps
// it to the environments whose plans may now differ. Environments are few (tens), and a pass that
// changes nothing writes nothing, so most changes wake them all; a tenant's release record wakes
// the environments it names. Nothing else adds to the loop's queue, apart from its own sweep and
// wake times.
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import type { TriggerWatcher } from "../reconcile/triggers.js";

/** Where the wakes go: the loop's queue (undefined on a controller whose loop does not run). */
export interface PromotionQueue {
  add(environmentId: string, trace?: Trace): void;
  addAll(): void;
}

/** The kinds whose change may move an environment's plan. */
const WAKING = new Set(["environment", "delivery", "artifact", "freeze", "tenant", "service", "rollout"]);

/** Maps changes to the environments to plan again. */
export class PromotionTriggers implements TriggerWatcher {
  constructor(private readonly queue: () => PromotionQueue | undefined) {}

  /** A resource written through the API (an environment, a freeze, a tenant's labels, ...). */
  resourceChanged(r: Resource): void {
    if (WAKING.has(r.resourceType)) this.queue()?.addAll();
  }

  /** An order ended: a verification's result counts now. */
  orderEnded(order: WorkOrder): void {
    if (order.id.startsWith("vrf-")) this.queue()?.addAll();
  }

  /** A version was recorded, marked bad or unmarked. */
  versionChanged(): void {
    this.queue()?.addAll();
  }

  /** An operator decided about an environment (it and those downstream of it may move). */
  environmentDecided(): void {
    this.queue()?.addAll();
  }

  /** A tenant's release record changed (another release rendered, converged since, or no longer). */
  tenantRelease(environmentIds: readonly string[]): void {
    for (const id of environmentIds) this.queue()?.add(id);
  }

  /** An environment's status was written by its pass: those downstream read it. */
  environmentWritten(): void {
    this.queue()?.addAll();
  }
}

// Claims are leases. This monitor finds running orders whose lease lapsed (the agent died, hung
// or lost the network and did not renew), puts them back to pending for the next claim, and
// records work_order_lease_expired. It also releases retry_pending orders whose next attempt is
// due. The order's fencing token keeps growing, so the old holder's
// late renewal or result is refused and the order still ends exactly once.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Store } from "../store/store.js";
import type { Logger } from "../logging/logger.js";
import { recordEvents } from "../events/event-recorder.js";
import { isSkipperError } from "../errors.js";
import { leaseLapsed, retryDue } from "../store/work-order-transitions.js";
import { Periodic } from "../periodic.js";

export interface LeaseDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  /** Told of every order put back to pending (lapsed lease or due retry). */
  onExpired: (order: WorkOrder) => void;
  everyMs?: number;
}

export class LeaseMonitor {
  private readonly periodic: Periodic;

  constructor(private readonly deps: LeaseDeps) {
    this.periodic = new Periodic(() => this.check(), deps.everyMs ?? 1000);
  }

  start(): void {
    this.periodic.start();
  }

  stop(): Promise<void> {
    return this.periodic.stop();
  }

  /** Puts every running order whose lease lapsed, and every due retry, back to pending. */
  async check(): Promise<number> {
    return (await this.expireLeases()) + (await this.releaseRetries());
  }

  private async releaseRetries(): Promise<number> {
    const now = this.deps.now();
    let released = 0;
    let pageToken = "";
    do {
      const page = await this.deps.store.listWorkOrders({ status: WorkOrderStatus.RETRY_PENDING, pageSize: 1000, pageToken });
      for (const o of page.items) {
        if (!retryDue(o, now)) continue;
        try {
          const back = await this.deps.store.releaseWorkOrderRetry(o.id, now);
          released++;
          this.deps.onExpired(back);
        } catch (e) {
          if (!(isSkipperError(e) && e.code === "WORK_ORDER_NOT_CLAIMABLE")) throw e;
        }
      }
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return released;
  }

  private async expireLeases(): Promise<number> {
    const now = this.deps.now();
    let expired = 0;
    let pageToken = "";
    do {
      const page = await this.deps.store.listWorkOrders({ status: WorkOrderStatus.RUNNING, pageSize: 1000, pageToken });
      for (const o of page.items) {
        if (!leaseLapsed(o, now)) continue;
        try {
          const back = await this.deps.store.expireWorkOrderLease(o.id, now);
          expired++;
          const claim = o.claim!;
          await recordEvents(this.deps.store, [
            {
              type: "work_order_lease_expired",
              requestId: o.requestId,
              correlationId: o.correlationId,
              resourceType: "work_order",
              resourceId: o.id,
              tenantId: o.target?.tenantId,
              nodeId: claim.nodeId,
              workOrderId: o.id,
              deploymentId: o.desiredState?.deploymentId,
              data: { fencing_token: claim.fencingToken.toString(), lease_expired_at: timestampDate(claim.leaseExpiresAt!).toISOString(), attempts: back.attempts.length },
            },
          ]);
          this.deps.logger.warn(
            { action: "work_order_lease_expired", result: "pending", node_id: claim.nodeId, tenant_id: o.target?.tenantId, work_order_id: o.id, metadata: { fencing_token: claim.fencingToken.toString() } },
            "lease lapsed; work order back to pending",
          );
          this.deps.onExpired(back);
        } catch (e) {
          // Renewed or finished since the listing: nothing to do.
          if (!(isSkipperError(e) && e.code === "WORK_ORDER_NOT_CLAIMABLE")) throw e;
        }
      }
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return expired;
  }
}

// Claims are leases. This monitor finds running orders whose lease lapsed (the agent died, hung
// or lost the network and did not renew), puts them back to pending for the next claim, and
// records work_order_lease_expired. It also releases retry_pending orders whose next attempt is
// due, and fails pending orders whose expires_at passed (EXPIRED). The order's fencing token
// keeps growing, so the old holder's late renewal or result is refused and the order still ends
// exactly once.
// A lease that lapsed while the controller was down is not the holder's fault: its renewals
// failed meanwhile. After a start, every lease gets one lease duration of grace to be renewed
// before it is judged, so a controller restart does not take running orders from live agents
// (which would run them a second time).
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import { leaseExpiredEvent } from "./order-outcome.js";
import { isSkipperError } from "../base/errors.js";
import { leaseLapsed, retryDue } from "../domain/work-order-transitions.js";
import { Periodic } from "../base/periodic.js";
import { expireOrder, expiredAt } from "./order-expiry.js";
import type { OutcomeDeps } from "./order-outcome.js";
import type { WorkOrderFilter } from "../store/store.js";
import type { ReconcileTriggers } from "../reconcile/triggers.js";
import type { OrderFeed } from "./order-feed.js";

export interface LeaseDeps extends OutcomeDeps {
  logger: Logger;
  now: () => Date;
  /** Rung for every order put back to pending (lapsed lease or due retry). */
  feed: OrderFeed;
  /** Told of orders that went back to pending or expired unclaimed. */
  triggers: ReconcileTriggers;
  everyMs?: number;
  /** The lease duration: the grace every lease gets after a start. */
  leaseMs: number;
}

export class LeaseMonitor {
  private readonly periodic: Periodic;

  private readonly graceUntil: number;

  constructor(private readonly deps: LeaseDeps) {
    this.periodic = new Periodic(
      () => this.check(),
      deps.everyMs ?? 1000,
      (err) => deps.logger.error({ action: "lease_check", result: "error", err }, "lease check failed; trying again"),
    );
    this.graceUntil = deps.now().getTime() + deps.leaseMs;
  }

  start(): void {
    this.periodic.start();
  }

  stop(): Promise<void> {
    return this.periodic.stop();
  }

  /** Puts every running order whose lease lapsed, and every due retry, back to pending. */
  async check(): Promise<number> {
    const lapsed = (o: WorkOrder, now: Date) => now.getTime() >= this.graceUntil && leaseLapsed(o, now);
    const leases = await this.sweep(WorkOrderStatus.RUNNING, lapsed, async (o, now) => {
      // The step and its event in one write (store.ts EventsOf).
      const back = await this.deps.store.expireWorkOrderLease(o.id, now, (after) => [leaseExpiredEvent(o, after)]);
      this.deps.logger.warn(
        {
          action: "work_order_lease_expired",
          result: "pending",
          node_id: o.claim?.nodeId,
          tenant_id: o.target?.tenantId,
          work_order_id: o.id,
          metadata: { fencing_token: o.claim?.fencingToken.toString() },
        },
        "lease lapsed; work order back to pending",
      );
      return back;
    });
    const retries = await this.sweep(WorkOrderStatus.RETRY_PENDING, retryDue, (o, now) => this.deps.store.releaseWorkOrderRetry(o.id, now));
    // Only orders that carry an expires_at due by now are read, not every pending one.
    const expired = await this.sweep(
      WorkOrderStatus.PENDING,
      expiredAt,
      (o, now) => expireOrder(this.deps, o, now),
      (now) => ({ expiresBy: now }),
    );
    return leases + retries + expired;
  }

  // Applies `step` to every order of `status` that is `due`, ringing the stream for each one it
  // put back to pending (its node's stream rings). An order renewed, finished or released since the listing is skipped.
  private async sweep(
    status: WorkOrderStatus,
    due: (o: WorkOrder, now: Date) => boolean,
    step: (o: WorkOrder, now: Date) => Promise<WorkOrder | undefined>,
    narrow: (now: Date) => Partial<WorkOrderFilter> = () => ({}),
  ): Promise<number> {
    const now = this.deps.now();
    let done = 0;
    let pageToken = "";
    do {
      const page = await this.deps.store.listWorkOrders({ ...narrow(now), status, pageSize: 1000, pageToken });
      for (const o of page.items) {
        if (!due(o, now)) continue;
        try {
          const next = await step(o, now);
          if (!next) continue;
          if (next.status === WorkOrderStatus.PENDING) {
            this.deps.feed.publish(next);
            this.deps.triggers.orderRequeued(next);
          }
          done++;
        } catch (e) {
          if (!(isSkipperError(e) && e.code === "WORK_ORDER_NOT_CLAIMABLE")) throw e;
        }
      }
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return done;
  }
}

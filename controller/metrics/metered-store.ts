// The store as the controller uses it, measured in one place rather than in every backend: each
// write is timed until it returns (durable, by the Store contract), and the work-order
// transitions the writes make are counted. Every path that creates, claims, finishes or expires
// an order (the reconciler, ad-hoc orders, node reports, cancels, expiry, superseding, the lease
// monitor) goes through one of these verbs, so counting here misses none, and a verb that
// changed nothing (a duplicate result, a repeated cancel) counts nothing.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { FinishOutcome, Store } from "../store/store.js";
import { isFinished } from "../domain/work-order-transitions.js";
import type { ControllerMetrics } from "./controller-metrics.js";

// The Store's writes (what changes something, on disk or in the database).
const WRITES = [
  "createResource",
  "updateResource",
  "createWorkOrder",
  "pruneWorkOrders",
  "pruneDeployments",
  "claimWorkOrder",
  "renewWorkOrderLease",
  "expireWorkOrderLease",
  "releaseWorkOrderClaim",
  "cancelWorkOrder",
  "releaseWorkOrderRetry",
  "finishWorkOrder",
  "supersedeWorkOrder",
  "appendEvent",
  "pruneEvents",
  "putSnapshot",
  "appendAuditEntry",
  "pruneAuditEntries",
  "putIdempotencyRecord",
  "putNodeCredential",
  "putAdminCredential",
  "putApiKey",
  "putEnrollmentToken",
  "putWebhook",
  "deleteWebhook",
  "enqueueWebhookDeliveries",
  "updateWebhookDelivery",
  "pruneWebhookDeliveries",
  "putWebhookCursor",
] as const satisfies readonly (keyof Store)[];

type Write = (typeof WRITES)[number];
type Recorder<K extends Write> = (m: ControllerMetrics, result: Awaited<ReturnType<Store[K]>>, args: Parameters<Store[K]>) => void;

// What each order transition tells the metrics, from the verb's result.
const TRANSITIONS: { [K in Write]?: Recorder<K> } = {
  createWorkOrder: (m, o) => m.orderCreated(o),
  claimWorkOrder: (m, o) => m.orderClaimed(o),
  expireWorkOrderLease: (m, o) => m.leaseExpired(o),
  finishWorkOrder: (m, out: FinishOutcome) => {
    if (!out.duplicate && isFinished(out.workOrder)) m.orderFinished(out.workOrder);
  },
  supersedeWorkOrder: (m, o) => m.orderFinished(o),
  // A cancel of an order already cancelled returns it as it was: only one this call finished
  // (finished_at is this call's time) ends here. A running one ends when its node reports.
  cancelWorkOrder: (m, o, [, , , now]) => {
    if (o.status === WorkOrderStatus.CANCELLED && sameTime(o, now)) m.orderFinished(o);
  },
};

/** `store` with its writes timed and its work-order transitions counted into `metrics`. */
export function meteredStore(store: Store, metrics: ControllerMetrics): Store {
  const measured = new Map<PropertyKey, unknown>();
  for (const name of WRITES) {
    const write = (store[name] as (...args: unknown[]) => Promise<unknown>).bind(store);
    const record = TRANSITIONS[name] as ((m: ControllerMetrics, result: unknown, args: unknown[]) => void) | undefined;
    measured.set(name, async (...args: unknown[]) => {
      const started = performance.now();
      try {
        const result = await write(...args);
        record?.(metrics, result, args);
        return result;
      } finally {
        metrics.storeWrote(name, (performance.now() - started) / 1000);
      }
    });
  }
  return new Proxy(store, {
    get(target, prop) {
      if (measured.has(prop)) return measured.get(prop);
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

function sameTime(o: WorkOrder, at: Date): boolean {
  const t = timestampFromDate(at);
  return o.finishedAt?.seconds === t.seconds && o.finishedAt.nanos === t.nanos;
}

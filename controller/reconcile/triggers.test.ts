// What wakes the reconciler (reconcile/triggers.ts): each trigger, and the tenants (or the sweep)
// it queues, read back from a real TenantQueue.
import { beforeEach, describe, expect, it, vi } from "vitest";
import { create } from "@bufbuild/protobuf";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema } from "../../gen/skipper/v1/work_order_pb.js";
import type { HeartbeatOutcome } from "../nodes/heartbeat.js";
import { TenantQueue } from "./tenant-queue.js";
import { ReconcileTriggers } from "./triggers.js";

let ready: ReturnType<typeof vi.fn<() => void>>;
let queue: TenantQueue;
let triggers: ReconcileTriggers;

beforeEach(() => {
  ready = vi.fn<() => void>();
  queue = new TenantQueue(ready);
  triggers = new ReconcileTriggers(queue);
});

const changed = (
  type: string,
  id: string,
  kind: Record<string, unknown> | undefined,
  meta: { requestId?: string; correlationId?: string } = {},
): Resource => create(ResourceSchema, { id, resourceType: type, desiredState: kind ? ({ kind } as never) : undefined, metadata: meta });
const order = (tenantId: string) => create(WorkOrderSchema, { id: "o1", target: { tenantId, nodeId: "n1" } });
const beat = (b: Partial<HeartbeatOutcome>): HeartbeatOutcome => ({
  nodeId: "n1",
  at: new Date(),
  cameOnline: false,
  trustedLabelsChanged: false,
  projectsChanged: false,
  touchedTenants: new Set(),
  ...b,
});
/** What the queue holds: the sweep flag and the tenants with their traces. */
const queued = () => {
  const { sweep, tenants } = queue.takeAll();
  return { sweep, tenants: Object.fromEntries(tenants) };
};

describe("resource changes", () => {
  it("a tenant change queues the tenant with the trace of the change", () => {
    triggers.resourceChanged(changed("tenant", "shop", { case: "tenant", value: {} }, { requestId: "req-1", correlationId: "corr-1" }));
    expect(queued()).toEqual({ sweep: false, tenants: { shop: { requestId: "req-1", correlationId: "corr-1" } } });
  });

  it("a change without a correlation id is traced by its request id, one without ids by none", () => {
    triggers.resourceChanged(changed("tenant", "a", { case: "tenant", value: {} }, { requestId: "req-a" }));
    triggers.resourceChanged(changed("tenant", "b", { case: "tenant", value: {} }));
    expect(queued().tenants).toEqual({ a: { requestId: "req-a", correlationId: "req-a" }, b: undefined });
  });

  it.each([
    ["service", { case: "service", value: { tenantId: "shop", image: "busybox" } }],
    ["network", { case: "network", value: { tenantId: "shop" } }],
    ["volume", { case: "volume", value: { tenantId: "shop" } }],
  ])("a %s change queues its tenant", (type, kind) => {
    triggers.resourceChanged(changed(type, `${type}-1`, kind, { requestId: "req-1", correlationId: "corr-1" }));
    expect(queued()).toEqual({ sweep: false, tenants: { shop: { requestId: "req-1", correlationId: "corr-1" } } });
  });

  it("a network or volume of no tenant queues nothing", () => {
    triggers.resourceChanged(changed("network", "shared", { case: "network", value: { tenantId: "" } }));
    expect(queue.empty).toBe(true);
    expect(ready).not.toHaveBeenCalled();
  });

  it.each([
    ["node", { case: "node", value: {} }],
    ["resource_limits", { case: "resourceLimits", value: { cpus: 1 } }],
  ])("a %s change queues a sweep", (type, kind) => {
    triggers.resourceChanged(changed(type, "x", kind));
    expect(queued()).toEqual({ sweep: true, tenants: {} });
  });

  it("a deployment change queues nothing", () => {
    triggers.resourceChanged(changed("deployment", "d1", { case: "deployment", value: { tenantId: "shop" } }));
    expect(queue.empty).toBe(true);
  });
});

describe("orders and nodes", () => {
  it("an order that ended or went back to pending queues its tenant; one without a tenant queues nothing", () => {
    triggers.orderEnded(order("a"));
    triggers.orderRequeued(order("b"));
    triggers.orderEnded(order(""));
    expect(queued()).toEqual({ sweep: false, tenants: { a: undefined, b: undefined } });
  });

  it("the pass an ended order causes continues the order's trace", () => {
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    triggers.orderEnded(
      create(WorkOrderSchema, { id: "o2", requestId: "r2", correlationId: "c2", traceparent, target: { tenantId: "t" } }),
    );
    expect(queued()).toEqual({ sweep: false, tenants: { t: { requestId: "r2", correlationId: "c2", traceparent } } });
  });

  it("a change of node liveness queues a sweep", () => {
    triggers.nodesChanged();
    expect(queued()).toEqual({ sweep: true, tenants: {} });
  });
});

describe("heartbeats", () => {
  it("a node that came online queues a sweep (its touched tenants go with it)", () => {
    triggers.heartbeatRecorded(beat({ cameOnline: true, projectsChanged: true, touchedTenants: new Set(["shop"]) }));
    expect(queued()).toEqual({ sweep: true, tenants: {} });
  });

  it("a node whose trusted labels changed queues a sweep (placement may move)", () => {
    triggers.heartbeatRecorded(beat({ trustedLabelsChanged: true }));
    expect(queued()).toEqual({ sweep: true, tenants: {} });
  });

  it("a node already online whose projects changed queues the touched tenants", () => {
    triggers.heartbeatRecorded(beat({ projectsChanged: true, touchedTenants: new Set(["shop", "blog"]) }));
    expect(queued()).toEqual({ sweep: false, tenants: { shop: undefined, blog: undefined } });
  });

  it("a beat that changed nothing queues nothing", () => {
    triggers.heartbeatRecorded(beat({}));
    expect(queue.empty).toBe(true);
    expect(ready).not.toHaveBeenCalled();
  });
});

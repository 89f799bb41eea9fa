// The part of the store conformance suite about a record written with the events of its change
// (store.ts EventsOf): store-conformance.ts calls it for every backend. What a crash does to the
// pair is the crash tests' (file-store-crash.test.ts, crash-points-store.test.ts).
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { EventSchema, type Event } from "../gen/skipper/v1/event_pb.js";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderResultSchema, WorkOrderSchema, WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import type { Store } from "../controller/store/store.js";
import { isSkipperError } from "../controller/base/errors.js";

const T0 = Date.parse("2026-11-22T10:00:00.000Z");
const at = (offsetMs: number) => new Date(T0 + offsetMs);

function tenantResource(id: string): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "tenant",
    schemaVersion: "v1",
    desiredState: { kind: { case: "tenant", value: { displayName: id } } },
    createdAt: timestampFromDate(at(0)),
    updatedAt: timestampFromDate(at(0)),
  });
}

function pendingOrder(id: string): WorkOrder {
  return create(WorkOrderSchema, {
    id,
    resourceType: "work_order",
    schemaVersion: "v1",
    status: WorkOrderStatus.PENDING,
    target: { nodeId: "node-1", tenantId: "tenant-a" },
    requestId: `req-${id}`,
    correlationId: `corr-${id}`,
    createdAt: timestampFromDate(at(0)),
  });
}

// An event telling of `subject`, carrying the version the store gave it (as a change's events do).
function told(id: string, type: string, subject: string, revision = "", offsetMs = 10): Event {
  return create(EventSchema, {
    id,
    type,
    schemaVersion: "v1",
    timestamp: timestampFromDate(at(offsetMs)),
    resourceId: subject,
    data: { resource_version: revision },
    revision: /^\d+$/.test(revision) ? BigInt(revision) : 0n,
  });
}

async function eventsOf(store: Store, subject: string): Promise<string[]> {
  return (await store.listEvents({ resourceId: subject })).items.map((e) => `${e.type}@${e.revision}`);
}

/** Defines the "events written with their record" cases over the suite's current store. */
export function describeToldConformance(current: () => Store, reopen: () => Promise<boolean>): void {
  describe("a record written with the events of its change", () => {
    it("a create and an update store their events with the version the store gave the record", async () => {
      const store = current();
      const created = await store.createResource(tenantResource("told-a"), (w) => [
        told("ev-created", "resource_created", w.id, w.metadata!.resourceVersion),
      ]);
      const updated = await store.updateResource(
        "tenant",
        "told-a",
        (r) => {
          r.metadata!.labels = { team: "x" };
          return r;
        },
        undefined,
        (w) => [told("ev-updated", "resource_updated", w.id, w.metadata!.resourceVersion, 20)],
      );
      expect(BigInt(updated.metadata!.resourceVersion)).toBeGreaterThan(BigInt(created.metadata!.resourceVersion));
      expect(await eventsOf(store, "told-a")).toEqual([
        `resource_created@${created.metadata!.resourceVersion}`,
        `resource_updated@${updated.metadata!.resourceVersion}`,
      ]);
      // Listed by the revision filter too, as the watch resumes by it.
      const since = (await store.listEvents({ sinceRevision: BigInt(created.metadata!.resourceVersion) })).items.map((e) => e.id);
      expect(since).toEqual(["ev-updated"]);
      if (!(await reopen())) return;
      expect(await eventsOf(current(), "told-a")).toEqual([
        `resource_created@${created.metadata!.resourceVersion}`,
        `resource_updated@${updated.metadata!.resourceVersion}`,
      ]);
    });

    it("nothing written writes no event: an update that changed nothing, a refused create, a check that threw", async () => {
      const store = current();
      await store.createResource(tenantResource("told-b"));
      let asked = 0;
      const none = () => {
        asked++;
        return [told(`ev-none-${asked}`, "resource_updated", "told-b")];
      };
      await store.updateResource("tenant", "told-b", (r) => r, undefined, none);
      await store.createResource(tenantResource("told-b"), none).catch((e: unknown) => {
        if (!isSkipperError(e) || e.code !== "CONFLICT") throw e;
      });
      await expect(
        store.updateResource(
          "tenant",
          "told-b",
          () => {
            throw new Error("refused");
          },
          undefined,
          none,
        ),
      ).rejects.toThrow("refused");
      await expect(store.updateResource("tenant", "told-b", (r) => r, "999999", none)).rejects.toThrow();
      expect(asked).toBe(0);
      expect(await eventsOf(store, "told-b")).toEqual([]);
    });

    it("an order's create and each step it changes store their events; a step that changes nothing stores none", async () => {
      const store = current();
      await store.createWorkOrder(pendingOrder("wo-told-1"), (o) => [told("ev-wo-created", "work_order_created", o.id)]);
      const claimed = await store.claimWorkOrder("wo-told-1", "node-1", at(1000), 60_000, (o) => [
        told(`ev-wo-started-${o.claim!.fencingToken}`, "work_order_started", o.id, "", 20),
      ]);
      expect(claimed.status).toBe(WorkOrderStatus.RUNNING);
      const cancel = (n: number) => (o: WorkOrder) => [told(`ev-wo-cancel-${n}`, `cancel_${WorkOrderStatus[o.status]}`, o.id, "", 30 + n)];
      await store.cancelWorkOrder("wo-told-1", "stop", "req-c", at(2000), cancel(1));
      // Asked again: the request stands, nothing changes, no event.
      await store.cancelWorkOrder("wo-told-1", "stop", "req-c", at(2001), cancel(2));
      const result = create(WorkOrderResultSchema, { success: true, code: "OK" });
      const out = await store.finishWorkOrder("wo-told-1", "node-1", result, at(3000), claimed.claim!.fencingToken, (o) => [
        told("ev-wo-finished", `finished_${WorkOrderStatus[o.status]}`, o.id, "", 40),
      ]);
      const again = await store.finishWorkOrder("wo-told-1", "node-1", result, at(3001), claimed.claim!.fencingToken, (o) => [
        told("ev-wo-finished-again", "finished_again", o.id, "", 41),
      ]);
      expect(again.duplicate).toBe(true);
      const types = (await store.listEvents({ resourceId: "wo-told-1" })).items.map((e) => e.type);
      expect(types).toEqual([
        "work_order_created",
        "work_order_started",
        "cancel_RUNNING",
        `finished_${WorkOrderStatus[out.workOrder.status]}`,
      ]);
      await store.createWorkOrder(pendingOrder("wo-told-2"));
      const superseded = create(WorkOrderResultSchema, { success: false, code: "SUPERSEDED" });
      await store.supersedeWorkOrder("wo-told-2", superseded, at(4000), WorkOrderStatus.CANCELLED, (o) => [
        told("ev-wo2", `superseded_${WorkOrderStatus[o.status]}`, o.id),
      ]);
      // An order whose id is taken is refused with its events unwritten.
      await expect(store.createWorkOrder(pendingOrder("wo-told-2"), (o) => [told("ev-dup", "dup", o.id)])).rejects.toThrow();
      expect((await store.listEvents({ resourceId: "wo-told-2" })).items.map((e) => e.type)).toEqual(["superseded_CANCELLED"]);
      if (!(await reopen())) return;
      expect((await current().listEvents({ resourceId: "wo-told-1" })).items.map((e) => e.type)).toEqual(types);
    });

    it("an order's step writes the edits of other records it gives with it, each at a new version, and only when the step changed the order", async () => {
      const store = current();
      const before = await store.createResource(tenantResource("edit-a"));
      await store.createWorkOrder(pendingOrder("wo-edit-1"));
      const label = (value: string) => (r: Resource) => {
        r.metadata!.labels = { ...r.metadata!.labels, step: value };
        return r;
      };
      let asked = 0;
      const edits = (value: string) => (o: WorkOrder) => {
        asked++;
        return {
          events: [told(`ev-edit-${value}`, `step_${WorkOrderStatus[o.status]}`, o.id)],
          resources: [
            { resourceType: "tenant" as const, id: "edit-a", mutate: label(value) },
            // Passed over: a resource that is not stored, and an edit that changes nothing.
            { resourceType: "tenant" as const, id: "edit-absent", mutate: label(value) },
            { resourceType: "tenant" as const, id: "edit-a", mutate: (r: Resource) => r },
          ],
        };
      };
      const claimed = await store.claimWorkOrder("wo-edit-1", "node-1", at(1000), 60_000, edits("claimed"));
      const afterClaim = await store.getResource("tenant", "edit-a");
      expect(afterClaim?.metadata?.labels).toEqual({ step: "claimed" });
      expect(BigInt(afterClaim!.metadata!.resourceVersion)).toBeGreaterThan(BigInt(before.metadata!.resourceVersion));
      expect(await store.getResource("tenant", "edit-absent")).toBeUndefined();
      // A listing resumed from the version before sees the edit.
      const since = await store.listResources({ resourceType: "tenant", sinceRevision: BigInt(before.metadata!.resourceVersion) });
      expect(since.items.map((r) => r.id)).toContain("edit-a");
      // A second claim is refused: the step changed nothing, so no edit was asked for or written.
      await expect(store.claimWorkOrder("wo-edit-1", "node-1", at(1100), 60_000, edits("again"))).rejects.toThrow();
      expect(asked).toBe(1);
      const result = create(WorkOrderResultSchema, { success: true, code: "OK" });
      await store.finishWorkOrder("wo-edit-1", "node-1", result, at(2000), claimed.claim!.fencingToken, edits("finished"));
      const dup = await store.finishWorkOrder("wo-edit-1", "node-1", result, at(2001), claimed.claim!.fencingToken, edits("dup"));
      expect(dup.duplicate).toBe(true);
      expect(asked).toBe(2);
      const after = await store.getResource("tenant", "edit-a");
      expect(after?.metadata?.labels).toEqual({ step: "finished" });
      expect(BigInt(after!.metadata!.resourceVersion)).toBeGreaterThan(BigInt(afterClaim!.metadata!.resourceVersion));
      expect((await store.listEvents({ resourceId: "wo-edit-1" })).items.map((e) => e.type)).toEqual(["step_RUNNING", "step_SUCCESS"]);
      if (!(await reopen())) return;
      const reopened = await current().getResource("tenant", "edit-a");
      expect(reopened?.metadata?.labels).toEqual({ step: "finished" });
      expect(reopened?.metadata?.resourceVersion).toBe(after?.metadata?.resourceVersion);
    });

    it("edits written with order steps and updates of the same record lose nothing when they race", async () => {
      const store = current();
      await store.createResource(tenantResource("edit-b"));
      const count = (key: string) => (r: Resource) => {
        const labels = r.metadata!.labels;
        labels[key] = String(Number(labels[key] ?? "0") + 1);
        return r;
      };
      const ids = Array.from({ length: 8 }, (_, i) => `wo-edit-race-${i}`);
      for (const id of ids) await store.createWorkOrder(pendingOrder(id));
      await Promise.all([
        ...ids.map((id) =>
          store.claimWorkOrder(id, "node-1", at(1000), 60_000, () => ({
            events: [],
            resources: [{ resourceType: "tenant" as const, id: "edit-b", mutate: count("claims") }],
          })),
        ),
        ...ids.map(() => store.updateResource("tenant", "edit-b", count("updates"))),
      ]);
      expect((await store.getResource("tenant", "edit-b"))?.metadata?.labels).toEqual({ claims: "8", updates: "8" });
    });

    it("an event already stored under the same id is left as it is, and the record is still written", async () => {
      const store = current();
      await store.appendEvent(told("ev-same", "first", "told-c"));
      await store.createResource(tenantResource("told-c"), () => [told("ev-same", "second", "told-c")]);
      expect((await store.getResource("tenant", "told-c"))?.id).toBe("told-c");
      expect((await store.listEvents({ resourceId: "told-c" })).items.map((e) => e.type)).toEqual(["first"]);
    });
  });
}

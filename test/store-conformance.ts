// The behaviour every Store backend must show, independent of how it persists. A backend's test
// file calls describeStoreConformance() with a factory; the file store runs it today and the
// PostgreSQL store will run the same suite. Ids used here sort the same way under byte order and
// any common collation (lowercase ASCII letters and digits), so ordering assertions are portable.
import { create, toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { EventSchema, type Event } from "../gen/skipper/v1/event_pb.js";
import { EnrollmentTokenSchema } from "../gen/skipper/v1/enrollment_service_pb.js";
import { DeletionSchema, DeploymentPhase, ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import type { LabelTerm } from "../controller/domain/label-selector.js";
import { SnapshotSchema } from "../gen/skipper/v1/snapshot_pb.js";
import { WorkOrderResultSchema, WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { isSkipperError, type ErrorCode, type SkipperError } from "../controller/base/errors.js";
import type { ResourceType } from "../common/ids.js";
import type { AuditDraft, Store } from "../controller/store/store.js";
import { ActorKind, ActorSchema, ApiKeySchema, Role, type ApiKey } from "../gen/skipper/v1/access_pb.js";
import { AuditEntrySchema } from "../gen/skipper/v1/audit_service_pb.js";
import { auditHash, readAuditLine } from "../controller/store/audit-chain.js";
import { verifyAuditTrail } from "../controller/audit/verify-audit-trail.js";
import { describeWebhookConformance } from "./store-conformance-webhooks.js";
import { describeToldConformance } from "./store-conformance-told.js";
import { describePoolConformance } from "./store-conformance-pool.js";

/**
 * What a backend hands the suite. `store` is already open. `reopen`, when given, closes the
 * current store and returns a freshly opened one over the same data. `cleanup` closes whichever
 * store is open and removes the data.
 */
export interface StoreUnderTest {
  store: Store;
  reopen?: () => Promise<Store>;
  cleanup: () => Promise<void>;
}

const T0 = Date.parse("2026-11-22T10:00:00.000Z");
const at = (offsetMs: number) => new Date(T0 + offsetMs);

/** A tenant resource with a display name. */
export function tenant(id: string, displayName = id, type: ResourceType = "tenant"): Resource {
  const kind = type === "tenant" ? { case: "tenant" as const, value: { displayName } } : { case: "node" as const, value: { displayName } };
  return create(ResourceSchema, {
    id,
    resourceType: type,
    schemaVersion: "v1",
    desiredState: { kind },
    metadata: { labels: { team: "core" } },
    createdAt: timestampFromDate(at(0)),
    updatedAt: timestampFromDate(at(0)),
  });
}

/** A pending deploy order for `nodeId`, created at T0 + offsetMs. */
export function order(id: string, nodeId: string, offsetMs = 0, tenantId = "tenant-a"): WorkOrder {
  return create(WorkOrderSchema, {
    id,
    resourceType: "work_order",
    schemaVersion: "v1",
    status: WorkOrderStatus.PENDING,
    target: { nodeId, tenantId },
    desiredState: { deploymentId: `dep-${id}`, tenantId, serviceIds: ["web"] },
    requestId: `req-${id}`,
    correlationId: `corr-${id}`,
    createdAt: timestampFromDate(at(offsetMs)),
  });
}

/** An event at T0 + offsetMs. */
export function event(
  id: string,
  offsetMs: number,
  fields: Partial<Pick<Event, "type" | "tenantId" | "resourceId" | "workOrderId" | "correlationId">> = {},
): Event {
  return create(EventSchema, {
    id,
    type: fields.type ?? "resource_created",
    schemaVersion: "v1",
    timestamp: timestampFromDate(at(offsetMs)),
    tenantId: fields.tenantId ?? "",
    resourceId: fields.resourceId ?? "",
    workOrderId: fields.workOrderId ?? "",
    correlationId: fields.correlationId ?? "corr",
    requestId: "req",
    data: { note: `event ${id}` },
  });
}

/** An audited call at T0 + offsetMs by an API key ("ci-web", operator). */
export function auditDraft(offsetMs: number, target = "service/web", outcome = "OK"): AuditDraft {
  return {
    time: timestampFromDate(at(offsetMs)),
    actor: create(ActorSchema, { kind: ActorKind.API_KEY, id: "3f9c0a1b2c4d", name: "ci-web", role: Role.OPERATOR }),
    rpc: "skipper.v1.ResourceService/UpdateResource",
    target,
    tenantId: "tenant-a",
    requestId: `req-${offsetMs}`,
    correlationId: "corr-1",
    outcome,
  };
}

const ok = (code = "APPLY_OK") => create(WorkOrderResultSchema, { success: true, code, message: "applied" });
const failed = () => create(WorkOrderResultSchema, { success: false, code: "COMPOSE_FAILED", message: "exit 1" });

/** Awaits `p` expecting a SkipperError with `code`; returns it for detail checks. */
/** An API key record's key part, created `offsetMs` after the suite's epoch. */
function apiKey(id: string, name: string, offsetMs: number): { key: ApiKey } {
  return {
    key: create(ApiKeySchema, {
      id,
      name,
      role: Role.OPERATOR,
      scope: { tenantIds: ["tenant-a"] },
      createdAt: timestampFromDate(at(offsetMs)),
      prefix: `skk_${id}_`,
    }),
  };
}

export async function expectCode(p: Promise<unknown>, code: ErrorCode): Promise<SkipperError> {
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  if (err === undefined) throw new Error(`expected ${code}, but the call succeeded`);
  if (!isSkipperError(err)) throw new Error(`expected SkipperError ${code}, got ${String(err)}`);
  expect(err.code).toBe(code);
  return err;
}

/** Proto JSON of a message, for readable equality assertions. */
export function json<D extends DescMessage>(schema: D, msg: MessageShape<D> | undefined): unknown {
  return msg === undefined ? undefined : toJson(schema, msg, { useProtoFieldName: true });
}

// Every item of a listing, page by page.
async function collect<T>(
  list: (pageToken: string) => Promise<{ items: T[]; nextPageToken: string }>,
): Promise<{ items: T[]; pages: number }> {
  const items: T[] = [];
  let token = "";
  let pages = 0;
  do {
    const page = await list(token);
    items.push(...page.items);
    token = page.nextPageToken;
    pages++;
  } while (token !== "" && pages < 10_000);
  return { items, pages };
}

async function inParallel(n: number, limit: number, fn: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < n) await fn(next++);
    }),
  );
}

/** Defines the conformance suite for one backend. */
export function describeStoreConformance(name: string, factory: () => Promise<StoreUnderTest>): void {
  describe(`Store conformance: ${name}`, () => {
    let sut: StoreUnderTest;
    let store: Store;

    beforeEach(async () => {
      sut = await factory();
      store = sut.store;
    });
    afterEach(async () => {
      await sut.cleanup();
    });

    describe("resources", () => {
      it("a created resource reads back equal, with a decimal resource_version", async () => {
        const created = await store.createResource(tenant("alpha"));
        expect(created.metadata?.resourceVersion).toMatch(/^[1-9][0-9]*$/);
        const read = await store.getResource("tenant", "alpha");
        expect(json(ResourceSchema, read)).toEqual(json(ResourceSchema, created));
        expect(read?.desiredState?.kind.case).toBe("tenant");
        expect(read?.metadata?.labels).toEqual({ team: "core" });
      });

      it("an absent resource reads as undefined", async () => {
        expect(await store.getResource("tenant", "nobody")).toBeUndefined();
        expect(await store.resourceExists("tenant", "nobody")).toBe(false);
      });

      it("resourceExists is true for a live resource and false once it is a tombstone", async () => {
        await store.createResource(tenant("here"));
        expect(await store.resourceExists("tenant", "here")).toBe(true);
        expect(await store.resourceExists("node", "here")).toBe(false);
        await store.updateResource("tenant", "here", (cur) => {
          cur.deletion = create(DeletionSchema, { deletedAt: timestampFromDate(at(1000)), requestId: "req-del" });
          return cur;
        });
        expect(await store.resourceExists("tenant", "here")).toBe(false);
      });

      it("resource versions only grow across creates and updates of any resource", async () => {
        const versions: bigint[] = [];
        versions.push(BigInt((await store.createResource(tenant("a1"))).metadata!.resourceVersion));
        versions.push(BigInt((await store.createResource(tenant("a2"))).metadata!.resourceVersion));
        for (let i = 0; i < 3; i++) {
          const r = await store.updateResource("tenant", i % 2 ? "a1" : "a2", (cur) => {
            cur.metadata!.annotations = { step: String(i) };
            return cur;
          });
          versions.push(BigInt(r.metadata!.resourceVersion));
        }
        for (let i = 1; i < versions.length; i++) expect(versions[i]! > versions[i - 1]!).toBe(true);
      });

      it("creating a resource that exists is refused with CONFLICT", async () => {
        await store.createResource(tenant("dup"));
        const err = await expectCode(store.createResource(tenant("dup", "other")), "CONFLICT");
        expect(err.details).toMatchObject({ resource_type: "tenant", resource_id: "dup" });
        expect((await store.getResource("tenant", "dup"))?.desiredState?.kind.value).toMatchObject({ displayName: "dup" });
      });

      it("the same id under another resource type is a different resource", async () => {
        await store.createResource(tenant("same"));
        await store.createResource(tenant("same", "as node", "node"));
        expect((await store.getResource("node", "same"))?.resourceType).toBe("node");
      });

      it("an update with a stale expected version is refused with CONFLICT without calling mutate", async () => {
        const v1 = (await store.createResource(tenant("stale"))).metadata!.resourceVersion;
        const v2 = (await store.updateResource("tenant", "stale", (r) => ((r.metadata!.labels.v = "2"), r), v1)).metadata!.resourceVersion;
        let called = false;
        const err = await expectCode(
          store.updateResource("tenant", "stale", (r) => ((called = true), r), v1),
          "CONFLICT",
        );
        expect(called).toBe(false);
        expect(err.details).toMatchObject({ current_version: v2 });
      });

      it("an update applies mutate to the current resource and assigns a new version", async () => {
        const v1 = (await store.createResource(tenant("upd"))).metadata!.resourceVersion;
        const updated = await store.updateResource(
          "tenant",
          "upd",
          (r) => {
            r.metadata!.labels.stage = "prod";
            return r;
          },
          v1,
        );
        expect(updated.metadata?.resourceVersion).not.toBe(v1);
        expect((await store.getResource("tenant", "upd"))?.metadata?.labels).toEqual({ team: "core", stage: "prod" });
      });

      it("an update whose mutate changes nothing writes nothing and keeps the version", async () => {
        const created = await store.createResource(tenant("still"));
        const same = await store.updateResource("tenant", "still", (cur) => cur);
        expect(same.metadata?.resourceVersion).toBe(created.metadata?.resourceVersion);
        expect(await store.currentRevision()).toBe(BigInt(created.metadata!.resourceVersion));
      });

      it("updating an absent resource is RESOURCE_NOT_FOUND", async () => {
        await expectCode(
          store.updateResource("tenant", "ghost", (r) => r),
          "RESOURCE_NOT_FOUND",
        );
      });

      it("an update cannot change id, resource_type or created_at", async () => {
        const created = await store.createResource(tenant("fixed"));
        const updated = await store.updateResource("tenant", "fixed", (r) => {
          r.id = "renamed";
          r.resourceType = "node";
          r.createdAt = timestampFromDate(at(999_999));
          return r;
        });
        expect(updated.id).toBe("fixed");
        expect(updated.resourceType).toBe("tenant");
        expect(timestampDate(updated.createdAt!)).toEqual(timestampDate(created.createdAt!));
        expect(await store.getResource("tenant", "renamed")).toBeUndefined();
        expect(await store.getResource("node", "renamed")).toBeUndefined();
      });

      it("a mutate that throws leaves the resource unchanged", async () => {
        const created = await store.createResource(tenant("safe"));
        await expect(
          store.updateResource("tenant", "safe", (r) => {
            r.metadata!.labels.half = "done";
            throw new Error("validation failed");
          }),
        ).rejects.toThrow("validation failed");
        expect(json(ResourceSchema, await store.getResource("tenant", "safe"))).toEqual(json(ResourceSchema, created));
      });

      it("callers cannot change stored resources through objects they passed in or got back", async () => {
        const input = tenant("copy");
        const created = await store.createResource(input);
        input.metadata!.labels.sneaky = "in";
        created.metadata!.labels.sneaky = "out";
        const read = await store.getResource("tenant", "copy");
        read!.metadata!.labels.sneaky = "read";
        expect((await store.getResource("tenant", "copy"))?.metadata?.labels).toEqual({ team: "core" });
      });

      it("concurrent updates of one resource are serialised and none is lost", async () => {
        await store.createResource(tenant("counter"));
        await Promise.all(
          Array.from({ length: 20 }, () =>
            store.updateResource("tenant", "counter", (r) => {
              r.metadata!.labels.n = String(Number(r.metadata!.labels.n ?? "0") + 1);
              return r;
            }),
          ),
        );
        expect((await store.getResource("tenant", "counter"))?.metadata?.labels.n).toBe("20");
      });

      it("resources list in (resource_type, id) order, page by page, optionally of one type", async () => {
        const ids = ["m3", "b7", "z1", "a0", "k5"];
        for (const id of ids) await store.createResource(tenant(id));
        await store.createResource(tenant("n1", "n1", "node"));
        await store.createResource(tenant("n0", "n0", "node"));
        const all = await collect((pageToken) => store.listResources({ pageSize: 2, pageToken }));
        expect(all.items.map((r) => `${r.resourceType}/${r.id}`)).toEqual([
          "node/n0",
          "node/n1",
          ...[...ids].sort().map((id) => `tenant/${id}`),
        ]);
        expect(all.pages).toBe(4);
        const tenants = await collect((pageToken) => store.listResources({ resourceType: "tenant", pageSize: 2, pageToken }));
        expect(tenants.items.map((r) => r.id)).toEqual([...ids].sort());
        const nodes = await store.listResources({ resourceType: "node" });
        expect(nodes.items.map((r) => r.id)).toEqual(["n0", "n1"]);
        expect(nodes.nextPageToken).toBe("");
      });

      it("a tenant filter lists the tenant and the resources that name it, with any type filter", async () => {
        await store.createResource(tenant("acme"));
        await store.createResource(tenant("other"));
        await store.createResource(tenant("n0", "n0", "node"));
        const service = (id: string, tenantId: string) =>
          create(ResourceSchema, {
            id,
            resourceType: "service",
            schemaVersion: "v1",
            desiredState: { kind: { case: "service", value: { tenantId, image: "busybox" } } },
          });
        for (const [id, t] of [
          ["web", "acme"],
          ["db", "acme"],
          ["api", "other"],
        ] as const)
          await store.createResource(service(id, t));
        const acme = await collect((pageToken) => store.listResources({ tenantId: "acme", pageSize: 1, pageToken }));
        expect(acme.items.map((r) => `${r.resourceType}/${r.id}`)).toEqual(["service/db", "service/web", "tenant/acme"]);
        const acmeServices = await store.listResources({ tenantId: "acme", resourceType: "service" });
        expect(acmeServices.items.map((r) => r.id)).toEqual(["db", "web"]);
        expect((await store.listResources({ tenantId: "nobody" })).items).toEqual([]);
      });

      it("an id prefix lists exactly the ids that start with it, in order and page by page", async () => {
        const version = (id: string, tenantId: string) =>
          create(ResourceSchema, {
            id,
            resourceType: "artifact_version",
            schemaVersion: "v1",
            desiredState: {
              kind: {
                case: "artifactVersion",
                value: { artifactId: id.slice(0, id.indexOf(".")), tenantId, version: id.slice(id.indexOf(".") + 1) },
              },
            },
          });
        // "web-2.x" and "web2.x" sort between and after "web." ids; "web" is a tenant's id.
        for (const id of ["web.1.0.0", "web-2.1.0", "web.1.10.0", "web2.1.0", "web.2.0.0-rc.1", "api.1.0.0", "web.1.2.0"])
          await store.createResource(version(id, id.startsWith("api") ? "other" : "acme"));
        await store.createResource(tenant("web.1.5.0"));
        const web = await collect((pageToken) =>
          store.listResources({ resourceType: "artifact_version", idPrefix: "web.", pageSize: 2, pageToken }),
        );
        expect(web.items.map((r) => r.id)).toEqual(["web.1.0.0", "web.1.10.0", "web.1.2.0", "web.2.0.0-rc.1"]);
        expect(web.pages).toBe(2);
        const scanned = await store.scanResources({ resourceType: "artifact_version", idPrefix: "web." });
        expect(scanned.items.map((r) => r.id)).toEqual(web.items.map((r) => r.id));
        // With a tenant, and without a type (every type's ids with the prefix).
        const acme = await store.listResources({ resourceType: "artifact_version", tenantId: "acme", idPrefix: "web-" });
        expect(acme.items.map((r) => r.id)).toEqual(["web-2.1.0"]);
        const anyType = await store.listResources({ idPrefix: "web.1." });
        expect(anyType.items.map((r) => `${r.resourceType}/${r.id}`)).toEqual([
          "artifact_version/web.1.0.0",
          "artifact_version/web.1.10.0",
          "artifact_version/web.1.2.0",
          "tenant/web.1.5.0",
        ]);
        expect((await store.listResources({ resourceType: "artifact_version", idPrefix: "zzz" })).items).toEqual([]);
      });

      it("a scan lists what listResources lists, frozen: a change to an item throws and the store keeps its record", async () => {
        for (const id of ["s1", "s2", "s3"]) await store.createResource(tenant(id));
        await store.createResource(tenant("n0", "n0", "node"));
        await store.updateResource("tenant", "s2", (cur) => ((cur.metadata!.labels.v = "2"), cur));
        for (const filter of [
          {},
          { resourceType: "tenant" as const, pageSize: 2 },
          { labelSelector: [{ key: "v", op: "=" as const, value: "2" }] },
        ]) {
          const listed = await store.listResources(filter);
          const scanned = await store.scanResources(filter);
          expect(scanned.nextPageToken).toBe(listed.nextPageToken);
          expect(scanned.items.map((r) => json(ResourceSchema, r))).toEqual(listed.items.map((r) => json(ResourceSchema, r)));
        }
        const [s2] = (await store.scanResources({ resourceType: "tenant", labelSelector: [{ key: "v", op: "exists" }] })).items;
        expect(s2?.id).toBe("s2");
        expect(() => {
          s2!.metadata!.labels.v = "changed";
        }).toThrow(TypeError);
        expect(() => {
          s2!.desiredState = undefined;
        }).toThrow(TypeError);
        const read = await store.getResource("tenant", "s2");
        expect(read?.metadata?.labels.v).toBe("2");
        expect(read?.desiredState?.kind.case).toBe("tenant");
        // What getResource and listResources hand out stays the caller's own to change.
        read!.metadata!.labels.v = "mine";
        (await store.listResources({ resourceType: "tenant" })).items[0]!.metadata!.labels.x = "mine";
        expect((await store.scanResources({ resourceType: "tenant" })).items.map((r) => r.metadata?.labels)).toEqual([
          { team: "core" },
          { team: "core", v: "2" },
          { team: "core" },
        ]);
      });

      it("a page token resumes after the last item even when items were added in between", async () => {
        for (const id of ["c", "e", "g"]) await store.createResource(tenant(id));
        const first = await store.listResources({ resourceType: "tenant", pageSize: 2 });
        expect(first.items.map((r) => r.id)).toEqual(["c", "e"]);
        await store.createResource(tenant("a"));
        await store.createResource(tenant("f"));
        const second = await store.listResources({ resourceType: "tenant", pageSize: 2, pageToken: first.nextPageToken });
        expect(second.items.map((r) => r.id)).toEqual(["f", "g"]);
        expect(second.nextPageToken).toBe("");
      });

      it("an invalid page token is refused with INVALID_REQUEST", async () => {
        await expectCode(store.listResources({ pageToken: "not-a-token" }), "INVALID_REQUEST");
        await expectCode(store.listEvents({ pageToken: "%%%" }), "INVALID_REQUEST");
        await expectCode(store.listWorkOrders({ pageToken: "AAAA" }), "INVALID_REQUEST");
      });

      it("page size defaults to 100 and is capped at 1000", async () => {
        await inParallel(1001, 16, (i) => store.createResource(tenant(`t${String(i).padStart(4, "0")}`)));
        const byDefault = await store.listResources({ resourceType: "tenant" });
        expect(byDefault.items).toHaveLength(100);
        expect(byDefault.nextPageToken).not.toBe("");
        const capped = await store.listResources({ resourceType: "tenant", pageSize: 5000 });
        expect(capped.items).toHaveLength(1000);
        const rest = await store.listResources({ resourceType: "tenant", pageSize: 5000, pageToken: capped.nextPageToken });
        expect(rest.items.map((r) => r.id)).toEqual(["t1000"]);
        expect(rest.nextPageToken).toBe("");
      });

      it("invalid ids and types are refused with INVALID_REQUEST", async () => {
        await expectCode(store.createResource(tenant("../escape")), "INVALID_REQUEST");
        const wrongType = tenant("ok-id");
        wrongType.resourceType = "spaceship";
        await expectCode(store.createResource(wrongType), "INVALID_REQUEST");
        await expectCode(store.createWorkOrder(order("a/b", "node-1")), "INVALID_REQUEST");
        await expectCode(store.appendEvent(event("..", 0)), "INVALID_REQUEST");
        expect((await store.listResources({})).items).toHaveLength(0);
      });

      it("a tombstone is hidden from gets and lists unless asked for, and still updatable", async () => {
        await store.createResource(tenant("gone"));
        await store.createResource(tenant("kept"));
        await store.updateResource("tenant", "gone", (cur) => {
          cur.deletion = create(DeletionSchema, { deletedAt: timestampFromDate(at(1000)), requestId: "req-del" });
          return cur;
        });
        expect(await store.getResource("tenant", "gone")).toBeUndefined();
        expect((await store.getResource("tenant", "gone", { includeDeleted: true }))?.deletion?.requestId).toBe("req-del");
        expect((await store.listResources({ resourceType: "tenant" })).items.map((r) => r.id)).toEqual(["kept"]);
        expect((await store.listResources({ resourceType: "tenant", includeDeleted: true })).items.map((r) => r.id)).toEqual([
          "gone",
          "kept",
        ]);
        const touched = await store.updateResource("tenant", "gone", (cur) => {
          cur.metadata!.annotations = { note: "after deletion" };
          return cur;
        });
        expect(touched.deletion?.requestId).toBe("req-del");
      });

      it("creating over a tombstone replaces it with a live resource and a newer version", async () => {
        const first = await store.createResource(tenant("phoenix"));
        await store.updateResource("tenant", "phoenix", (cur) => {
          cur.deletion = create(DeletionSchema, { deletedAt: timestampFromDate(at(1000)) });
          return cur;
        });
        const again = await store.createResource(tenant("phoenix", "reborn"));
        expect(again.deletion).toBeUndefined();
        expect(BigInt(again.metadata!.resourceVersion) > BigInt(first.metadata!.resourceVersion)).toBe(true);
        expect((await store.getResource("tenant", "phoenix"))?.desiredState?.kind.value).toMatchObject({ displayName: "reborn" });
      });

      it("the store revision is the highest version assigned, and lists can start after one", async () => {
        expect(await store.currentRevision()).toBe(0n);
        await store.createResource(tenant("r1"));
        const mid = await store.currentRevision();
        const r2 = await store.createResource(tenant("r2"));
        await store.updateResource("tenant", "r1", (cur) => {
          cur.metadata!.annotations = { touched: "yes" };
          return cur;
        });
        const now = await store.currentRevision();
        expect(now > BigInt(r2.metadata!.resourceVersion)).toBe(true);
        expect((await store.listResources({ sinceRevision: mid })).items.map((r) => r.id)).toEqual(["r1", "r2"]);
        expect((await store.listResources({ sinceRevision: now })).items).toEqual([]);
      });

      it("a reader that resumes from currentRevision never misses a write, even with writes in flight", async () => {
        const ids = Array.from({ length: 30 }, (_, i) => `w${i}`);
        for (const id of ids) await store.createResource(tenant(id));
        // The reader: what a revision-following cache does (reconcile/node-cache.ts).
        const seen = new Map<string, string>();
        let since = await store.currentRevision();
        const readOnce = async () => {
          const upTo = await store.currentRevision();
          for (const r of (await store.listResources({ resourceType: "tenant", sinceRevision: since, pageSize: 1000 })).items)
            seen.set(r.id, r.metadata!.resourceVersion);
          since = upTo;
        };
        let writing = true;
        const reader = (async () => {
          while (writing) {
            await readOnce();
            await new Promise((r) => setImmediate(r));
          }
        })();
        // Concurrent writes to different records: their revisions may land out of order.
        const written = await Promise.all(
          ids.map((id) =>
            store.updateResource("tenant", id, (cur) => {
              cur.metadata!.annotations = { round: "2" };
              return cur;
            }),
          ),
        );
        writing = false;
        await reader;
        await readOnce();
        for (const w of written) expect(seen.get(w.id), w.id).toBe(w.metadata!.resourceVersion);
      });

      it("a label selector filters on metadata labels", async () => {
        const labelled = (id: string, labels: Record<string, string>) => {
          const r = tenant(id);
          r.metadata!.labels = labels;
          return r;
        };
        await store.createResource(labelled("l1", { env: "prod", tier: "web" }));
        await store.createResource(labelled("l2", { env: "prod" }));
        await store.createResource(labelled("l3", { env: "dev", tier: "web" }));
        const ids = async (labelSelector: LabelTerm[]) => (await store.listResources({ labelSelector })).items.map((r) => r.id);
        expect(await ids([{ key: "env", op: "=", value: "prod" }])).toEqual(["l1", "l2"]);
        expect(
          await ids([
            { key: "tier", op: "exists" },
            { key: "env", op: "!=", value: "prod" },
          ]),
        ).toEqual(["l3"]);
      });
    });

    describe("work orders", () => {
      it("a new work order is stored pending and reads back equal", async () => {
        const created = await store.createWorkOrder(order("wo-1", "node-1"));
        expect(created.status).toBe(WorkOrderStatus.PENDING);
        expect(json(WorkOrderSchema, await store.getWorkOrder("wo-1"))).toEqual(json(WorkOrderSchema, created));
        expect(await store.getWorkOrder("wo-none")).toBeUndefined();
      });

      it("retention deletes finished orders older than the cutoff, except those kept, and nothing else", async (ctx) => {
        const finish = async (id: string, tenantId: string, finishedAt: number, success = true) => {
          await store.createWorkOrder(order(id, "node-1", 0, tenantId));
          await store.claimWorkOrder(id, "node-1", at(finishedAt - 100));
          await store.finishWorkOrder(id, "node-1", success ? ok() : failed(), at(finishedAt));
        };
        await finish("old-ok", "tenant-a", 1000);
        await finish("old-failed", "tenant-b", 1000, false);
        await store.createWorkOrder(order("old-cancelled", "node-1", 0, "tenant-a"));
        await store.cancelWorkOrder("old-cancelled", "no longer wanted", "req-x", at(1000));
        await finish("old-kept", "tenant-a", 1000);
        await finish("new-ok", "tenant-a", 5000);
        await store.createWorkOrder(order("still-pending", "node-2", 0, "tenant-a"));
        await store.createWorkOrder(order("still-running", "node-3", 0, "tenant-a"));
        await store.claimWorkOrder("still-running", "node-3", at(500));
        expect((await store.getWorkOrder("old-failed"))?.status).toBe(WorkOrderStatus.FAILED);
        expect((await store.getWorkOrder("old-cancelled"))?.status).toBe(WorkOrderStatus.CANCELLED);

        expect(await store.pruneWorkOrders(at(3000), new Set(["old-kept"]))).toBe(3);
        const ids = async (filter: Parameters<Store["listWorkOrders"]>[0] = {}) =>
          (await store.listWorkOrders(filter)).items.map((o) => o.id).sort();
        const left = ["new-ok", "old-kept", "still-pending", "still-running"];
        expect(await ids()).toEqual(left);
        expect(await ids({ tenantId: "tenant-b" })).toEqual([]);
        expect(await ids({ status: WorkOrderStatus.SUCCESS })).toEqual(["new-ok", "old-kept"]);
        expect(await ids({ status: WorkOrderStatus.CANCELLED })).toEqual([]);
        expect(await store.getWorkOrder("old-ok")).toBeUndefined();
        expect(await store.countPendingWorkOrders("node-2")).toBe(1);
        expect(await store.pruneWorkOrders(at(3000), new Set(["old-kept"]))).toBe(0);
        if (!sut.reopen) return ctx.skip();
        store = await sut.reopen();
        expect(await ids()).toEqual(left);
      });

      it("deployment retention deletes finished deployments older than the cutoff, except those kept and the newest revision", async (ctx) => {
        const dep = (id: string, phase: DeploymentPhase, finishedAtMs?: number) =>
          create(ResourceSchema, {
            id,
            resourceType: "deployment",
            schemaVersion: "v1",
            desiredState: { kind: { case: "deployment", value: { tenantId: "tenant-a", nodeId: "node-1", workOrderId: `wo-${id}` } } },
            currentState: {
              kind: {
                case: "deployment",
                value: { phase, finishedAt: finishedAtMs === undefined ? undefined : timestampFromDate(at(finishedAtMs)) },
              },
            },
            createdAt: timestampFromDate(at(0)),
          });
        await store.createResource(dep("d-old-ok", DeploymentPhase.SUCCEEDED, 1000));
        await store.createResource(dep("d-old-failed", DeploymentPhase.FAILED, 1000));
        await store.createResource(dep("d-old-kept", DeploymentPhase.SUCCEEDED, 1000));
        await store.createResource(dep("d-running", DeploymentPhase.RUNNING));
        await store.createResource(dep("d-new", DeploymentPhase.SUCCEEDED, 5000));
        // Written last: it holds the highest revision, which the store resumes from.
        await store.createResource(dep("d-old-newest-revision", DeploymentPhase.SUCCEEDED, 1000));
        const ids = async () =>
          (await store.listResources({ resourceType: "deployment", includeDeleted: true })).items.map((r) => r.id).sort();
        const inPhase = async (...phases: DeploymentPhase[]) =>
          (await store.listResources({ deploymentPhases: phases })).items.map((r) => r.id).sort();
        expect(await inPhase(DeploymentPhase.RUNNING, DeploymentPhase.PENDING)).toEqual(["d-running"]);
        expect(await inPhase(DeploymentPhase.FAILED)).toEqual(["d-old-failed"]);
        expect(await inPhase()).toEqual([]);
        expect(await store.pruneDeployments(at(3000), new Set(["d-old-kept"]))).toBe(2);
        const left = ["d-new", "d-old-kept", "d-old-newest-revision", "d-running"];
        expect(await ids()).toEqual(left);
        expect(await store.getResource("deployment", "d-old-ok", { includeDeleted: true })).toBeUndefined();
        expect(await store.pruneDeployments(at(3000), new Set(["d-old-kept"]))).toBe(0);
        if (!sut.reopen) return ctx.skip();
        const revision = await store.currentRevision();
        store = await sut.reopen();
        expect(await ids()).toEqual(left);
        expect(await store.currentRevision()).toBe(revision);
      });

      it("finished orders read back whole after a reopen, and a summary listing carries what retention reads", async (ctx) => {
        await store.createWorkOrder(order("wo-sum", "node-1", 0, "tenant-s"));
        await store.claimWorkOrder("wo-sum", "node-1", at(100));
        const done = (await store.finishWorkOrder("wo-sum", "node-1", ok(), at(200))).workOrder;
        await store.createWorkOrder(order("wo-sum-pending", "node-2", 10, "tenant-s"));
        const check = async (s: Store) => {
          expect(json(WorkOrderSchema, await s.getWorkOrder("wo-sum"))).toEqual(json(WorkOrderSchema, done));
          const listed = (await s.listWorkOrders({ tenantId: "tenant-s" })).items;
          expect(listed.map((o) => json(WorkOrderSchema, o))).toEqual([
            json(WorkOrderSchema, done),
            json(WorkOrderSchema, await s.getWorkOrder("wo-sum-pending")),
          ]);
          const [summary] = (await s.listWorkOrders({ tenantId: "tenant-s", status: WorkOrderStatus.SUCCESS, summaryOnly: true })).items;
          expect(summary).toMatchObject({ id: "wo-sum", status: WorkOrderStatus.SUCCESS, type: done.type });
          expect(summary?.target).toMatchObject({ tenantId: "tenant-s", nodeId: "node-1" });
          expect(summary?.finishedAt).toEqual(done.finishedAt);
          expect(summary?.createdAt).toEqual(done.createdAt);
          expect(summary?.desiredState?.deploymentId).toBe("dep-wo-sum");
          // A finished order still refuses what a finished order refuses, and knows its claim.
          expect((await s.finishWorkOrder("wo-sum", "node-1", ok(), at(300))).duplicate).toBe(true);
          await expectCode(s.cancelWorkOrder("wo-sum", "late", "req-y", at(300)), "WORK_ORDER_NOT_CLAIMABLE");
        };
        await check(store);
        if (!sut.reopen) return ctx.skip();
        store = await sut.reopen();
        await check(store);
      });

      it("orders are counted per status and type, through every transition, retention and a reopen", async (ctx) => {
        const typed = (id: string, node: string, type: WorkOrderType) => Object.assign(order(id, node), { type });
        const counts = async (s: Store) =>
          Object.fromEntries(
            (await s.countWorkOrders())
              .map((c) => [`${WorkOrderStatus[c.status]}/${WorkOrderType[c.type]}`, c.count] as const)
              .sort(([a], [b]) => (a < b ? -1 : 1)),
          );
        expect(await store.countWorkOrders()).toEqual([]);
        for (const id of ["c-1", "c-2", "c-3", "c-4"]) await store.createWorkOrder(typed(id, "node-1", WorkOrderType.DEPLOY_SERVICE));
        await store.createWorkOrder(typed("c-5", "node-2", WorkOrderType.INSPECT));
        await store.claimWorkOrder("c-1", "node-1", at(100));
        await store.claimWorkOrder("c-2", "node-1", at(100));
        await store.finishWorkOrder("c-2", "node-1", ok(), at(200));
        await store.cancelWorkOrder("c-3", "not wanted", "req-c", at(200));
        await store.supersedeWorkOrder("c-4", failed(), at(200), WorkOrderStatus.FAILED);
        const expected = {
          "CANCELLED/DEPLOY_SERVICE": 1,
          "FAILED/DEPLOY_SERVICE": 1,
          "PENDING/INSPECT": 1,
          "RUNNING/DEPLOY_SERVICE": 1,
          "SUCCESS/DEPLOY_SERVICE": 1,
        };
        expect(await counts(store)).toEqual(expected);
        expect(await store.pruneWorkOrders(at(3000), new Set(["c-3"]))).toBe(2);
        const pruned = { "CANCELLED/DEPLOY_SERVICE": 1, "PENDING/INSPECT": 1, "RUNNING/DEPLOY_SERVICE": 1 };
        expect(await counts(store)).toEqual(pruned);
        if (!sut.reopen) return ctx.skip();
        store = await sut.reopen();
        expect(await counts(store)).toEqual(pruned);
      });

      it("a new work order that is not pending is refused with INVALID_REQUEST", async () => {
        const o = order("wo-run", "node-1");
        o.status = WorkOrderStatus.RUNNING;
        await expectCode(store.createWorkOrder(o), "INVALID_REQUEST");
        expect(await store.getWorkOrder("wo-run")).toBeUndefined();
      });

      it("a work order id cannot be reused, whatever stage the first order reached", async () => {
        await store.createWorkOrder(order("wo-dup", "node-1"));
        await expectCode(store.createWorkOrder(order("wo-dup", "node-2")), "CONFLICT");
        await store.claimWorkOrder("wo-dup", "node-1", at(1000));
        await expectCode(store.createWorkOrder(order("wo-dup", "node-1")), "CONFLICT");
        await store.finishWorkOrder("wo-dup", "node-1", ok(), at(2000));
        await expectCode(store.createWorkOrder(order("wo-dup", "node-1")), "CONFLICT");
      });

      it("a claim moves the order to running with the claim and started_at", async () => {
        await store.createWorkOrder(order("wo-c", "node-1"));
        const claimed = await store.claimWorkOrder("wo-c", "node-1", at(5000));
        expect(claimed.status).toBe(WorkOrderStatus.RUNNING);
        expect(claimed.claim?.nodeId).toBe("node-1");
        expect(timestampDate(claimed.claim!.claimedAt!)).toEqual(at(5000));
        expect(timestampDate(claimed.startedAt!)).toEqual(at(5000));
        expect(json(WorkOrderSchema, await store.getWorkOrder("wo-c"))).toEqual(json(WorkOrderSchema, claimed));
      });

      it("a claim is a lease with a fencing token that grows with every claim", async () => {
        await store.createWorkOrder(order("wo-l", "node-1"));
        const first = await store.claimWorkOrder("wo-l", "node-1", at(1000), 5000);
        expect(first.claim?.fencingToken).toBe(1n);
        expect(timestampDate(first.claim!.leaseExpiresAt!)).toEqual(at(6000));
        const renewed = await store.renewWorkOrderLease("wo-l", "node-1", 1n, at(4000), 5000);
        expect(timestampDate(renewed.claim!.leaseExpiresAt!)).toEqual(at(9000));
        await expectCode(store.expireWorkOrderLease("wo-l", at(8999)), "WORK_ORDER_NOT_CLAIMABLE");
        const back = await store.expireWorkOrderLease("wo-l", at(9000));
        expect(back.status).toBe(WorkOrderStatus.PENDING);
        expect((await store.nextPendingWorkOrder("node-1"))?.id).toBe("wo-l");
        const second = await store.claimWorkOrder("wo-l", "node-1", at(9500), 5000);
        expect(second.claim?.fencingToken).toBe(2n);
        expect(second.fencingToken).toBe(2n);
        expect(second.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([
          [1n, "lease_expired"],
          [2n, "running"],
        ]);
      });

      it("a released claim puts the order back to pending at once; only that claim may release it", async () => {
        await store.createWorkOrder(order("wo-rel", "node-1"));
        await store.claimWorkOrder("wo-rel", "node-1", at(1000), 60_000);
        await expectCode(store.releaseWorkOrderClaim("wo-rel", "node-1", 2n, at(1100)), "WORK_ORDER_NOT_CLAIMABLE");
        await expectCode(store.releaseWorkOrderClaim("wo-rel", "node-2", 1n, at(1100)), "WORK_ORDER_NOT_CLAIMABLE");
        expect((await store.getWorkOrder("wo-rel"))?.status).toBe(WorkOrderStatus.RUNNING);
        const back = await store.releaseWorkOrderClaim("wo-rel", "node-1", 1n, at(1200));
        expect(back.status).toBe(WorkOrderStatus.PENDING);
        expect((await store.nextPendingWorkOrder("node-1"))?.id).toBe("wo-rel");
        await expectCode(store.releaseWorkOrderClaim("wo-rel", "node-1", 1n, at(1300)), "WORK_ORDER_NOT_CLAIMABLE");
        const again = await store.claimWorkOrder("wo-rel", "node-1", at(1400), 60_000);
        expect(again.claim?.fencingToken).toBe(2n);
        expect(again.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([
          [1n, "released"],
          [2n, "running"],
        ]);
        // The released claim's late result is refused; the new claim's is taken.
        await expectCode(store.finishWorkOrder("wo-rel", "node-1", ok(), at(1500), 1n), "WORK_ORDER_NOT_CLAIMABLE");
        expect((await store.finishWorkOrder("wo-rel", "node-1", ok(), at(1600), 2n)).workOrder.status).toBe(WorkOrderStatus.SUCCESS);
      });

      it("a claim renewed since it was handed out is not released by the one that handed it out", async () => {
        await store.createWorkOrder(order("wo-rel-renewed", "node-1"));
        const claimed = await store.claimWorkOrder("wo-rel-renewed", "node-1", at(1000), 60_000);
        const pushedLease = new Date(Number(claimed.claim!.leaseExpiresAt!.seconds) * 1000 + claimed.claim!.leaseExpiresAt!.nanos / 1e6);
        // The agent renewed it (say through another controller, its session here half-open).
        await store.renewWorkOrderLease("wo-rel-renewed", "node-1", 1n, at(2000), 60_000);
        await expectCode(
          store.releaseWorkOrderClaim("wo-rel-renewed", "node-1", 1n, at(2100), undefined, pushedLease),
          "WORK_ORDER_NOT_CLAIMABLE",
        );
        const still = await store.getWorkOrder("wo-rel-renewed");
        expect(still?.status).toBe(WorkOrderStatus.RUNNING);
        expect(still?.claim?.fencingToken).toBe(1n);
        // Not renewed: the same lease releases it.
        await store.createWorkOrder(order("wo-rel-fresh", "node-1"));
        const fresh = await store.claimWorkOrder("wo-rel-fresh", "node-1", at(1000), 60_000);
        const lease = new Date(Number(fresh.claim!.leaseExpiresAt!.seconds) * 1000 + fresh.claim!.leaseExpiresAt!.nanos / 1e6);
        expect((await store.releaseWorkOrderClaim("wo-rel-fresh", "node-1", 1n, at(1100), undefined, lease)).status).toBe(
          WorkOrderStatus.PENDING,
        );
      });

      it("a renewal or result with a superseded fencing token is refused and changes nothing", async () => {
        await store.createWorkOrder(order("wo-f2", "node-1"));
        await store.claimWorkOrder("wo-f2", "node-1", at(0), 1000);
        await store.expireWorkOrderLease("wo-f2", at(1000));
        await store.claimWorkOrder("wo-f2", "node-1", at(1100), 1000);
        await expectCode(store.renewWorkOrderLease("wo-f2", "node-1", 1n, at(1200), 1000), "WORK_ORDER_NOT_CLAIMABLE");
        await expectCode(store.finishWorkOrder("wo-f2", "node-1", ok(), at(1300), 1n), "WORK_ORDER_NOT_CLAIMABLE");
        // Without a token a result cannot say which claim it belongs to: once the order has been
        // claimed twice it is refused (a first claim's result may omit it).
        await expectCode(store.finishWorkOrder("wo-f2", "node-1", ok(), at(1300)), "WORK_ORDER_NOT_CLAIMABLE");
        await expectCode(store.finishWorkOrder("wo-f2", "node-1", ok(), at(1300), 0n), "WORK_ORDER_NOT_CLAIMABLE");
        expect((await store.getWorkOrder("wo-f2"))?.status).toBe(WorkOrderStatus.RUNNING);
        const done = await store.finishWorkOrder("wo-f2", "node-1", ok(), at(1400), 2n);
        expect(done.workOrder.attempts.map((a) => a.outcome)).toEqual(["lease_expired", "finished"]);
        // A late result of the first claim after the order finished is refused, not a duplicate.
        await expectCode(store.finishWorkOrder("wo-f2", "node-1", ok(), at(1500), 1n), "WORK_ORDER_NOT_CLAIMABLE");
        expect((await store.finishWorkOrder("wo-f2", "node-1", ok(), at(1600), 2n)).duplicate).toBe(true);
        // Nor is a late result without a token taken for a duplicate.
        await expectCode(store.finishWorkOrder("wo-f2", "node-1", ok(), at(1700)), "WORK_ORDER_NOT_CLAIMABLE");
      });

      it("cancel: a pending order at once, a running one on request until its holder reports", async () => {
        await store.createWorkOrder(order("wo-cp", "node-1"));
        const c = await store.cancelWorkOrder("wo-cp", "not needed", "req-c", at(10));
        expect(c.status).toBe(WorkOrderStatus.CANCELLED);
        expect(c.result?.code).toBe("CANCELLED");
        expect(await store.nextPendingWorkOrder("node-1")).toBeUndefined();
        expect((await store.cancelWorkOrder("wo-cp", "again", "req-d", at(20))).cancelRequest?.requestId).toBe("req-c");
        await store.createWorkOrder(order("wo-cr", "node-1"));
        await store.claimWorkOrder("wo-cr", "node-1", at(30));
        const asked = await store.cancelWorkOrder("wo-cr", "stop it", "req-e", at(40));
        expect(asked.status).toBe(WorkOrderStatus.RUNNING);
        expect(asked.cancelRequest?.reason).toBe("stop it");
        const done = await store.finishWorkOrder(
          "wo-cr",
          "node-1",
          create(WorkOrderResultSchema, { success: false, code: "CANCELLED" }),
          at(50),
          1n,
        );
        expect(done.workOrder.status).toBe(WorkOrderStatus.CANCELLED);
        await expectCode(store.cancelWorkOrder("wo-ok", "x", "r", at(60)), "RESOURCE_NOT_FOUND");
        await store.createWorkOrder(order("wo-ok", "node-1"));
        await store.claimWorkOrder("wo-ok", "node-1", at(70));
        await store.finishWorkOrder("wo-ok", "node-1", ok(), at(80));
        await expectCode(store.cancelWorkOrder("wo-ok", "too late", "r", at(90)), "WORK_ORDER_NOT_CLAIMABLE");
      });

      it("a retriable failure waits for another attempt while attempts are left, then fails for good", async () => {
        const o = order("wo-rt", "node-1");
        o.maxAttempts = 2;
        await store.createWorkOrder(o);
        await store.claimWorkOrder("wo-rt", "node-1", at(0));
        const fail = (t: bigint, when: number) =>
          store.finishWorkOrder(
            "wo-rt",
            "node-1",
            create(WorkOrderResultSchema, { success: false, retriable: true, code: "TIMEOUT" }),
            at(when),
            t,
          );
        const first = await fail(1n, 100);
        expect(first.workOrder.status).toBe(WorkOrderStatus.RETRY_PENDING);
        expect(first.workOrder.finishedAt).toBeUndefined();
        const due = timestampDate(first.workOrder.nextAttemptAt!).getTime();
        expect(due).toBeGreaterThan(at(100).getTime());
        expect(await store.nextPendingWorkOrder("node-1")).toBeUndefined();
        expect((await fail(1n, 150)).duplicate).toBe(true); // the same report again
        await expectCode(store.releaseWorkOrderRetry("wo-rt", new Date(due - 1)), "WORK_ORDER_NOT_CLAIMABLE");
        expect((await store.releaseWorkOrderRetry("wo-rt", new Date(due))).status).toBe(WorkOrderStatus.PENDING);
        expect((await store.claimWorkOrder("wo-rt", "node-1", new Date(due + 10))).claim?.fencingToken).toBe(2n);
        const last = await fail(2n, Number(due) - T0 + 20);
        expect(last.workOrder.status).toBe(WorkOrderStatus.FAILED);
        expect(last.workOrder.attempts.map((a) => a.outcome)).toEqual(["finished", "finished"]);
      });

      it("of a node's pending orders the highest priority comes next, then the oldest", async () => {
        const low = order("wo-low", "node-p", 0);
        const high = order("wo-high", "node-p", 10);
        high.priority = 5;
        const neg = order("wo-neg", "node-p", 5);
        neg.priority = -3;
        for (const o of [low, neg, high]) await store.createWorkOrder(o);
        expect((await store.nextPendingWorkOrder("node-p"))?.id).toBe("wo-high");
        await store.claimWorkOrder("wo-high", "node-p", at(20));
        expect((await store.nextPendingWorkOrder("node-p"))?.id).toBe("wo-low");
        await store.claimWorkOrder("wo-low", "node-p", at(21));
        expect((await store.nextPendingWorkOrder("node-p"))?.id).toBe("wo-neg");
        // Listings keep their (created_at, id) order.
        expect((await store.listWorkOrders({ nodeId: "node-p" })).items.map((o) => o.id)).toEqual(["wo-low", "wo-neg", "wo-high"]);
      });

      it("a lease expiry survives reopening over a crash that left both copies", async (ctx) => {
        if (!sut.reopen) return ctx.skip();
        await store.createWorkOrder(order("wo-x", "node-1"));
        await store.claimWorkOrder("wo-x", "node-1", at(0), 1000);
        await store.expireWorkOrderLease("wo-x", at(2000));
        store = await sut.reopen();
        const o = await store.getWorkOrder("wo-x");
        expect(o?.status).toBe(WorkOrderStatus.PENDING);
        expect(o?.attempts[0]?.outcome).toBe("lease_expired");
      });

      it("a second claim of the same order is refused", async () => {
        await store.createWorkOrder(order("wo-2c", "node-1"));
        await store.claimWorkOrder("wo-2c", "node-1", at(1));
        const err = await expectCode(store.claimWorkOrder("wo-2c", "node-1", at(2)), "WORK_ORDER_NOT_CLAIMABLE");
        expect(err.details).toMatchObject({ status: "running", claimed_by: "node-1" });
      });

      it("of 20 concurrent claims of one pending order exactly one wins", async () => {
        await store.createWorkOrder(order("wo-race", "node-1"));
        const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => store.claimWorkOrder("wo-race", "node-1", at(i))));
        const won = results.filter((r) => r.status === "fulfilled");
        const lost = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
        expect(won).toHaveLength(1);
        expect(lost).toHaveLength(19);
        for (const r of lost) expect((r.reason as SkipperError).code).toBe("WORK_ORDER_NOT_CLAIMABLE");
        const stored = await store.getWorkOrder("wo-race");
        expect(json(WorkOrderSchema, stored)).toEqual(json(WorkOrderSchema, (won[0] as PromiseFulfilledResult<WorkOrder>).value));
      });

      it("a pending order can be superseded (cancelled, with the result), or expired (failed), a claimed one cannot", async () => {
        await store.createWorkOrder(order("old-1", "node-1"));
        const gone = await store.supersedeWorkOrder(
          "old-1",
          create(WorkOrderResultSchema, { success: false, code: "SUPERSEDED" }),
          at(100),
          WorkOrderStatus.CANCELLED,
        );
        expect(gone.status).toBe(WorkOrderStatus.CANCELLED);
        await store.createWorkOrder(order("old-0", "node-2"));
        const expired = await store.supersedeWorkOrder(
          "old-0",
          create(WorkOrderResultSchema, { code: "EXPIRED" }),
          at(100),
          WorkOrderStatus.FAILED,
        );
        expect(expired.status).toBe(WorkOrderStatus.FAILED);
        expect(gone.result?.code).toBe("SUPERSEDED");
        expect(await store.nextPendingWorkOrder("node-1")).toBeUndefined();
        await expectCode(store.claimWorkOrder("old-1", "node-1", at(200)), "WORK_ORDER_NOT_CLAIMABLE");
        await store.createWorkOrder(order("old-2", "node-1"));
        await store.claimWorkOrder("old-2", "node-1", at(300));
        await expectCode(
          store.supersedeWorkOrder("old-2", create(WorkOrderResultSchema, { code: "SUPERSEDED" }), at(400), WorkOrderStatus.CANCELLED),
          "WORK_ORDER_NOT_CLAIMABLE",
        );
      });

      it("claiming an absent order is RESOURCE_NOT_FOUND", async () => {
        await expectCode(store.claimWorkOrder("wo-ghost", "node-1", at(0)), "RESOURCE_NOT_FOUND");
      });

      it("finishing a running order records the result, the final status and finished_at", async () => {
        await store.createWorkOrder(order("wo-ok", "node-1"));
        await store.createWorkOrder(order("wo-bad", "node-1", 1));
        await store.claimWorkOrder("wo-ok", "node-1", at(10));
        await store.claimWorkOrder("wo-bad", "node-1", at(11));
        const good = await store.finishWorkOrder("wo-ok", "node-1", ok(), at(20));
        const bad = await store.finishWorkOrder("wo-bad", "node-1", failed(), at(21));
        expect(good.duplicate).toBe(false);
        expect(good.workOrder.status).toBe(WorkOrderStatus.SUCCESS);
        expect(good.workOrder.result?.code).toBe("APPLY_OK");
        expect(timestampDate(good.workOrder.finishedAt!)).toEqual(at(20));
        expect(bad.workOrder.status).toBe(WorkOrderStatus.FAILED);
        expect(json(WorkOrderSchema, await store.getWorkOrder("wo-bad"))).toEqual(json(WorkOrderSchema, bad.workOrder));
      });

      it("finishing an order again returns the stored result unchanged with duplicate=true", async () => {
        await store.createWorkOrder(order("wo-dupfin", "node-1"));
        await store.claimWorkOrder("wo-dupfin", "node-1", at(1));
        const first = await store.finishWorkOrder("wo-dupfin", "node-1", ok(), at(2));
        const again = await store.finishWorkOrder("wo-dupfin", "node-1", failed(), at(3));
        expect(again.duplicate).toBe(true);
        expect(json(WorkOrderSchema, again.workOrder)).toEqual(json(WorkOrderSchema, first.workOrder));
        expect((await store.getWorkOrder("wo-dupfin"))?.status).toBe(WorkOrderStatus.SUCCESS);
      });

      it("finishing by a node that does not hold the claim is refused with FORBIDDEN", async () => {
        await store.createWorkOrder(order("wo-steal", "node-1"));
        await store.claimWorkOrder("wo-steal", "node-1", at(1));
        await expectCode(store.finishWorkOrder("wo-steal", "node-2", ok(), at(2)), "FORBIDDEN");
        expect((await store.getWorkOrder("wo-steal"))?.status).toBe(WorkOrderStatus.RUNNING);
      });

      it("finishing a pending order is refused with WORK_ORDER_NOT_CLAIMABLE", async () => {
        await store.createWorkOrder(order("wo-early", "node-1"));
        await expectCode(store.finishWorkOrder("wo-early", "node-1", ok(), at(1)), "WORK_ORDER_NOT_CLAIMABLE");
        await expectCode(store.finishWorkOrder("wo-missing", "node-1", ok(), at(1)), "RESOURCE_NOT_FOUND");
      });

      it("a finished order cannot be claimed and reports its final status", async () => {
        await store.createWorkOrder(order("wo-done", "node-1"));
        await store.claimWorkOrder("wo-done", "node-1", at(1));
        await store.finishWorkOrder("wo-done", "node-1", failed(), at(2));
        const err = await expectCode(store.claimWorkOrder("wo-done", "node-1", at(3)), "WORK_ORDER_NOT_CLAIMABLE");
        expect(err.details).toMatchObject({ status: "failed", claimed_by: "node-1" });
      });

      it("next pending is the oldest pending order of that node, ties broken by id", async () => {
        await store.createWorkOrder(order("wo-late", "node-1", 300));
        await store.createWorkOrder(order("wo-b", "node-1", 100));
        await store.createWorkOrder(order("wo-a", "node-1", 100));
        await store.createWorkOrder(order("wo-other", "node-2", 0));
        expect((await store.nextPendingWorkOrder("node-1"))?.id).toBe("wo-a");
        expect(await store.countPendingWorkOrders("node-1")).toBe(3);
        await store.claimWorkOrder("wo-a", "node-1", at(400));
        expect((await store.nextPendingWorkOrder("node-1"))?.id).toBe("wo-b");
        expect(await store.countPendingWorkOrders("node-1")).toBe(2);
        expect((await store.nextPendingWorkOrder("node-2"))?.id).toBe("wo-other");
        expect(await store.nextPendingWorkOrder("node-3")).toBeUndefined();
        expect(await store.countPendingWorkOrders("node-3")).toBe(0);
      });

      it("work orders list in (created_at, id) order, filtered by status, node and tenant", async () => {
        await store.createWorkOrder(order("wo-3", "node-1", 30, "tenant-a"));
        await store.createWorkOrder(order("wo-1", "node-2", 10, "tenant-b"));
        await store.createWorkOrder(order("wo-2b", "node-1", 20, "tenant-b"));
        await store.createWorkOrder(order("wo-2a", "node-1", 20, "tenant-a"));
        await store.claimWorkOrder("wo-3", "node-1", at(40));
        await store.createWorkOrder(order("wo-4", "node-2", 40, "tenant-a"));
        await store.claimWorkOrder("wo-4", "node-2", at(41));
        await store.finishWorkOrder("wo-4", "node-2", ok(), at(42));
        const ids = async (f: Parameters<Store["listWorkOrders"]>[0]) =>
          (await collect((pageToken) => store.listWorkOrders({ ...f, pageSize: 1, pageToken }))).items.map((o) => o.id);
        expect(await ids({})).toEqual(["wo-1", "wo-2a", "wo-2b", "wo-3", "wo-4"]);
        expect(await ids({ status: WorkOrderStatus.SUCCESS })).toEqual(["wo-4"]);
        expect(await ids({ status: WorkOrderStatus.FAILED })).toEqual([]);
        expect(await ids({ status: WorkOrderStatus.PENDING })).toEqual(["wo-1", "wo-2a", "wo-2b"]);
        expect(await ids({ status: WorkOrderStatus.PENDING, nodeId: "node-1" })).toEqual(["wo-2a", "wo-2b"]);
        expect(await ids({ status: WorkOrderStatus.RUNNING })).toEqual(["wo-3"]);
        expect(await ids({ nodeId: "node-1", tenantId: "tenant-a" })).toEqual(["wo-2a", "wo-3"]);
        expect(await ids({ tenantId: "tenant-b" })).toEqual(["wo-1", "wo-2b"]);
        expect(await ids({ nodeId: "node-9" })).toEqual([]);
        // Several statuses at once (the in-flight read of a pass), with a tenant or without.
        const inFlight = [WorkOrderStatus.PENDING, WorkOrderStatus.RUNNING, WorkOrderStatus.RETRY_PENDING];
        expect(await ids({ statuses: inFlight })).toEqual(["wo-1", "wo-2a", "wo-2b", "wo-3"]);
        expect(await ids({ statuses: inFlight, tenantId: "tenant-a" })).toEqual(["wo-2a", "wo-3"]);
        expect(await ids({ statuses: [WorkOrderStatus.SUCCESS, WorkOrderStatus.RUNNING] })).toEqual(["wo-3", "wo-4"]);
        expect(await ids({ statuses: [] })).toEqual([]);
      });

      it("newestFirst lists work orders in descending (created_at, id) order, with the same filters and pages", async () => {
        await store.createWorkOrder(order("wo-3", "node-1", 30, "tenant-a"));
        await store.createWorkOrder(order("wo-1", "node-2", 10, "tenant-b"));
        await store.createWorkOrder(order("wo-2b", "node-1", 20, "tenant-b"));
        await store.createWorkOrder(order("wo-2a", "node-1", 20, "tenant-a"));
        await store.createWorkOrder(order("wo-4", "node-2", 40, "tenant-a"));
        await store.claimWorkOrder("wo-4", "node-2", at(41));
        await store.finishWorkOrder("wo-4", "node-2", ok(), at(42));
        for (const pageSize of [1, 2, 100]) {
          const ids = async (f: Parameters<Store["listWorkOrders"]>[0]) =>
            (await collect((pageToken) => store.listWorkOrders({ ...f, newestFirst: true, pageSize, pageToken }))).items.map((o) => o.id);
          expect(await ids({})).toEqual(["wo-4", "wo-3", "wo-2b", "wo-2a", "wo-1"]);
          expect(await ids({ status: WorkOrderStatus.PENDING })).toEqual(["wo-3", "wo-2b", "wo-2a", "wo-1"]);
          expect(await ids({ tenantId: "tenant-a" })).toEqual(["wo-4", "wo-3", "wo-2a"]);
          expect(await ids({ nodeId: "node-1", tenantId: "tenant-a" })).toEqual(["wo-3", "wo-2a"]);
          expect(await ids({ nodeId: "node-9" })).toEqual([]);
        }
        // A finished order listed newest first is the whole order, as oldest first.
        expect((await store.listWorkOrders({ newestFirst: true, pageSize: 1 })).items[0]?.result?.code).toBe("APPLY_OK");
        // A token resumes the order it was made in only.
        const first = await store.listWorkOrders({ newestFirst: true, pageSize: 2 });
        await expectCode(store.listWorkOrders({ pageSize: 2, pageToken: first.nextPageToken }), "INVALID_REQUEST");
        const oldest = await store.listWorkOrders({ pageSize: 2 });
        await expectCode(store.listWorkOrders({ newestFirst: true, pageSize: 2, pageToken: oldest.nextPageToken }), "INVALID_REQUEST");
      });

      it("expiresBy lists only orders whose expires_at is due by then", async () => {
        const expiring = (id: string, offsetMs?: number) => {
          const o = order(id, "node-1");
          if (offsetMs !== undefined) o.expiresAt = timestampFromDate(at(offsetMs));
          return o;
        };
        for (const o of [expiring("x-never"), expiring("x-soon", 1000), expiring("x-later", 5000)]) await store.createWorkOrder(o);
        const due = async (offsetMs: number) =>
          (await store.listWorkOrders({ status: WorkOrderStatus.PENDING, expiresBy: at(offsetMs) })).items.map((o) => o.id).sort();
        expect(await due(0)).toEqual([]);
        expect(await due(1000)).toEqual(["x-soon"]);
        expect(await due(9000)).toEqual(["x-later", "x-soon"]);
      });
    });

    describe("events", () => {
      it("retention drops events older than the cutoff (other days and the same day), keeps the rest, and it holds after reopening", async (ctx) => {
        const DAY = 24 * 3_600_000;
        await store.appendEvent(event("old-1", -3 * DAY));
        await store.appendEvent(event("old-2", -DAY - 5));
        await store.appendEvent(event("same-day-old", 0));
        await store.appendEvent(event("same-day-new", 2000));
        await store.appendEvent(event("new", DAY));
        expect(await store.pruneEvents(at(1000))).toBe(3);
        expect((await store.listEvents({})).items.map((e) => e.id)).toEqual(["same-day-new", "new"]);
        expect(await store.pruneEvents(at(1000))).toBe(0);
        // A pruned event can be recorded again (its id is free), and the kept ones are still there.
        await store.appendEvent(event("later", DAY + 1));
        expect((await store.listEvents({})).items.map((e) => e.id)).toEqual(["same-day-new", "new", "later"]);
        if (!sut.reopen) return ctx.skip();
        store = await sut.reopen();
        expect((await store.listEvents({})).items.map((e) => e.id)).toEqual(["same-day-new", "new", "later"]);
      });

      it("appending the same event id again is a no-op", async () => {
        await store.appendEvent(event("ev-1", 0, { type: "resource_created" }));
        await store.appendEvent(event("ev-1", 0, { type: "resource_updated" }));
        await Promise.all([store.appendEvent(event("ev-2", 1)), store.appendEvent(event("ev-2", 1))]);
        const page = await store.listEvents({});
        expect(page.items.map((e) => [e.id, e.type])).toEqual([
          ["ev-1", "resource_created"],
          ["ev-2", "resource_created"],
        ]);
      });

      it("events list in (timestamp, id) order and filter by type, tenant, resource, work order, correlation and since", async () => {
        await store.appendEvent(event("ev-c", 300, { type: "work_order_started", workOrderId: "wo-1", tenantId: "t1" }));
        await store.appendEvent(event("ev-a", 100, { type: "resource_created", resourceId: "r1", tenantId: "t1", correlationId: "c1" }));
        await store.appendEvent(event("ev-b", 100, { type: "resource_updated", resourceId: "r1", tenantId: "t2", correlationId: "c1" }));
        await store.appendEvent(event("ev-d", 86_400_000, { type: "resource_updated", resourceId: "r2", tenantId: "t2" }));
        const ids = async (f: Parameters<Store["listEvents"]>[0]) =>
          (await collect((pageToken) => store.listEvents({ ...f, pageSize: 1, pageToken }))).items.map((e) => e.id);
        expect(await ids({})).toEqual(["ev-a", "ev-b", "ev-c", "ev-d"]);
        expect(await ids({ type: "resource_updated" })).toEqual(["ev-b", "ev-d"]);
        expect(await ids({ tenantId: "t1" })).toEqual(["ev-a", "ev-c"]);
        expect(await ids({ resourceId: "r1" })).toEqual(["ev-a", "ev-b"]);
        expect(await ids({ workOrderId: "wo-1" })).toEqual(["ev-c"]);
        expect(await ids({ correlationId: "c1" })).toEqual(["ev-a", "ev-b"]);
        expect(await ids({ since: at(100) })).toEqual(["ev-a", "ev-b", "ev-c", "ev-d"]);
        expect(await ids({ since: at(101) })).toEqual(["ev-c", "ev-d"]);
        expect(await ids({ since: at(101), tenantId: "t2" })).toEqual(["ev-d"]);
        // Newest first, across days and pages, down to since.
        for (const pageSize of [1, 2, 100]) {
          const newest = async (f: Parameters<Store["listEvents"]>[0]) =>
            (await collect((pageToken) => store.listEvents({ ...f, newestFirst: true, pageSize, pageToken }))).items.map((e) => e.id);
          expect(await newest({})).toEqual(["ev-d", "ev-c", "ev-b", "ev-a"]);
          expect(await newest({ tenantId: "t1" })).toEqual(["ev-c", "ev-a"]);
          expect(await newest({ since: at(101) })).toEqual(["ev-d", "ev-c"]);
          expect(await newest({ since: at(100), resourceId: "r1" })).toEqual(["ev-b", "ev-a"]);
          expect(await newest({ since: at(86_400_001) })).toEqual([]);
        }
        const newestPage = await store.listEvents({ newestFirst: true, pageSize: 1 });
        await expectCode(store.listEvents({ pageSize: 1, pageToken: newestPage.nextPageToken }), "INVALID_REQUEST");
        const [first] = (await store.listEvents({ workOrderId: "wo-1" })).items;
        expect(json(EventSchema, first)).toEqual(
          json(EventSchema, event("ev-c", 300, { type: "work_order_started", workOrderId: "wo-1", tenantId: "t1" })),
        );
      });
    });

    describe("audit trail", () => {
      const DAY = 24 * 3_600_000;
      const sequences = (entries: Array<{ sequence: bigint }>) => entries.map((e) => Number(e.sequence));
      const stored = async () => {
        const out = [];
        for await (const s of store.scanAuditEntries()) out.push(s);
        return out;
      };

      it("appended entries are numbered 1..n, each chained to the hash of the one before, and stored as returned", async () => {
        const a = await store.appendAuditEntry(auditDraft(0));
        const b = await store.appendAuditEntry(auditDraft(1, "service/api", "FORBIDDEN"));
        const c = await store.appendAuditEntry(auditDraft(2));
        expect(sequences([a, b, c])).toEqual([1, 2, 3]);
        expect(a.previousHash).toBe("");
        expect(b.previousHash).toBe(a.hash);
        expect(c.previousHash).toBe(b.hash);
        expect(new Set([a.hash, b.hash, c.hash]).size).toBe(3);
        expect(b).toMatchObject({ target: "service/api", outcome: "FORBIDDEN", actor: { name: "ci-web", role: Role.OPERATOR } });
        const listed = (await store.listAuditEntries({})).items;
        expect(listed.map((e) => json(AuditEntrySchema, e))).toEqual([a, b, c].map((e) => json(AuditEntrySchema, e)));
        // As stored: one line each, whose hash is the hash of its own content.
        const lines = await stored();
        expect(lines).toHaveLength(3);
        for (const { text } of lines) {
          const line = readAuditLine(text);
          if (!line.ok) throw new Error(`not an entry: ${text}`);
          expect(auditHash(line.json)).toBe(line.entry.hash);
        }
        expect(new Set(lines.map((l) => l.location)).size).toBe(3);
      });

      it("concurrent appends make one gapless chain", async () => {
        const entries = await Promise.all(Array.from({ length: 40 }, (_, i) => store.appendAuditEntry(auditDraft(i))));
        expect(sequences(entries).sort((x, y) => x - y)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
        const verified = await verifyAuditTrail(store);
        expect(verified).toMatchObject({ intact: true, entriesChecked: 40, firstSequence: 1n, lastSequence: 40n });
        expect(verified.headHash).toBe(entries.find((e) => e.sequence === 40n)!.hash);
        const listed = await collect((pageToken) => store.listAuditEntries({ pageSize: 7, pageToken }));
        expect(sequences(listed.items)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
      });

      it("an entry's time never goes back along the chain: an earlier draft time takes the last entry's", async () => {
        await store.appendAuditEntry(auditDraft(5000));
        const late = await store.appendAuditEntry(auditDraft(1000));
        expect(timestampDate(late.time!)).toEqual(at(5000));
      });

      it("listings filter by time range and page in sequence order", async () => {
        for (const offset of [-DAY, 0, 100, 200, 300, DAY, 2 * DAY]) await store.appendAuditEntry(auditDraft(offset));
        const seqs = async (f: Parameters<Store["listAuditEntries"]>[0]) => {
          const all = await collect((pageToken) => store.listAuditEntries({ ...f, pageSize: 2, pageToken }));
          return sequences(all.items);
        };
        expect(await seqs({})).toEqual([1, 2, 3, 4, 5, 6, 7]);
        expect(await seqs({ since: at(100) })).toEqual([3, 4, 5, 6, 7]);
        expect(await seqs({ until: at(100) })).toEqual([1, 2]);
        expect(await seqs({ since: at(0), until: at(DAY) })).toEqual([2, 3, 4, 5]);
        expect(await seqs({ since: at(101), until: at(300) })).toEqual([4]);
        expect(await seqs({ since: at(3 * DAY) })).toEqual([]);
        await expectCode(store.listAuditEntries({ pageToken: "garbage!" }), "INVALID_REQUEST");
      });

      it("retention drops whole days before the cutoff's, never the last entry's, and the rest still verifies", async (ctx) => {
        for (const offset of [-3 * DAY, -3 * DAY + 1, -2 * DAY, 0, 2000]) await store.appendAuditEntry(auditDraft(offset));
        // The cutoff's own day is kept whole, its entries before the cutoff too.
        expect(await store.pruneAuditEntries(at(1000))).toBe(3);
        expect(sequences((await store.listAuditEntries({})).items)).toEqual([4, 5]);
        expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, entriesChecked: 2, firstSequence: 4n, lastSequence: 5n });
        // Every entry is older than this cutoff, but the last one's day stays: the chain goes on from it.
        expect(await store.pruneAuditEntries(at(10 * DAY))).toBe(0);
        const next = await store.appendAuditEntry(auditDraft(3000));
        expect(next.sequence).toBe(6n);
        expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, firstSequence: 4n, lastSequence: 6n });
        if (!sut.reopen) return ctx.skip();
        store = await sut.reopen();
        expect(sequences((await store.listAuditEntries({})).items)).toEqual([4, 5, 6]);
      });

      it("a draft without a time is refused with INVALID_REQUEST and takes no number", async () => {
        await expectCode(store.appendAuditEntry({ ...auditDraft(0), time: undefined }), "INVALID_REQUEST");
        expect((await store.appendAuditEntry(auditDraft(0))).sequence).toBe(1n);
      });

      it("an appended entry survives reopening, and numbering and the chain go on from it", async (ctx) => {
        if (!sut.reopen) return ctx.skip();
        await store.appendAuditEntry(auditDraft(0));
        const last = await store.appendAuditEntry(auditDraft(DAY));
        store = await sut.reopen();
        expect(sequences((await store.listAuditEntries({})).items)).toEqual([1, 2]);
        const next = await store.appendAuditEntry(auditDraft(DAY + 1));
        expect(next.sequence).toBe(3n);
        expect(next.previousHash).toBe(last.hash);
        expect(await verifyAuditTrail(store)).toMatchObject({ intact: true, entriesChecked: 3 });
      });
    });

    describe("snapshots", () => {
      it("the latest snapshot of each scope replaces the previous one", async () => {
        expect(await store.getLatestSnapshot("system")).toBeUndefined();
        const snap = (snapshotId: string, scope: string, tenantId = "") =>
          create(SnapshotSchema, {
            snapshotId,
            scope,
            tenantId,
            schemaVersion: "v1",
            createdAt: timestampFromDate(at(0)),
            resources: [tenant("alpha")],
          });
        await store.putSnapshot(snap("s1", "system"));
        await store.putSnapshot(snap("s2", "system"));
        await store.putSnapshot(snap("s3", "tenant", "alpha"));
        await store.putSnapshot(snap("s4", "tenant", "beta"));
        expect((await store.getLatestSnapshot("system"))?.snapshotId).toBe("s2");
        expect((await store.getLatestSnapshot("tenant", "alpha"))?.snapshotId).toBe("s3");
        expect(json(SnapshotSchema, await store.getLatestSnapshot("tenant", "beta"))).toEqual(
          json(SnapshotSchema, snap("s4", "tenant", "beta")),
        );
        expect(await store.getLatestSnapshot("tenant", "gamma")).toBeUndefined();
      });

      it("a tenant snapshot with an invalid tenant id is refused with INVALID_REQUEST", async () => {
        await expectCode(
          store.putSnapshot(create(SnapshotSchema, { snapshotId: "s", scope: "tenant", tenantId: "../x" })),
          "INVALID_REQUEST",
        );
        await expectCode(store.putSnapshot(create(SnapshotSchema, { snapshotId: "s", scope: "galaxy" })), "INVALID_REQUEST");
      });
    });

    describe("idempotency records", () => {
      const key = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

      it("an idempotency record is returned until it expires, then treated as absent", async () => {
        const record = {
          key,
          requestHash: "f".repeat(64),
          response: { work_order: { id: "wo-1" } },
          createdAt: at(0),
          expiresAt: at(60_000),
        };
        await store.putIdempotencyRecord(record);
        expect(await store.getIdempotencyRecord(key, at(59_999))).toEqual(record);
        expect(await store.getIdempotencyRecord(key, at(60_000))).toBeUndefined();
        expect(await store.getIdempotencyRecord("0".repeat(64), at(0))).toBeUndefined();
      });

      it("putting a record under an expired key replaces it", async () => {
        await store.putIdempotencyRecord({ key, requestHash: "1".repeat(64), response: {}, createdAt: at(0), expiresAt: at(10) });
        expect(await store.getIdempotencyRecord(key, at(20))).toBeUndefined();
        const fresh = { key, requestHash: "2".repeat(64), response: { n: 2 }, createdAt: at(20), expiresAt: at(1000) };
        await store.putIdempotencyRecord(fresh);
        expect(await store.getIdempotencyRecord(key, at(30))).toEqual(fresh);
      });
    });

    describe("credentials", () => {
      it("node credentials are stored, rotated and read back", async () => {
        expect(await store.getNodeCredential("node-1")).toBeUndefined();
        await store.putNodeCredential({ nodeId: "node-1", tokenHash: "a".repeat(64), createdAt: at(0) });
        await store.putNodeCredential({ nodeId: "node-1", tokenHash: "b".repeat(64), createdAt: at(1) });
        expect(await store.getNodeCredential("node-1")).toEqual({ nodeId: "node-1", tokenHash: "b".repeat(64), createdAt: at(1) });
      });

      it("a live node credential is there while its node is, and gone with the node's deletion", async () => {
        await store.putNodeCredential({ nodeId: "node-9", tokenHash: "a".repeat(64), createdAt: at(0) });
        expect(await store.getLiveNodeCredential("node-9")).toBeUndefined();
        await store.createResource(tenant("node-9", "node 9", "node"));
        expect((await store.getLiveNodeCredential("node-9"))?.tokenHash).toBe("a".repeat(64));
        await store.updateResource("node", "node-9", (r) => {
          r.deletion = create(DeletionSchema, { deletedAt: timestampFromDate(at(5)) });
          return r;
        });
        expect(await store.getLiveNodeCredential("node-9")).toBeUndefined();
        expect((await store.getNodeCredential("node-9"))?.tokenHash).toBe("a".repeat(64));
      });

      it("a node credential keeps the node's certificates, and emptying them is kept too", async () => {
        const certs = [
          { serial: "7A01", notAfter: at(1000) },
          { serial: "1B2C", notAfter: at(2000), lifetimeMs: 600_000, underTokenHash: "ab12" },
        ];
        await store.putNodeCredential({ nodeId: "node-2", tokenHash: "", createdAt: at(0), certificates: certs });
        expect(await store.getNodeCredential("node-2")).toEqual({ nodeId: "node-2", tokenHash: "", createdAt: at(0), certificates: certs });
        await store.putNodeCredential({ nodeId: "node-2", tokenHash: "", createdAt: at(0), certificates: [] });
        expect((await store.getNodeCredential("node-2"))?.certificates).toEqual([]);
      });

      it("enrollment tokens are stored, replaced and listed oldest first", async () => {
        const token = (id: string, offsetMs: number, remaining: number) =>
          create(EnrollmentTokenSchema, {
            id,
            uses: 3,
            remainingUses: remaining,
            createdAt: timestampFromDate(at(offsetMs)),
            labels: { rack: "4" },
          });
        expect(await store.getEnrollmentToken("0a1b2c3d4e5f")).toBeUndefined();
        await store.putEnrollmentToken({ token: token("0a1b2c3d4e5f", 5, 3), secretHash: "a".repeat(64) });
        await store.putEnrollmentToken({ token: token("00aa11bb22cc", 1, 3), secretHash: "b".repeat(64) });
        await store.putEnrollmentToken({ token: token("0a1b2c3d4e5f", 5, 2), secretHash: "a".repeat(64) });
        const got = await store.getEnrollmentToken("0a1b2c3d4e5f");
        expect(json(EnrollmentTokenSchema, got?.token)).toEqual(json(EnrollmentTokenSchema, token("0a1b2c3d4e5f", 5, 2)));
        expect(got?.secretHash).toBe("a".repeat(64));
        expect((await store.listEnrollmentTokens()).map((r) => [r.token.id, r.token.remainingUses])).toEqual([
          ["00aa11bb22cc", 3],
          ["0a1b2c3d4e5f", 2],
        ]);
      });

      it("the admin credential is stored and replaced", async () => {
        expect(await store.getAdminCredential()).toBeUndefined();
        await store.putAdminCredential({ tokenHash: "c".repeat(64), createdAt: at(0) });
        await store.putAdminCredential({ tokenHash: "d".repeat(64), createdAt: at(5) });
        expect(await store.getAdminCredential()).toEqual({ tokenHash: "d".repeat(64), createdAt: at(5) });
      });

      it("API keys are stored, replaced and listed oldest first, and a returned copy does not change the store", async () => {
        expect(await store.getApiKey("0a1b2c3d4e5f")).toBeUndefined();
        expect(await store.listApiKeys()).toEqual([]);
        const first = apiKey("0a1b2c3d4e5f", "ci-web", 2);
        const second = apiKey("00aa11bb22cc", "grafana", 1);
        await store.putApiKey({ key: second.key, secretHash: "b".repeat(64) });
        await store.putApiKey({ key: first.key, secretHash: "a".repeat(64) });
        const rotated = apiKey("0a1b2c3d4e5f", "ci-web", 2);
        rotated.key.rotatedAt = timestampFromDate(at(9));
        await store.putApiKey({ key: rotated.key, secretHash: "c".repeat(64), previousSecretHash: "a".repeat(64) });
        const got = await store.getApiKey("0a1b2c3d4e5f");
        expect(got?.secretHash).toBe("c".repeat(64));
        expect(got?.previousSecretHash).toBe("a".repeat(64));
        expect(json(ApiKeySchema, got?.key)).toEqual(json(ApiKeySchema, rotated.key));
        got!.key.name = "changed";
        expect((await store.getApiKey("0a1b2c3d4e5f"))?.key.name).toBe("ci-web");
        expect((await store.listApiKeys()).map((r) => [r.key.id, r.key.scope?.tenantIds])).toEqual([
          ["00aa11bb22cc", ["tenant-a"]],
          ["0a1b2c3d4e5f", ["tenant-a"]],
        ]);
      });
    });

    describeWebhookConformance(
      () => store,
      async () => {
        if (sut.reopen) store = await sut.reopen();
        return sut.reopen !== undefined;
      },
    );

    describeToldConformance(
      () => store,
      async () => {
        if (sut.reopen) store = await sut.reopen();
        return sut.reopen !== undefined;
      },
    );

    describePoolConformance(
      () => store,
      async () => {
        if (sut.reopen) store = await sut.reopen();
        return sut.reopen !== undefined;
      },
    );

    describe("reopening", () => {
      it("everything acknowledged survives reopening and versions keep growing", async (ctx) => {
        if (!sut.reopen) return ctx.skip();
        const created = await store.createResource(tenant("keep"));
        const updated = await store.updateResource("tenant", "keep", (r) => {
          r.metadata!.labels.v = "2";
          return r;
        });
        await store.createWorkOrder(order("wo-p", "node-1", 1));
        await store.createWorkOrder(order("wo-r", "node-1", 2));
        await store.createWorkOrder(order("wo-f", "node-1", 3));
        await store.claimWorkOrder("wo-r", "node-1", at(10));
        await store.claimWorkOrder("wo-f", "node-1", at(11));
        const finished = await store.finishWorkOrder("wo-f", "node-1", ok(), at(12));
        await store.appendEvent(event("ev-keep", 5, { type: "work_order_created" }));
        await store.putSnapshot(create(SnapshotSchema, { snapshotId: "snap", scope: "tenant", tenantId: "keep" }));
        await store.putSnapshot(create(SnapshotSchema, { snapshotId: "sys", scope: "system" }));
        const key = "0123456789abcdef0123456789abcdef";
        const record = {
          key,
          requestHash: "e".repeat(64),
          response: { ok: true },
          createdAt: new Date(),
          expiresAt: new Date(Date.now() + 3_600_000),
        };
        await store.putIdempotencyRecord(record);
        await store.putNodeCredential({ nodeId: "node-1", tokenHash: "a".repeat(64), createdAt: at(0) });
        await store.putAdminCredential({ tokenHash: "c".repeat(64), createdAt: at(0) });
        await store.putApiKey({ ...apiKey("0a1b2c3d4e5f", "ci-web", 0), secretHash: "f".repeat(64) });
        const before = {
          resource: json(ResourceSchema, await store.getResource("tenant", "keep")),
          orders: (await store.listWorkOrders({})).items.map((o) => json(WorkOrderSchema, o)),
          events: (await store.listEvents({})).items.map((e) => json(EventSchema, e)),
        };

        store = await sut.reopen();

        expect(json(ResourceSchema, await store.getResource("tenant", "keep"))).toEqual(before.resource);
        expect((await store.listWorkOrders({})).items.map((o) => json(WorkOrderSchema, o))).toEqual(before.orders);
        expect(json(WorkOrderSchema, await store.getWorkOrder("wo-f"))).toEqual(json(WorkOrderSchema, finished.workOrder));
        expect((await store.nextPendingWorkOrder("node-1"))?.id).toBe("wo-p");
        expect((await store.listEvents({})).items.map((e) => json(EventSchema, e))).toEqual(before.events);
        await store.appendEvent(event("ev-keep", 5, { type: "changed" }));
        expect((await store.listEvents({})).items.map((e) => e.type)).toEqual(["work_order_created"]);
        expect((await store.getLatestSnapshot("tenant", "keep"))?.snapshotId).toBe("snap");
        expect((await store.getLatestSnapshot("system"))?.snapshotId).toBe("sys");
        expect(await store.getIdempotencyRecord(key, new Date())).toEqual(record);
        expect((await store.getNodeCredential("node-1"))?.tokenHash).toBe("a".repeat(64));
        expect((await store.getAdminCredential())?.tokenHash).toBe("c".repeat(64));
        expect((await store.getApiKey("0a1b2c3d4e5f"))?.secretHash).toBe("f".repeat(64));
        await expectCode(store.createResource(tenant("keep")), "CONFLICT");
        const after = await store.updateResource("tenant", "keep", (r) => ((r.metadata!.labels.v = "3"), r));
        expect(BigInt(after.metadata!.resourceVersion) > BigInt(updated.metadata!.resourceVersion)).toBe(true);
        expect(BigInt(updated.metadata!.resourceVersion) > BigInt(created.metadata!.resourceVersion)).toBe(true);
      });
    });
  });
}

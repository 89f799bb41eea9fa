// Tenant scope over every resource kind, on a real controller (HTTP/2 + TLS, the generated
// clients): for each member of ResourceSpec's oneof, a resource of tenant B's is invisible to a
// reader scoped to tenant A — not listed, not got, not explained, not in its event watch — and
// visible to a reader scoped to B; a fleet kind's resource is listed and got by both (its
// explanation and events are for readers of every tenant). The kinds come
// from the contract, so a new kind is in this test by being in it: nobody writes a case.
//
// The resources are written into the controller's store directly (a deployment or rollout is
// the reconciler's, and a spec holding only its tenant need not pass every API rule); their
// events are recorded the way the API's changes record them (event-recorder, tenant from
// tenantOf).
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RESOURCE_TYPES, tenantOf, type ResourceType } from "../common/resource-kinds.js";
import { recordEvents } from "../controller/events/event-recorder.js";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { ResourceSchema, ResourceSpecSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";

const A = "team-a";
const B = "team-b";
const member = (type: ResourceType) => ResourceSpecSchema.oneofs.find((o) => o.name === "kind")!.fields.find((f) => f.name === type)!;

/** Whether the contract gives a kind no tenant: not a tenant, and its spec has no tenant_id. */
function isFleetKind(type: ResourceType): boolean {
  return type !== "tenant" && !member(type).message!.fields.some((f) => f.name === "tenant_id");
}

/** A resource of `type` that tenant `tenant` owns when its kind has tenants (id: `<tenant>-<type>`). */
function resourceOf(type: ResourceType, tenant: string): Resource {
  const field = member(type);
  const namesTenant = field.message!.fields.some((f) => f.name === "tenant_id");
  const id = type === "tenant" ? tenant : `${tenant}-${type.replace("_", "-")}`;
  return create(ResourceSchema, {
    id,
    resourceType: type,
    schemaVersion: "v1",
    desiredState: {
      kind: { case: field.localName, value: create(field.message!, namesTenant ? ({ tenantId: tenant } as never) : {}) } as never,
    },
    metadata: { labels: {} },
    createdAt: timestampFromDate(new Date()),
    updatedAt: timestampFromDate(new Date()),
  });
}

describe("every resource kind keeps to its tenant's scope", () => {
  let tc: TestController;
  const keys: Record<string, string> = {};

  beforeAll(async () => {
    tc = await startController({ reconcileIntervalMs: 3_600_000 });
    const access = tc.client(AccessService, { admin: true });
    for (const t of [A, B]) {
      keys[t] = (await access.createApiKey({ name: `viewer-${t}`, role: Role.VIEWER, scope: { tenantIds: [t] } })).secret;
    }
    const store = tc.controller.store;
    for (const r of [B, A].flatMap((t) => RESOURCE_TYPES.map((type) => resourceOf(type, t)))) {
      const kept = await store.createResource(r);
      await recordEvents(store, [
        {
          type: "resource_created",
          requestId: `kind-scope-${kept.id}`,
          correlationId: `kind-scope-${kept.id}`,
          resourceType: kept.resourceType,
          resourceId: kept.id,
          tenantId: tenantOf(kept),
        },
      ]);
    }
    // Last, an event of each tenant's own marks the end of what its reader is shown.
    for (const t of [A, B]) {
      await recordEvents(store, [
        { type: "resource_updated", requestId: `end-${t}`, correlationId: `end-${t}`, resourceId: `end-${t}`, tenantId: t },
      ]);
    }
  });
  afterAll(async () => {
    await tc?.stop();
  });

  it("the contract's kinds are the table's kinds", () => {
    const members = ResourceSpecSchema.oneofs.find((o) => o.name === "kind")!.fields.map((f) => f.name);
    expect([...RESOURCE_TYPES].sort()).toEqual([...members].sort());
  });

  it.each(RESOURCE_TYPES.map((t) => [t]))(
    "%s: list, get and explain show B's to B's reader only (a fleet kind's list and get to both)",
    async (type) => {
      const fleet = isFleetKind(type);
      const b = resourceOf(type, B);
      for (const [reader, sees] of [
        [A, fleet],
        [B, true],
      ] as const) {
        const resources = tc.client(ResourceService, { token: keys[reader] });
        const listed = (await resources.listResources({ resourceType: type, pageSize: 1000 })).resources.map((r) => r.id);
        expect(listed.includes(b.id), `${reader} lists ${type} ${b.id}`).toBe(sees);
        if (sees) {
          expect((await resources.getResource({ resourceType: type, id: b.id })).resource?.id).toBe(b.id);
          // Explaining a fleet kind's resource walks every tenant's orders: for every-tenant readers only.
          if (fleet) expect((await rpcError(resources.explainResource({ resourceType: type, id: b.id }))).code).toBe("FORBIDDEN");
          else expect((await resources.explainResource({ resourceType: type, id: b.id })).resource?.id).toBe(b.id);
        } else {
          expect((await rpcError(resources.getResource({ resourceType: type, id: b.id }))).code, `${reader} gets ${type}`).toMatch(
            /^(RESOURCE_NOT_FOUND|FORBIDDEN)$/,
          );
          expect((await rpcError(resources.explainResource({ resourceType: type, id: b.id }))).code, `${reader} explains ${type}`).toMatch(
            /^(RESOURCE_NOT_FOUND|FORBIDDEN)$/,
          );
        }
      }
    },
  );

  it("A's event watch carries no event of B's resources of any kind, while B's carries those of B's kinds", async () => {
    const seen = async (reader: string): Promise<Set<string>> => {
      const events = tc.client(EventService, { token: keys[reader] });
      const ids = new Set<string>();
      const abort = new AbortController();
      // Every event was recorded before the watch: its backlog (since the epoch) is all of them,
      // and the reader's own end marker the last it is shown: reading stops there.
      try {
        for await (const m of events.watchEvents({ since: timestampFromDate(new Date(0)) }, { signal: abort.signal })) {
          if (!m.event) continue;
          ids.add(m.event.resourceId);
          if (m.event.resourceId === `end-${reader}`) break;
        }
      } finally {
        abort.abort();
      }
      return ids;
    };
    const byA = await seen(A);
    const byB = await seen(B);
    // An event of no tenant (a fleet kind's) is shown to readers of every tenant only.
    for (const type of RESOURCE_TYPES) {
      const id = resourceOf(type, B).id;
      const fleet = isFleetKind(type);
      expect(byA.has(id), `A's watch: ${type} ${id}`).toBe(false);
      expect(byB.has(id), `B's watch: ${type} ${id}`).toBe(!fleet);
    }
    expect(byA.has(`end-${B}`)).toBe(false);
    expect(byA.has(resourceOf("tenant", A).id)).toBe(true);
  });
});

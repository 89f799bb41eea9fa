// EventService.WatchEvents over the real server (HTTP/2 + TLS): events since a time first, then
// each new one as it is recorded, once; filters like ListEvents; a caller scoped to a tenant sees
// that tenant's events only; a bad filter is refused before the stream starts.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { EventService, type WatchEventsResponse } from "../gen/skipper/v1/event_service_pb.js";
import { MAX_WATCHES_PER_CALLER } from "../controller/services/event-service.js";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";

let tc: TestController;
const api = () => tc.client(ResourceService, { admin: true });

function tenant(id: string): Resource {
  return create(ResourceSchema, { id, resourceType: "tenant", desiredState: { kind: { case: "tenant", value: { displayName: id } } } });
}

/** Reads a stream in the background; `next(pred)` waits for the first message not yet taken that matches. */
function reader(stream: AsyncIterable<WatchEventsResponse>) {
  const seen: WatchEventsResponse[] = [];
  let wake: (() => void) | undefined;
  let failed: unknown;
  void (async () => {
    try {
      for await (const m of stream) {
        seen.push(m);
        wake?.();
      }
    } catch (e) {
      failed = e;
      wake?.();
    }
  })();
  return {
    seen,
    async next(pred: (m: WatchEventsResponse) => boolean): Promise<WatchEventsResponse> {
      for (;;) {
        const i = seen.findIndex(pred);
        if (i >= 0) return seen.splice(i, 1)[0]!;
        if (failed) throw failed;
        await new Promise<void>((r) => {
          wake = r;
        });
      }
    },
  };
}

beforeAll(async () => {
  tc = await startController({ tls: true });
});
afterAll(async () => {
  await tc?.stop();
});

describe("watching events", () => {
  it("sends the events since a time, then each new one as it is recorded, each once", async () => {
    const before = new Date();
    await api().createResource({ resourceType: "tenant", resource: tenant("w-early") });
    const ac = new AbortController();
    const r = reader(
      tc
        .client(EventService, { admin: true })
        .watchEvents({ since: timestampFromDate(before), type: "resource_created" }, { signal: ac.signal }),
    );
    const early = await r.next((m) => m.event?.resourceId === "w-early");
    expect(early.event?.type).toBe("resource_created");
    await api().createResource({ resourceType: "tenant", resource: tenant("w-late") });
    const late = await r.next((m) => m.event?.resourceId === "w-late");
    expect(late.event?.tenantId).toBe("w-late");
    // Another round of reads (the stream keeps polling) sends neither again.
    await api().createResource({ resourceType: "tenant", resource: tenant("w-later") });
    await r.next((m) => m.event?.resourceId === "w-later");
    expect(r.seen.filter((m) => m.event?.resourceId === "w-early" || m.event?.resourceId === "w-late")).toEqual([]);
    // Only the type asked for.
    expect(r.seen.every((m) => !m.event || m.event.type === "resource_created")).toBe(true);
    ac.abort();
  });

  it("a caller scoped to one tenant sees that tenant's events only", async () => {
    const key = (
      await tc.client(AccessService, { admin: true }).createApiKey({ name: "watch-a", role: Role.VIEWER, scope: { tenantIds: ["w-a"] } })
    ).secret;
    const ac = new AbortController();
    const r = reader(tc.client(EventService, { token: key }).watchEvents({ type: "resource_created" }, { signal: ac.signal }));
    await r.next((m) => m.serverTime !== undefined && m.event === undefined);
    await api().createResource({ resourceType: "tenant", resource: tenant("w-b") });
    await api().createResource({ resourceType: "tenant", resource: tenant("w-a") });
    await r.next((m) => m.event?.resourceId === "w-a");
    expect(r.seen.some((m) => m.event?.tenantId === "w-b")).toBe(false);
    ac.abort();
    // Asking for another tenant's is refused outright.
    const refused = await rpcError(
      (async () => {
        for await (const _ of tc.client(EventService, { token: key }).watchEvents({ tenantId: "w-b" })) break;
      })(),
    );
    expect(refused.code).toBe("FORBIDDEN");
  });

  it("a bad filter is INVALID_REQUEST before anything is sent", async () => {
    const e = await rpcError(
      (async () => {
        for await (const _ of tc.client(EventService, { admin: true }).watchEvents({ type: "Not A Type" })) break;
      })(),
    );
    expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", "type"]);
  });

  it("one credential may hold so many watches open at once; closing one makes room", async () => {
    const key = (await tc.client(AccessService, { admin: true }).createApiKey({ name: "watch-many", role: Role.VIEWER })).secret;
    const events = tc.client(EventService, { token: key });
    const held: AbortController[] = [];
    for (let i = 0; i < MAX_WATCHES_PER_CALLER; i++) {
      const ac = new AbortController();
      held.push(ac);
      const r = reader(events.watchEvents({}, { signal: ac.signal }));
      await r.next((m) => m.serverTime !== undefined);
    }
    const over = await rpcError(
      (async () => {
        for await (const _ of events.watchEvents({})) break;
      })(),
    );
    expect([over.code, over.details.limit]).toEqual(["RESOURCE_EXHAUSTED", MAX_WATCHES_PER_CALLER]);
    // Another credential is not held back by this one's.
    const admin = reader(tc.client(EventService, { admin: true }).watchEvents({}));
    await admin.next((m) => m.serverTime !== undefined);
    held.pop()!.abort();
    // The slot comes back once the server has seen the stream end.
    const again = await (async () => {
      for (;;) {
        const ac = new AbortController();
        try {
          for await (const m of events.watchEvents({}, { signal: ac.signal })) {
            ac.abort();
            return m;
          }
        } catch (e) {
          if ((await rpcError(Promise.reject(e))).code !== "RESOURCE_EXHAUSTED") throw e;
          if (ac.signal.aborted) return undefined;
        }
      }
    })();
    expect(again?.serverTime).toBeDefined();
    for (const ac of held) ac.abort();
  });
});

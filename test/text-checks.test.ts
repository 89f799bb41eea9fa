// A NUL character (which PostgreSQL cannot store in text or jsonb) is handled alike on both
// stores: a person's request holding one is INVALID_REQUEST naming the field and changes nothing
// (it was a 500 on PostgreSQL, stored as it was on the file store); what an agent reports has it
// replaced by U+FFFD and is stored.
import { create } from "@bufbuild/protobuf";
import { afterAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { HeartbeatRequestSchema } from "../gen/skipper/v1/node_service_pb.js";
import { nulPath, replaceNul } from "../controller/boundary/text-checks.js";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";

describe("NUL in messages", () => {
  it("names the first field holding one, oneof cases and map keys included; replaces them all", () => {
    const r = create(ResourceSchema, {
      id: "t",
      desiredState: { kind: { case: "tenant", value: { displayName: "a\u0000b", compose: { env: { "K\u0000": "v" } } } } },
    });
    expect(nulPath(r)).toBe("desired_state.tenant.display_name");
    const beat = create(HeartbeatRequestSchema, { nodeId: "n", labels: { k: "x\u0000y" } });
    expect(nulPath(beat)).toBe("labels.k");
    expect(replaceNul(beat)).toBe(1);
    expect(beat.labels.k).toBe("x\uFFFDy");
    expect(nulPath(create(ResourceSchema, { id: "clean" }))).toBeUndefined();
  });
});

const stores: [string, () => Promise<PostgresStore | undefined>][] = [
  ["file store", async () => undefined],
  ["PostgreSQL", async () => new PostgresStore(await freshDatabase(`nul_${process.pid}`))],
];

describe.each(stores)("NUL over the API on the %s", (name, makeStore) => {
  const opened: TestController[] = [];
  afterAll(async () => {
    for (const tc of opened) await tc.stop();
  });

  it.skipIf(name === "PostgreSQL" && !pgUrl())(
    "refuses it in a person's request naming the field; stores an agent's report with U+FFFD",
    async () => {
      const tc = await startController({ store: await makeStore() });
      opened.push(tc);
      const api = tc.client(ResourceService, { admin: true });
      const e = await rpcError(
        api.createResource({
          resourceType: "tenant",
          resource: {
            id: "nul-tenant",
            resourceType: "tenant",
            desiredState: { kind: { case: "tenant", value: { displayName: "a\u0000b" } } },
          },
        }),
      );
      expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", "resource.desired_state.tenant.display_name"]);
      expect((await api.getResource({ resourceType: "tenant", id: "nul-tenant" }).catch(() => undefined))?.resource).toBeUndefined();
      const { token } = await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "nul-node" });
      await tc
        .client(NodeService, { headers: { authorization: `Bearer ${token}` } })
        .heartbeat({ nodeId: "nul-node", capabilities: { message: "no com\u0000pose" } });
      const node = (await api.getResource({ resourceType: "node", id: "nul-node" })).resource;
      expect(node?.currentState?.kind.case === "node" && node.currentState.kind.value.capabilities?.message).toBe("no com\uFFFDpose");
    },
  );
});

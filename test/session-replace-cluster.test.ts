// A node's session moving to another controller (issue 38): two controllers on one PostgreSQL
// database; the node's session on one is replaced as soon as its agent opens one on the other
// (the cluster's "session" message), and the order pushed to the old one and not acknowledged
// is released at once and pushed on the new one under the next fencing token.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService, SessionNoticeKind } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import { PgCoordination } from "../controller/store/postgres/pg-coordination.js";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { openSession, type TestSession } from "./helpers/session-client.js";

const url = pgUrl();
if (!url) console.warn("!!! session-replace-cluster.test.ts SKIPPED: it needs PostgreSQL (see test/global-setup.ts)");

describe.skipIf(!url)("a node's session moving between controllers sharing PostgreSQL", () => {
  let a: TestController;
  let b: TestController;
  beforeAll(async () => {
    const db = await freshDatabase("session_replace_cluster");
    const on = (controllerId: string) => ({
      store: new PostgresStore(db, { maxConnections: 8 }),
      coordination: new PgCoordination(db, { controllerId, lockSessions: 1 }),
    });
    a = await startController(on("ctl-a"));
    b = await startController({ ...on("ctl-b"), adminToken: ADMIN_TOKEN });
  });
  afterAll(async () => {
    await b?.stop();
    await a?.stop();
  });

  const hello = async (s: TestSession, nodeId: string) => {
    s.send({ case: "hello", value: { nodeId, agentVersion: "test", journalWorkOrderIds: [] } });
    await s.next("the welcome", (m) => (m.kind.case === "welcome" ? true : undefined));
    return s;
  };

  it("replaces the older session on the other controller at once and pushes its unacknowledged order again", async () => {
    const token = (await a.client(NodeService, { admin: true }).registerNode({ nodeId: "moving" })).token;
    const { workOrder } = await a.client(WorkOrderService, { admin: true }).createWorkOrder({
      type: WorkOrderType.INSPECT,
      target: { nodeId: "moving" },
      action: { kind: { case: "inspect", value: {} } },
    });
    const pushedOn = (s: TestSession) =>
      s.next("the order pushed", (m) =>
        m.kind.case === "order" && m.kind.value.workOrder?.id === workOrder!.id ? m.kind.value.workOrder : undefined,
      );
    const old = await hello(openSession(a.client(NodeService, { token })), "moving");
    const first = await pushedOn(old);
    expect(first.claim?.fencingToken).toBe(1n);
    // The agent reconnects through the other controller; the old session is a leftover.
    const moved = await hello(openSession(b.client(NodeService, { token })), "moving");
    const notice = await old.next("the REPLACED notice", (m) => (m.kind.case === "notice" ? m.kind.value : undefined));
    expect(notice.kind).toBe(SessionNoticeKind.REPLACED);
    expect(notice.message).toContain("on controller");
    await old.ended();
    const again = await pushedOn(moved);
    expect(again.claim?.fencingToken).toBe(2n);
    expect(again.attempts.map((x) => x.outcome)).toContain("released");
    moved.close();
  });
});

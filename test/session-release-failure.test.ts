// A session whose end cannot release what it held (the store gone while an order pushed on it
// waits for its ack) must not take the controller down: the failure is logged with the call's
// ids and cause, and the controller goes on answering. (On the controller's own Session route, a
// release that failed once escaped as an unhandled rejection, which ends a Node 20 process.)
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { NodeService, type SessionResponse } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { openSession } from "./helpers/session-client.js";
import { waitFor } from "./helpers/processes.js";

let tc: TestController;
beforeAll(async () => {
  tc = await startController({ logToFile: true });
});
afterAll(async () => {
  await tc?.stop();
});

async function logLines(): Promise<Record<string, unknown>[]> {
  const day = new Date().toISOString().slice(0, 10);
  const all = await readFile(join(tc.dataDir, "logs", day, "skipper-controller.ndjson"), "utf8").catch(() => "");
  return all
    .slice(0, all.lastIndexOf("\n") + 1)
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("a session whose release fails", () => {
  it("is logged with its cause and the controller keeps serving", async () => {
    const { token } = await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "s-lost" });
    const s = openSession(tc.client(NodeService, { token }));
    s.send({ case: "hello", value: { nodeId: "s-lost", agentVersion: "test" } });
    await s.next("the welcome", (m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
    const { workOrder } = await tc.client(WorkOrderService, { admin: true }).createWorkOrder({
      type: WorkOrderType.INSPECT,
      target: { nodeId: "s-lost" },
      action: { kind: { case: "inspect", value: {} } },
    });
    const pushed = (m: SessionResponse) => (m.kind.case === "order" && m.kind.value.workOrder?.id === workOrder!.id ? true : undefined);
    await s.next("the order pushed", pushed);

    // The store goes away under the session, then the agent does: releasing the unacknowledged
    // push fails.
    await tc.controller.store.close();
    s.abort();
    const line = await waitFor(
      "the session's failure in the log",
      async () => (await logLines()).find((l) => l.action === "NodeService.Session" && l.result === "INTERNAL_ERROR"),
      20_000,
      50,
    );
    expect(JSON.stringify(line)).toContain("not open");
    expect(line.request_id).toMatch(/^[0-9a-f-]{36}$/);
    // Still serving (an open call needs no store).
    expect((await tc.client(HealthService).check({})).status).toBeDefined();
  });
});

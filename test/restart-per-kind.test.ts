// An agent restarted mid-order, for every order kind of the contract: a real journal on disk holds
// an order claimed (lease still held) and not finished; the agent's recovery runs it again only
// when its kind may run again, and otherwise reports AGENT_RESTARTED without running it. The
// kinds come from the contract, so a new kind is in this test by being in it. The controller
// side is a fake (it grants the renewal); crash-points-agent.test.ts drives the real processes.
import { create } from "@bufbuild/protobuf";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { AgentTally } from "../agent/agent-tally.js";
import type { ControllerClients } from "../agent/controller-client.js";
import { Journal } from "../agent/journal.js";
import { monotonicClock } from "../agent/lease-keeper.js";
import { JournalRecovery } from "../agent/journal-recovery.js";
import type { OrderRunner } from "../agent/order-runner.js";
import { OrderSpans } from "../agent/order-spans.js";
import type { ResultReporter } from "../agent/result-reporter.js";
import { ORDER_KINDS, ORDER_TYPES } from "../common/order-kinds.js";
import { WorkOrderSchema, WorkOrderType, type WorkOrder, type WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";

let stateDir: string;
beforeEach(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "skippy-restart-"));
});
afterEach(async () => rm(stateDir, { recursive: true, force: true }));

describe("an agent restarted mid-order", () => {
  it("a command is never run twice: whether it finished is unknown, and it need not be idempotent", () => {
    expect(ORDER_KINDS[WorkOrderType.EXECUTE_COMMAND].afterRestart).toBe("do not run again");
  });

  it.each(ORDER_TYPES.map((t) => [WorkOrderType[t], t] as const))("%s: runs again only when its kind may", async (_name, type) => {
    const journal = new Journal(stateDir);
    await journal.open();
    const order = create(WorkOrderSchema, {
      id: `o-${type}`,
      type,
      target: { nodeId: "n1", tenantId: "t1" },
      claim: { nodeId: "n1", fencingToken: 7n },
    });
    await journal.record({ order, claimedAt: new Date() });

    const ran: string[] = [];
    const reported: WorkOrderResult[] = [];
    const runner = {
      logOf: () => pino({ level: "silent" }),
      execute: async (o: WorkOrder) => {
        ran.push(o.id);
      },
      handle: async (o: WorkOrder) => {
        ran.push(o.id);
      },
      ended: () => undefined,
    } as unknown as OrderRunner;
    const reporter = {
      report: async (_o: WorkOrder, result: WorkOrderResult) => {
        reported.push(result);
      },
    } as unknown as ResultReporter;
    const clients = {
      orders: { renewWorkOrderLease: async () => ({ leaseExpiresAt: undefined }) },
    } as unknown as ControllerClients;
    const recovery = new JournalRecovery({
      nodeId: "n1",
      clients,
      journal,
      runner,
      reporter,
      tally: new AgentTally(),
      spans: new OrderSpans(),
      clock: monotonicClock,
      log: pino({ level: "silent" }),
    });
    await recovery.run(new AbortController().signal);

    if (ORDER_KINDS[type].afterRestart === "run again") {
      expect(ran).toEqual([order.id]);
      expect(reported).toEqual([]);
    } else {
      expect(ran).toEqual([]);
      expect(reported.map((r) => [r.success, r.code])).toEqual([[false, "AGENT_RESTARTED"]]);
    }
  });
});

// The agent as a lease holder, against a fake controller and a fake clock: an order whose lease
// is lost (a renewal refused, or none granted before the lease would end) is stopped through the
// executor's abort path, journaled at once, reported LEASE_LOST (never a success) and not run
// again after a restart; an order whose renewals are granted keeps running. Time moves only when
// a test moves the fake clock; everything else is waited for as it is observed.
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import {
  WorkOrderResultSchema,
  WorkOrderSchema,
  WorkOrderStatus,
  WorkOrderType,
  type WorkOrder,
  type WorkOrderResult,
} from "../gen/skipper/v1/work_order_pb.js";
import { Agent } from "../agent/agent.js";
import type { AgentConfig } from "../agent/config.js";
import type { ControllerClients } from "../agent/controller-client.js";
import { rollBack } from "../agent/executors/deploy-safety.js";
import { executorOf, LeaseLost, type ExecContext } from "../agent/executors/executor.js";
import { Journal } from "../agent/journal.js";
import type { Clock } from "../agent/lease-keeper.js";

const LEASE_MS = 2000;
// A quarter of the lease: the agent gives the lease up this long before it would end.
const DEADLINE_MS = 1500;

/** A clock that moves only when told; due timers fire in order, each followed by what it set off. */
class FakeClock implements Clock {
  private t = 0;
  private timers: { at: number; fn: () => void }[] = [];

  now(): number {
    return this.t;
  }

  after(ms: number, fn: () => void): () => void {
    const timer = { at: this.t + ms, fn };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((x) => x !== timer);
    };
  }

  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    for (;;) {
      const next = this.timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at)[0];
      if (!next) break;
      this.timers = this.timers.filter((x) => x !== next);
      this.t = next.at;
      next.fn();
      await settled();
    }
    this.t = end;
  }
}

/** Lets promises and I/O callbacks already under way run. */
const settled = () => new Promise<void>((r) => setImmediate(r));

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const ORDER = create(WorkOrderSchema, {
  id: "o-lease",
  type: WorkOrderType.EXECUTE_COMMAND,
  target: { nodeId: "n1" },
  action: { kind: { case: "executeCommand", value: { command: { argv: ["sleep", "600"] } } } },
});
const CLAIMED = (() => {
  const o = create(WorkOrderSchema, ORDER);
  o.status = WorkOrderStatus.RUNNING;
  o.claim = {
    $typeName: "skipper.v1.WorkOrderClaim",
    nodeId: "n1",
    claimedAt: timestampFromMs(0),
    leaseExpiresAt: timestampFromMs(LEASE_MS),
    fencingToken: 1n,
  };
  return o;
})();

const refused = () => new ConnectError("work order o-lease: fencing token 1 is not the current claim's (2)", Code.FailedPrecondition);
const unreachable = () => new ConnectError("connect ECONNREFUSED", Code.Unavailable);

/** The controller as the agent sees it; each answer can be replaced by a test. */
class FakeController {
  renewals = 0;
  reports: { result: WorkOrderResult; fencingToken: bigint }[] = [];
  reported = deferred();
  handOut = true;
  renew: () => Promise<{ workOrder?: WorkOrder }> = async () => ({ workOrder: CLAIMED });
  report: () => Promise<object> = async () => ({});

  clients(): ControllerClients {
    const nodes = {
      heartbeat: async () => ({ pendingWorkOrders: 0 }),
      getNextWorkOrder: async () => {
        if (!this.handOut) return {};
        this.handOut = false;
        return { workOrder: ORDER };
      },
      reportResourceState: async () => ({}),
    };
    const orders = {
      claimWorkOrder: async () => ({ workOrder: CLAIMED }),
      getWorkOrder: async () => ({ workOrder: CLAIMED }),
      renewWorkOrderLease: () => {
        this.renewals++;
        return this.renew();
      },
      reportWorkOrderResult: (req: { result: WorkOrderResult; fencingToken: bigint }) => {
        this.reports.push({ result: req.result, fencingToken: req.fencingToken });
        return this.report().finally(() => this.reported.resolve());
      },
    };
    return { nodes, orders } as unknown as ControllerClients;
  }
}

/** An execute_command executor that runs until the test ends it or its signal aborts. */
class FakeCommand {
  runs = 0;
  started = deferred();
  seen: ExecContext | undefined;
  private finish = deferred<boolean>();

  constructor(private readonly honoursAbort = true) {}

  executor() {
    return executorOf("executeCommand", async (_action, _order, ctx) => {
      this.runs++;
      this.seen = ctx;
      this.started.resolve();
      if (this.honoursAbort) ctx.signal.addEventListener("abort", () => this.finish.resolve(false));
      const ok = await this.finish.promise;
      return {
        result: create(
          WorkOrderResultSchema,
          ok ? { success: true, code: "COMMAND_OK" } : { success: false, code: "CANCELLED", message: "stopped" },
        ),
        services: [],
        composePath: "",
      };
    });
  }

  /** The command ends of itself, successfully. */
  end(): void {
    this.finish.resolve(true);
  }
}

describe("the agent as a lease holder", () => {
  let dir: string;
  let logs: { action?: string; result?: string; level: number; msg: string }[];
  let stops: AbortController[];
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skippy-lease-"));
    logs = [];
    stops = [];
  });
  afterEach(async () => {
    for (const s of stops) s.abort();
    await rm(dir, { recursive: true, force: true });
  });

  function startAgent(ctl: FakeController, cmd: FakeCommand, clock: FakeClock): { done: Promise<void>; stop: () => void } {
    const config = {
      nodeId: "n1",
      pollIntervalMs: 60_000,
      watch: false,
      labels: {},
      allowCommands: ["sleep"],
      allowProcessSources: [],
      workDir: join(dir, "work"),
      stateDir: dir,
      composeTimeoutMs: 10_000,
      readyTimeoutMs: 1000,
    } as unknown as AgentConfig;
    const log = pino({ level: "debug" }, { write: (line: string) => logs.push(JSON.parse(line)) });
    const agent = new Agent({
      config,
      clients: ctl.clients(),
      journal: new Journal(dir),
      log,
      probe: async () => ({ capabilities: create(NodeCapabilitiesSchema, { dockerAvailable: false }) }),
      executors: { [WorkOrderType.EXECUTE_COMMAND]: cmd.executor() },
      observe: async () => [],
      clock,
    });
    const stop = new AbortController();
    stops.push(stop);
    return { done: agent.run(stop.signal), stop: () => stop.abort() };
  }

  const leaseLostLines = () => logs.filter((l) => l.action === "lease_lost");
  // Read as files: Journal.pending() is for a start, and removes the temp file of a write under way.
  const journaled = async () => (await readdir(join(dir, "orders"))).filter((f) => f.endsWith(".json"));
  const journaledResult = async (id: string) =>
    (JSON.parse(await readFile(join(dir, "orders", `${id}.json`), "utf8")) as { result?: { code?: string } }).result?.code;

  it("a refused renewal stops the order, which is reported LEASE_LOST with its token, and the loss is logged once", async () => {
    const ctl = new FakeController();
    ctl.renew = () => Promise.reject(refused());
    ctl.report = () => Promise.reject(refused());
    const cmd = new FakeCommand();
    const clock = new FakeClock();
    const agent = startAgent(ctl, cmd, clock);
    await cmd.started.promise;
    await clock.advance(LEASE_MS / 3);
    await ctl.reported.promise;
    expect(cmd.seen?.signal.aborted).toBe(true);
    expect(cmd.seen?.lease?.aborted).toBe(true);
    expect(ctl.renewals).toBe(1);
    expect(ctl.reports).toHaveLength(1);
    expect(ctl.reports[0]).toMatchObject({ fencingToken: 1n, result: { success: false, code: "LEASE_LOST", retriable: true } });
    expect(ctl.reports[0]!.result.message).toMatch(/renewal refused: FailedPrecondition/);
    // Later renewal periods pass without another call or another line.
    await clock.advance(5 * LEASE_MS);
    expect(ctl.renewals).toBe(1);
    expect(leaseLostLines()).toHaveLength(1);
    expect(leaseLostLines()[0]).toMatchObject({ result: "refused" });
    // The refused result is dropped from the journal: nothing is left to report or run.
    await vi.waitFor(async () => expect(await journaled()).toEqual([]));
    agent.stop();
    await agent.done;
  });

  it("a controller it cannot reach stops the order when the lease, less its margin, has passed since the last grant", async () => {
    const ctl = new FakeController();
    const cmd = new FakeCommand();
    const clock = new FakeClock();
    const agent = startAgent(ctl, cmd, clock);
    await cmd.started.promise;
    // One renewal granted at a third of the lease; then the controller is cut off: calls hang.
    await clock.advance(LEASE_MS / 3);
    expect(ctl.renewals).toBe(1);
    const grantedAt = clock.now();
    ctl.renew = () => new Promise(() => undefined);
    await clock.advance(DEADLINE_MS - 1);
    expect(cmd.seen?.signal.aborted).toBe(false);
    await clock.advance(1);
    expect(clock.now() - grantedAt).toBe(DEADLINE_MS);
    expect(cmd.seen?.signal.aborted).toBe(true);
    expect(String(cmd.seen?.signal.reason)).toMatch(/lost the order's lease/);
    await ctl.reported.promise;
    expect(ctl.reports[0]?.result).toMatchObject({ success: false, code: "LEASE_LOST" });
    expect(ctl.reports[0]!.result.message).toMatch(/no renewal granted within 1500 ms/);
    expect(leaseLostLines()).toHaveLength(1);
    expect(leaseLostLines()[0]).toMatchObject({ result: "deadline" });
    agent.stop();
    await agent.done;
  });

  it("transient renewal failures are retried, and a renewal granted in time keeps the order running", async () => {
    const ctl = new FakeController();
    const cmd = new FakeCommand();
    const clock = new FakeClock();
    const agent = startAgent(ctl, cmd, clock);
    await cmd.started.promise;
    // Every other renewal fails as an unreachable controller does; the rest are granted.
    let n = 0;
    ctl.renew = () => (n++ % 2 === 0 ? Promise.reject(unreachable()) : Promise.resolve({ workOrder: CLAIMED }));
    for (let i = 0; i < 50; i++) await clock.advance(LEASE_MS / 5);
    expect(ctl.renewals).toBeGreaterThan(20);
    expect(cmd.seen?.signal.aborted).toBe(false);
    expect(leaseLostLines()).toEqual([]);
    cmd.end();
    await ctl.reported.promise;
    expect(ctl.reports).toEqual([{ fencingToken: 1n, result: expect.objectContaining({ success: true, code: "COMMAND_OK" }) }]);
    agent.stop();
    await agent.done;
  });

  it("an order whose lease was lost is journaled at once and not run again after a restart, even when the controller would still let it", async () => {
    const ctl = new FakeController();
    ctl.renew = () => new Promise(() => undefined);
    // A command that does not stop when asked: the agent is killed while it waits for it.
    const stuck = new FakeCommand(false);
    const clock = new FakeClock();
    const first = startAgent(ctl, stuck, clock);
    await stuck.started.promise;
    await clock.advance(DEADLINE_MS);
    expect(stuck.seen?.signal.aborted).toBe(true);
    await vi.waitFor(async () => expect(await journaledResult("o-lease")).toBe("LEASE_LOST"));
    expect(await journaled()).toEqual(["o-lease.json"]);

    // The restart: the controller still has the order under this claim and grants renewals.
    const again = new FakeController();
    again.handOut = false;
    const cmd = new FakeCommand();
    const restarted = startAgent(again, cmd, new FakeClock());
    await again.reported.promise;
    expect(cmd.runs).toBe(0);
    expect(again.reports[0]).toMatchObject({ fencingToken: 1n, result: { success: false, code: "LEASE_LOST" } });
    restarted.stop();
    await restarted.done;
    first.stop();
    stuck.end();
    await first.done;
  });
});

describe("a deploy whose lease is lost", () => {
  it("is not rolled back: the next holder deploys the same spec again", async () => {
    const lost = new AbortController();
    lost.abort(new LeaseLost("renewal refused"));
    let redeploys = 0;
    const order = create(WorkOrderSchema, { id: "o-deploy", desiredState: { tenantId: "t1", specHash: "new" } });
    const ctx = {
      workDir: "/nonexistent",
      docker: { capabilities: create(NodeCapabilitiesSchema, {}) },
      composeTimeoutMs: 1000,
      readyTimeoutMs: 1000,
      log: pino({ level: "silent" }),
      signal: lost.signal,
      lease: lost.signal,
    };
    const out = await rollBack(order, ctx, {
      failure: "cancelled",
      code: "CANCELLED",
      parts: { composePath: "", services: [] },
      started: performance.now(),
      redeploy: async () => {
        redeploys++;
        throw new Error("no restore expected");
      },
    });
    expect(redeploys).toBe(0);
    expect(out.result).toMatchObject({ success: false, code: "CANCELLED" });
    expect(out.result.message).toMatch(/not rolled back: the lease was lost/);
  });
});

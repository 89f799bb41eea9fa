// A simulated fleet for the benchmarks: nodes whose agents heartbeat the projects they "run", as
// skippy does, and take orders one of two ways (FleetOptions.transport):
//
//   watch    a WatchWorkOrders stream per node and unary calls: what a stream announces goes to
//            one queue that a bounded pool of workers drains: claim, wait --apply-ms (the apply),
//            report success, each call repeated after a transient error as skippy repeats it;
//            heartbeats are unary calls every heartbeatMs
//   session  a Session per node (sim-session.ts), as skippy's default: the controller claims an
//            order as it pushes it; the pushed order goes to the same queue and a worker acks it,
//            waits --apply-ms, sends the result and waits for the answers, then the node sends its
//            full report (as skippy does after an order); keepalives at the welcome's interval
//
// So the fleet's agents are as many streams as nodes, but never more than `workers` claims (acks)
// or reports at once.
import { setMaxListeners } from "node:events";
import { type Client, ConnectError, createClient } from "@connectrpc/connect";
import { MAX_HEARTBEAT_INTERVAL_MS } from "../common/heartbeat-interval.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import type { WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { TRANSIENT } from "../agent/lease-keeper.js";
import { SessionAnswerSubject } from "../gen/skipper/v1/node_service_pb.js";
import { transportTo } from "./controller-process.js";
import { SimSessionLink } from "./sim-session.js";

// The simulated agents try again after the errors skippy tries again after (TRANSIENT): the
// controller did not refuse the call, it did not answer it (a stream it cancelled after 60 s
// without progress answers Canceled).
/** A loopback address of its own for the i-th simulated host (127.1.0.1, 127.1.0.2, ...). */
export function hostAddress(i: number): string {
  return `127.1.${Math.floor(i / 250)}.${(i % 250) + 1}`;
}

/** A work order an agent finished: the node, the order, and when its report was answered. */
export interface Finished {
  nodeId: string;
  order: WorkOrder;
  at: number;
}

/**
 * One simulated host as the controller sees it: its node's clients and the projects it "runs",
 * reported in its heartbeats as skippy's are (else the reconciler would see every deployed
 * project missing and redeploy it). bench:dispatch's agents build on it too.
 */
export class SimNode {
  readonly nodes: Client<typeof NodeService>;
  readonly orders: Client<typeof WorkOrderService>;
  readonly running = new Map<string, { projectName: string; specHash: string; workOrderId: string }>();
  constructor(
    readonly nodeId: string,
    url: string,
    ca: string,
    token: string,
    address: string,
  ) {
    // One connection for the stream, heartbeats, claims and reports, as skippy has, from a
    // loopback address of its own (the controller caps connections per client address, as it
    // would see a real fleet's hosts). As skippy talks by default: Connect JSON.
    const transport = transportTo(url, ca, { authorization: `Bearer ${token}` }, { localAddress: address, json: true });
    this.nodes = createClient(NodeService, transport);
    this.orders = createClient(WorkOrderService, transport);
  }

  /** One heartbeat with the projects it runs; the interval is capped at the controller's maximum. */
  heartbeat(intervalMs: number): Promise<unknown> {
    return this.nodes.heartbeat(this.report(intervalMs));
  }

  /** The full heartbeat report: the projects it runs. */
  report(intervalMs: number) {
    const projects = [...this.running].map(([tenantId, p]) => ({ tenantId, ...p, services: [] }));
    return {
      nodeId: this.nodeId,
      agentVersion: "bench",
      heartbeatIntervalMs: BigInt(Math.min(intervalMs, MAX_HEARTBEAT_INTERVAL_MS)),
      projectsReported: true,
      projects,
    };
  }
}

/** One simulated agent of the fleet: a SimNode whose stream's orders go to the fleet's workers. */
class SimAgent extends SimNode {
  // Orders queued or being played: a stream may announce one twice (subscribe, then read). An
  // order announced again after that (its lease lapsed) is played again.
  readonly active = new Set<string>();
  /** Its session, in session mode. */
  link: SimSessionLink | undefined;
}

export interface FleetOptions {
  url: string;
  ca: string;
  /** Claims and reports under way at once, across the fleet. */
  workers: number;
  /** How long each simulated apply takes (between the claim and the report). */
  applyMs: number;
  heartbeatMs: number;
  /** How orders reach the agents (default watch). */
  transport?: "watch" | "session";
  /** Told of every order an agent finished. */
  onFinished: (f: Finished) => void;
}

/** Nodes with their simulated agents, and the worker pool that plays their applies. */
export class SimFleet {
  private readonly agents: SimAgent[] = [];
  private readonly jobs: { agent: SimAgent; order: WorkOrder }[] = [];
  private wake: (() => void) | undefined;
  private readonly stop = new AbortController();
  private beats: NodeJS.Timeout[] = [];
  /** Orders announced and finished, calls refused or retried, streams that broke. */
  readonly counts = { announced: 0, finished: 0, claimRefused: 0, reportRefused: 0, retries: 0, streamsLost: 0 };
  /** How long each claim and each report took to be answered, retries included (ms). */
  readonly claimMs: number[] = [];
  readonly reportMs: number[] = [];

  constructor(private readonly opts: FleetOptions) {
    // Every stream listens to the one signal that closes them all.
    setMaxListeners(0, this.stop.signal);
  }

  get size(): number {
    return this.agents.length;
  }

  /** Adds an agent for a registered node (its token from RegisterNode). */
  add(nodeId: string, token: string): void {
    this.agents.push(new SimAgent(nodeId, this.opts.url, this.opts.ca, token, hostAddress(this.agents.length)));
  }

  /**
   * Watch: opens every agent's stream (100 at a time), sends a first heartbeat each, then keeps
   * heartbeating, staggered. Session: opens every agent's session (hello, welcome, full report), 100 at a time.
   */
  async start(): Promise<void> {
    if (this.opts.transport === "session") {
      for (let i = 0; i < this.agents.length; i += 100) await Promise.all(this.agents.slice(i, i + 100).map((a) => this.openSession(a)));
      for (let w = 0; w < this.opts.workers; w++) void this.work();
      return;
    }
    // 100 at a time: the controller closes the oldest of more than 256 connections nobody has
    // vouched for yet (--max-unvouched-connections), and a thousand at once outrun that pool.
    for (let i = 0; i < this.agents.length; i += 100) await Promise.all(this.agents.slice(i, i + 100).map((a) => this.watch(a)));
    for (let i = 0; i < this.agents.length; i += 100) await Promise.all(this.agents.slice(i, i + 100).map((a) => this.beat(a)));
    const every = this.opts.heartbeatMs;
    const loop = (a: SimAgent, i: number) => {
      void this.beat(a);
      this.beats[i] = setTimeout(() => loop(a, i), every);
    };
    this.beats = this.agents.map((a, i) => setTimeout(() => loop(a, i), (i * every) / this.agents.length));
    for (let w = 0; w < this.opts.workers; w++) void this.work();
  }

  /** Closes the streams and stops heartbeats and workers. */
  close(): void {
    for (const a of this.agents) a.link?.close();
    for (const b of this.beats) clearTimeout(b);
    this.stop.abort();
    this.wake?.();
  }

  private beat(a: SimAgent): Promise<unknown> {
    return a.heartbeat(this.opts.heartbeatMs).catch(() => undefined);
  }

  // Opens the agent's session; what it pushes joins the queue as a stream's announcement does.
  private openSession(a: SimAgent): Promise<void> {
    const link = new SimSessionLink(
      a,
      () => a.report(this.opts.heartbeatMs),
      (order) => this.announced(a, order),
      () => this.counts.streamsLost++,
    );
    a.link = link;
    return link.open();
  }

  private announced(a: SimAgent, order: WorkOrder): void {
    if (a.active.has(order.id)) return;
    a.active.add(order.id);
    this.counts.announced++;
    this.jobs.push({ agent: a, order });
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  // Opens the agent's stream; resolves once it answered, rejects when it fails before that.
  private watch(a: SimAgent): Promise<void> {
    return new Promise((opened, failed) => {
      let first = true;
      void (async () => {
        for await (const n of a.nodes.watchWorkOrders({ nodeId: a.nodeId }, { signal: this.stop.signal })) {
          if (first) {
            first = false;
            opened();
          }
          if (n.workOrder) this.announced(a, n.workOrder);
        }
      })().catch((e: unknown) => {
        if (first) failed(new Error(`the stream of ${a.nodeId} failed before it opened: ${String(e)}`));
        else if (!this.stop.signal.aborted) this.counts.streamsLost++;
      });
    });
  }

  // One worker: takes the oldest announced order, claims it, "applies" it, reports success.
  private async work(): Promise<void> {
    while (!this.stop.signal.aborted) {
      const job = this.jobs.shift();
      if (!job) {
        await new Promise<void>((r) => {
          const prev = this.wake;
          this.wake = () => {
            prev?.();
            r();
          };
        });
        continue;
      }
      if (job.agent.link) await this.finishOnSession(job.agent, job.agent.link, job.order);
      else await this.finish(job.agent, job.order);
    }
  }

  // A pushed order (already claimed for the session): ack, "apply", result, then the full report.
  private async finishOnSession(a: SimAgent, link: SimSessionLink, order: WorkOrder): Promise<void> {
    try {
      const token = order.claim?.fencingToken ?? 0n;
      const t0 = performance.now();
      const acked = await link.request(
        { case: "ack", value: { workOrderId: order.id, fencingToken: token } },
        SessionAnswerSubject.ACK,
        order.id,
      );
      this.claimMs.push(performance.now() - t0);
      if (!acked.accepted) {
        this.counts.claimRefused++;
        return;
      }
      if (this.opts.applyMs > 0) await new Promise((r) => setTimeout(r, this.opts.applyMs));
      this.ran(a, order);
      const t1 = performance.now();
      const result = { success: true, code: "APPLY_OK", message: "bench", details: { durationMs: BigInt(this.opts.applyMs) } };
      const answered = await link.request(
        { case: "result", value: { workOrderId: order.id, fencingToken: token, result } },
        SessionAnswerSubject.RESULT,
        order.id,
      );
      this.reportMs.push(performance.now() - t1);
      if (!answered.accepted) {
        this.counts.reportRefused++;
        return;
      }
      link.sendReport();
      this.counts.finished++;
      this.opts.onFinished({ nodeId: a.nodeId, order, at: performance.now() });
    } catch {
      // The session ended under the order: the controller pushes it again (a new token) on the next one.
      this.counts.retries++;
    } finally {
      a.active.delete(order.id);
    }
  }

  // The project runs the new spec once applied: a heartbeat from now on says so.
  private ran(a: SimAgent, order: WorkOrder): void {
    const ds = order.desiredState;
    const tenantId = order.target?.tenantId ?? "";
    if (ds)
      a.running.set(tenantId, { projectName: ds.composeProject?.projectName ?? tenantId, specHash: ds.specHash, workOrderId: order.id });
  }

  private async finish(a: SimAgent, order: WorkOrder): Promise<void> {
    try {
      const claimed = await this.answered(this.claimMs, () => a.orders.claimWorkOrder({ id: order.id }));
      if (!claimed) {
        this.counts.claimRefused++;
        return;
      }
      if (this.opts.applyMs > 0) await new Promise((r) => setTimeout(r, this.opts.applyMs));
      this.ran(a, order);
      const reported = await this.answered(this.reportMs, () =>
        a.orders.reportWorkOrderResult({
          id: order.id,
          fencingToken: claimed.workOrder?.fencingToken,
          result: { success: true, code: "APPLY_OK", message: "bench", details: { durationMs: BigInt(this.opts.applyMs) } },
        }),
      );
      if (!reported) {
        this.counts.reportRefused++;
        return;
      }
      this.counts.finished++;
      this.opts.onFinished({ nodeId: a.nodeId, order, at: performance.now() });
    } finally {
      a.active.delete(order.id);
    }
  }

  // Calls until answered, as skippy does: again after a transient error (200 ms doubling to 5 s);
  // undefined when refused. Records the time to the answer in `samples`.
  private async answered<T>(samples: number[], call: () => Promise<T>): Promise<T | undefined> {
    const start = performance.now();
    for (let delay = 200; ; delay = Math.min(2 * delay, 5000)) {
      try {
        const out = await call();
        samples.push(performance.now() - start);
        return out;
      } catch (e) {
        if (this.stop.signal.aborted || !TRANSIENT.has(ConnectError.from(e).code)) return undefined;
        this.counts.retries++;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }
}

// The agent's loop. Each round: heartbeat (every poll interval), ask for the next order when
// there may be one, and if there is: journal it, claim it, mark it claimed, execute it (renewing
// the claim's lease), journal the result, report the result, report the observed state of what it
// touched, drop the journal entry; then ask again at once. There may be an order at start, after
// one, when the heartbeat's answer counts pending orders for this node (pull, the floor: it works
// without the stream), and when the WatchWorkOrders stream rings (push, order-watch.ts). An idle
// agent thus costs the controller one call per interval, not two. When the controller cannot be
// reached it retries with capped exponential backoff and jitter, and never exits on its own.
// An order whose lease is lost (a renewal refused, or none granted before the lease would end:
// lease-keeper.ts) is stopped as a cancel stops it, journaled with a LEASE_LOST result at once
// (so a restart does not run it again), and that result is reported: the controller refuses it
// when another claim has the order, which is the usual case.
// It counts what it does (agent-tally.ts: orders by type and result, refused claims, lost leases,
// report retries, watch reconnects, heartbeat failures) and sends the totals with every heartbeat;
// each order it handles is a span, and each call for it a client span under it (order-spans.ts).
import { clone } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { ProcessObservation, ProjectObservation } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { Backoff } from "../common/backoff.js";
import { sleep } from "./engine/sleep.js";
import { OrderWatch } from "./order-watch.js";
import type { AgentConfig } from "./config.js";
import type { ControllerClients } from "./controller-client.js";
import type { DockerHost } from "./engine/docker-host.js";
import type { ExecutorTable } from "./executors/executor-table.js";
import type { Journal, JournalEntry } from "./journal.js";
import { monotonicClock, TRANSIENT, type Clock } from "./lease-keeper.js";
import { AgentTally } from "./agent-tally.js";
import { OrderSpans } from "./order-spans.js";
import { failure, LEASE_LOST } from "./agent-results.js";
import { ResultReporter } from "./result-reporter.js";
import { Heartbeats } from "./heartbeats.js";
import { HostProbe } from "./host-probe.js";
import { OrderRunner } from "./order-runner.js";

// Whether a run interrupted by a restart may run again, for every order type (the compiler
// refuses a type without an entry): a command need not be idempotent, and whether it ran is
// unknown; the others converge when run again.
const AFTER_RESTART: Record<WorkOrderType, "run again" | "do not run again"> = {
  [WorkOrderType.UNSPECIFIED]: "do not run again",
  [WorkOrderType.DEPLOY_SERVICE]: "run again",
  [WorkOrderType.REMOVE_SERVICE]: "run again",
  [WorkOrderType.RESTART_SERVICE]: "run again",
  [WorkOrderType.ROLLBACK]: "run again",
  [WorkOrderType.HEALTH_CHECK]: "run again",
  [WorkOrderType.INSPECT]: "run again",
  [WorkOrderType.EXECUTE_COMMAND]: "do not run again",
  [WorkOrderType.UPLOAD_FILES]: "run again",
  [WorkOrderType.WRITE_STICKER]: "run again",
  [WorkOrderType.READ_STICKER]: "run again",
  [WorkOrderType.DEPLOY_PROCESS]: "run again",
  [WorkOrderType.CONTROL_PROCESS]: "run again",
  [WorkOrderType.READ_LOGS]: "run again",
};
// A type this agent does not know (a newer controller's) is not run again either.
const mayRunAgain = (type: WorkOrderType) => AFTER_RESTART[type] === "run again";
const INTERRUPTED =
  "the agent restarted while this order ran or before its result was saved: it is not run again, and whether it finished is unknown";

export interface AgentDeps {
  config: AgentConfig;
  clients: ControllerClients;
  journal: Journal;
  log: Logger;
  /** Finds out what the host can run (engine, compose). */
  probe: () => Promise<DockerHost>;
  /** The executor of each order type this agent runs (others get UNSUPPORTED_ORDER_TYPE). */
  executors: Partial<ExecutorTable>;
  /** The projects this agent manages, as the engine shows them (throws when it cannot tell). */
  observe: () => Promise<ProjectObservation[]>;
  /** Restarts process modules that died and reports them all (hosts without Docker). */
  supervise?: () => Promise<ProcessObservation[]>;
  /** The clock leases are kept by (default: performance.now() and setTimeout). */
  clock?: Clock;
  /** Where the agent counts what it does (default: a tally of its own). */
  tally?: AgentTally;
}

export class Agent {
  // Whether the next round asks for an order (see the top of this file).
  private mayHaveWork = true;
  private recovered = false;
  private readonly backoff = new Backoff();
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly tally: AgentTally;
  private readonly spans = new OrderSpans();
  private readonly reporter: ResultReporter;
  private readonly host: HostProbe;
  private readonly heartbeats: Heartbeats;
  private readonly runner: OrderRunner;

  constructor(private readonly deps: AgentDeps) {
    this.log = deps.log.child({ node_id: deps.config.nodeId });
    this.clock = deps.clock ?? monotonicClock;
    this.tally = deps.tally ?? new AgentTally();
    this.host = new HostProbe(deps.probe, this.log);
    this.heartbeats = new Heartbeats({
      config: deps.config,
      clients: deps.clients,
      host: this.host,
      tally: this.tally,
      log: this.log,
      observe: deps.observe,
      supervise: deps.supervise,
    });
    this.reporter = new ResultReporter({
      nodeId: deps.config.nodeId,
      clients: deps.clients,
      journal: deps.journal,
      tally: this.tally,
      spans: this.spans,
    });
    this.runner = new OrderRunner({
      config: deps.config,
      clients: deps.clients,
      journal: deps.journal,
      executors: deps.executors,
      host: this.host,
      heartbeats: this.heartbeats,
      reporter: this.reporter,
      tally: this.tally,
      spans: this.spans,
      clock: this.clock,
      log: this.log,
      claimUnsure: () => (this.recovered = false),
    });
  }

  /** Runs until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    await this.deps.journal.open();
    const watch = this.deps.config.watch
      ? new OrderWatch(
          this.deps.clients.nodes,
          this.deps.config.nodeId,
          this.log,
          (o) => o.cancelRequest && this.runner.cancel(o.id, o.cancelRequest.reason),
          () => this.tally.count("watchReconnects"),
        )
      : undefined;
    const watching = watch?.run(signal);
    while (!signal.aborted) {
      try {
        await this.host.refresh();
        if (!this.recovered) await this.recoverJournal(signal);
        if (this.heartbeats.due() && (await this.heartbeats.beat()) > 0) this.mayHaveWork = true;
        if (this.mayHaveWork) {
          const next = await this.deps.clients.nodes.getNextWorkOrder({ nodeId: this.deps.config.nodeId });
          if (next.workOrder) {
            this.backoff.reset();
            await this.runner.handle(next.workOrder, signal);
            continue;
          }
          this.mayHaveWork = false;
        }
        this.backoff.reset();
        // Until the next heartbeat is due, cut short when the stream rings.
        const due = this.heartbeats.untilDue();
        if (await (watch ? watch.wait(due, signal) : sleep(due, signal).then(() => false))) this.mayHaveWork = true;
      } catch (e) {
        if (signal.aborted) break;
        const delay = this.backoff.next();
        const err = ConnectError.from(e);
        this.log.warn(
          {
            action: "controller_unreachable",
            result: Code[err.code] ?? String(err.code),
            metadata: { retry_in_ms: delay, attempt: this.backoff.attempts, message: err.rawMessage },
          },
          `controller call failed; retrying in ${delay} ms`,
        );
        await sleep(delay, signal);
      }
    }
    await watching;
    this.log.info({ action: "stop" }, "agent stopped");
  }

  /** Finishes what an earlier run of this agent left in the journal. */
  private async recoverJournal(signal: AbortSignal): Promise<void> {
    const { entries, problems } = await this.deps.journal.pending();
    for (const p of problems)
      this.log.error({ action: "journal", result: "unreadable", metadata: { problem: p } }, "skipping an unreadable journal entry");
    for (const entry of entries) await this.spans.within(entry.order, () => this.recoverEntry(entry, signal));
    this.recovered = true;
  }

  /** Finishes one order an earlier run left in the journal. */
  private async recoverEntry(entry: JournalEntry, signal: AbortSignal): Promise<void> {
    const log = this.runner.logOf(entry.order);
    let granted: number | undefined;
    if (entry.result) {
      log.info({ action: "recover", result: "report" }, "reporting the result of an order finished before a restart");
      if (!entry.result.success) this.spans.fail(entry.order, entry.result.code);
      await this.reporter.report(entry.order, entry.result, [], signal, log);
    } else if (!entry.claimedAt) {
      await this.reclaim(entry.order, signal, log);
    } else if ((granted = await this.renewHeld(entry.order)) !== undefined) {
      if (!mayRunAgain(entry.order.type)) {
        log.warn({ action: "recover", result: "interrupted" }, "an order claimed before a restart is not run again");
        const result = failure("AGENT_RESTARTED", INTERRUPTED);
        this.runner.ended(entry.order, result);
        await this.deps.journal.record({ order: entry.order, claimedAt: entry.claimedAt, result });
        await this.reporter.report(entry.order, result, [], signal, log);
        return;
      }
      log.warn({ action: "recover", result: "resume" }, "resuming an order claimed before a restart");
      await this.runner.execute(entry.order, entry.claimedAt, granted, signal, log);
    } else {
      // The lease lapsed while this agent was down: the order went back to pending (the loop
      // claims it afresh) or another claim finished it.
      log.warn(
        { action: "recover", result: "lease_lost" },
        "an order claimed before a restart is no longer held; dropping the journal entry",
      );
      this.tally.count("leasesLost");
      this.spans.fail(entry.order, LEASE_LOST);
      await this.deps.journal.remove(entry.order.id);
    }
  }

  /**
   * An order whose claim was in flight at a restart: when the controller granted it (the order
   * runs under this node's claim), that claim is this agent's and nothing ran under it yet (a run
   * journals its claim first), so it is taken up; otherwise the order is claimed again.
   */
  private async reclaim(order: WorkOrder, signal: AbortSignal, log: Logger): Promise<void> {
    const now = (await this.deps.clients.orders.getWorkOrder({ id: order.id }, this.spans.call(order)).catch(() => undefined))?.workOrder;
    const claim = now?.status === WorkOrderStatus.RUNNING ? now.claim : undefined;
    // What runs is the order as journaled (as handed out for the claim), under the granted claim.
    const held = clone(WorkOrderSchema, order);
    held.claim = claim;
    const granted = claim?.nodeId === this.deps.config.nodeId && claim.claimedAt ? await this.renewHeld(held) : undefined;
    if (granted !== undefined && claim?.claimedAt) {
      log.warn({ action: "recover", result: "adopt" }, "taking up the claim granted just before a restart");
      await this.runner.execute(held, timestampDate(claim.claimedAt), granted, signal, log);
      return;
    }
    log.warn({ action: "recover", result: "claim" }, "claiming again an order whose claim was in flight before a restart");
    await this.runner.handle(order, signal);
  }

  /**
   * Renews the lease of an order claimed before a restart. Returns when (clock.now()) the granted
   * renewal was sent, or undefined when the controller no longer has the order under this claim.
   */
  private async renewHeld(order: WorkOrder): Promise<number | undefined> {
    const sent = this.clock.now();
    const token = order.claim?.fencingToken ?? 0n;
    if (token === 0n) return sent;
    try {
      await this.deps.clients.orders.renewWorkOrderLease({ id: order.id, fencingToken: token }, this.spans.call(order));
      return sent;
    } catch (e) {
      if (TRANSIENT.has(ConnectError.from(e).code)) throw e;
      return undefined;
    }
  }
}

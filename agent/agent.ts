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
import { parseTraceparent } from "../common/trace-context.js";
import { clone } from "@bufbuild/protobuf";
import { durationMs, timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { ProcessObservation, ProjectObservation } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder, type WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import { crashPoint } from "../common/crash-points.js";
import { Backoff } from "../common/backoff.js";
import { sleep } from "./engine/sleep.js";
import { OrderWatch } from "./order-watch.js";
import type { AgentConfig } from "./config.js";
import type { ControllerClients } from "./controller-client.js";
import type { DockerHost } from "./engine/docker-host.js";
import { LeaseLost, type ExecOutcome } from "./executors/executor.js";
import type { ProjectSecrets } from "./engine/project-secrets.js";
import { executorFor, type ExecutorTable } from "./executors/executor-table.js";
import type { Journal, JournalEntry } from "./journal.js";
import { LeaseKeeper, monotonicClock, TRANSIENT, type Clock, type LeaseLoss } from "./lease-keeper.js";
import { AgentTally } from "./agent-tally.js";
import { OrderSpans } from "./order-spans.js";
import { describeLoss, failure, LEASE_LOST, leaseLostResult, OrderTimeout, timedOutResult } from "./agent-results.js";
import { ResultReporter } from "./result-reporter.js";
import { AGENT_VERSION } from "./agent-version.js";
import { Heartbeats } from "./heartbeats.js";
import { HostProbe } from "./host-probe.js";

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
  // The order being executed, so a cancel heard on the stream or a renewal can stop it.
  private running: { id: string; cancel: AbortController } | undefined;
  private readonly backoff = new Backoff();
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly tally: AgentTally;
  private readonly spans = new OrderSpans();
  private readonly reporter: ResultReporter;
  private readonly host: HostProbe;
  private readonly heartbeats: Heartbeats;

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
  }

  /** Runs until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    await this.deps.journal.open();
    const watch = this.deps.config.watch
      ? new OrderWatch(
          this.deps.clients.nodes,
          this.deps.config.nodeId,
          this.log,
          (o) => o.cancelRequest && this.cancelRunning(o.id, o.cancelRequest.reason),
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
            await this.handle(next.workOrder, signal);
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
    const log = this.orderLog(entry.order);
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
        this.ended(entry.order, result);
        await this.deps.journal.record({ order: entry.order, claimedAt: entry.claimedAt, result });
        await this.reporter.report(entry.order, result, [], signal, log);
        return;
      }
      log.warn({ action: "recover", result: "resume" }, "resuming an order claimed before a restart");
      await this.execute(entry.order, entry.claimedAt, granted, signal, log);
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

  /** An order ended with `result` in this run of the agent: counted, and its span marked. */
  private ended(order: WorkOrder, result: WorkOrderResult): void {
    this.tally.orderEnded(order.type, result.code);
    if (!result.success) this.spans.fail(order, result.code);
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
      await this.execute(held, timestampDate(claim.claimedAt), granted, signal, log);
      return;
    }
    log.warn({ action: "recover", result: "claim" }, "claiming again an order whose claim was in flight before a restart");
    await this.handle(order, signal);
  }

  /** The secret values of a claimed order's project, asked for under its claim; kept in memory only. */
  private async orderSecrets(order: WorkOrder): Promise<ProjectSecrets> {
    const res = await this.deps.clients.orders.getWorkOrderSecrets(
      { id: order.id, fencingToken: order.claim?.fencingToken ?? 0n },
      this.spans.call(order),
    );
    return {
      env: { ...res.env },
      files: { ...res.files },
      registries: res.registries.map((r) => ({ registry: r.registry, username: r.username, password: r.password })),
    };
  }

  /** Claims `order` and runs it, in its span. */
  private handle(order: WorkOrder, signal: AbortSignal): Promise<void> {
    return this.spans.within(order, () => this.claimAndRun(order, signal));
  }

  private async claimAndRun(order: WorkOrder, signal: AbortSignal): Promise<void> {
    const log = this.orderLog(order);
    // Journal first: killed after the controller granted the claim but before a journal write,
    // the agent would forget an order the controller thinks it is running.
    await this.deps.journal.record({ order });
    let claimed: WorkOrder;
    // The lease counts from before the claim was sent: the controller's lease cannot end earlier.
    const asked = this.clock.now();
    try {
      const res = await this.deps.clients.orders.claimWorkOrder({ id: order.id }, this.spans.call(order));
      claimed = res.workOrder!;
    } catch (e) {
      const err = ConnectError.from(e);
      if (err.code === Code.FailedPrecondition || err.code === Code.PermissionDenied || err.code === Code.NotFound) {
        log.info({ action: "claim", result: Code[err.code], metadata: { message: err.rawMessage } }, "order not claimable; skipping");
        this.tally.count("claimsRefused");
        this.spans.fail(order, "CLAIM_REFUSED");
        await this.deps.journal.remove(order.id);
        return;
      }
      // The claim may or may not have landed: go through the journal again next round.
      this.recovered = false;
      throw e;
    }
    log.info({ action: "claim", result: "ok" }, "work order claimed");
    crashPoint("agent.after-claim");
    await this.execute(claimed, new Date(), asked, signal, log);
  }

  /** Runs a claimed order, keeping its lease (granted to a request sent at `grantedAt`), then reports it. */
  private async execute(order: WorkOrder, claimedAt: Date, grantedAt: number, signal: AbortSignal, log: Logger): Promise<void> {
    await this.deps.journal.record({ order, claimedAt });
    let outcome: ExecOutcome;
    const executor = executorFor(this.deps.executors, order.type);
    // The lease is renewed until the result is accepted, not only while the order runs: a
    // controller that was down when the order ended must not hand it to a new claim while this
    // agent retries its report.
    let stopRenewing = () => {};
    if (executor) {
      const host = await this.host.refresh();
      const cancel = new AbortController();
      const lease = new AbortController();
      this.running = { id: order.id, cancel };
      let executing = true;
      // While it runs, a lost lease stops the order and is journaled at once as its result.
      const lost: { loss?: LeaseLoss; journaled?: Promise<void> } = {};
      const keeper = this.keepLease(order, grantedAt, log, (loss) => {
        this.logLoss(order, loss, executing, log);
        this.tally.count("leasesLost");
        if (!executing) return;
        const reason = new LeaseLost(describeLoss(loss));
        lease.abort(reason);
        cancel.abort(reason);
        const journaled = this.deps.journal
          .record({ order, claimedAt, result: leaseLostResult(loss) })
          .catch((e: unknown) => log.error({ action: "journal", result: "error", err: e }, "could not journal the lost lease"));
        Object.assign(lost, { loss, journaled });
      });
      stopRenewing = () => keeper?.stop();
      const stopBeating = this.heartbeats.keepBeating(log);
      // The order's own timeout counts from its claim, so a run resumed after a restart keeps
      // the deadline the first run had.
      const timeoutMs = order.timeout ? durationMs(order.timeout) : 0;
      const left = timeoutMs > 0 ? Math.max(0, timeoutMs - (Date.now() - claimedAt.getTime())) : 0;
      const timer = timeoutMs > 0 ? setTimeout(() => cancel.abort(new OrderTimeout(timeoutMs)), left) : undefined;
      try {
        outcome = await executor(order, {
          config: this.deps.config,
          host,
          log,
          signal: cancel.signal,
          lease: lease.signal,
          secrets: () => this.orderSecrets(order),
        });
      } catch (e) {
        log.error({ action: "execute", result: "AGENT_ERROR", err: e }, "executor failed unexpectedly");
        outcome = {
          result: failure("AGENT_ERROR", `the agent failed while applying: ${(e as Error).message}`),
          services: [],
          composePath: "",
        };
      } finally {
        executing = false;
        clearTimeout(timer);
        stopBeating();
        this.running = undefined;
      }
      crashPoint("agent.after-execute");
      if (lost.loss) {
        // Never a success: the run was stopped, and another holder may have the order by now.
        outcome.result = leaseLostResult(lost.loss, outcome.result);
        await lost.journaled;
      } else if (cancel.signal.reason instanceof OrderTimeout && !outcome.result.success) {
        outcome.result = timedOutResult(cancel.signal.reason, outcome.result);
      }
      if (outcome.result.code === "DOCKER_UNAVAILABLE") void this.host.refresh(true);
    } else {
      outcome = {
        result: failure(
          "UNSUPPORTED_ORDER_TYPE",
          `this agent (${AGENT_VERSION}) cannot run order type ${WorkOrderType[order.type] ?? order.type}`,
        ),
        services: [],
        composePath: "",
      };
    }
    const r = outcome.result;
    log[r.success ? "info" : "warn"](
      {
        action: "execute",
        result: r.code,
        metadata: { duration_ms: Number(r.details?.durationMs ?? 0n), changed: r.details?.changedResources, message: r.message },
      },
      `work order ${r.success ? "succeeded" : "failed"}: ${r.code}`,
    );
    this.ended(order, r);
    await this.deps.journal.record({ order, claimedAt, result: r });
    crashPoint("agent.before-report");
    try {
      await this.reporter.report(order, r, outcome.services, signal, log, stopRenewing);
    } finally {
      stopRenewing();
    }
  }

  /** Stops the order being executed, when it is `orderId` (an admin cancelled it). */
  private cancelRunning(orderId: string, reason: string, log: Logger = this.log): void {
    if (this.running?.id !== orderId || this.running.cancel.signal.aborted) return;
    log.warn(
      { action: "cancel", result: "stopping", work_order_id: orderId, metadata: { reason } },
      "work order cancelled by an admin; stopping it",
    );
    this.running.cancel.abort(reason);
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

  /**
   * Keeps the claim's lease (lease-keeper.ts) until stopped; `onLost` is told once when it is
   * lost. Undefined for an order without a lease (an old claim without a fencing token).
   */
  private keepLease(order: WorkOrder, grantedAt: number, log: Logger, onLost: (loss: LeaseLoss) => void): LeaseKeeper | undefined {
    const claim = order.claim;
    if (!claim?.leaseExpiresAt || !claim.claimedAt || claim.fencingToken === 0n) return undefined;
    const leaseMs = timestampDate(claim.leaseExpiresAt).getTime() - timestampDate(claim.claimedAt).getTime();
    return new LeaseKeeper({
      leaseMs,
      grantedAt,
      clock: this.clock,
      renew: async (timeoutMs) =>
        (
          await this.deps.clients.orders.renewWorkOrderLease(
            { id: order.id, fencingToken: claim.fencingToken },
            { ...this.spans.call(order), timeoutMs },
          )
        ).workOrder,
      onRenewed: (o) => o?.cancelRequest && this.cancelRunning(order.id, o.cancelRequest.reason, log),
      onLost,
    }).start();
  }

  /** The one line a lost lease gets. */
  private logLoss(order: WorkOrder, loss: LeaseLoss, executing: boolean, log: Logger): void {
    const { kind, ...why } = loss;
    log[executing ? "warn" : "info"](
      { action: "lease_lost", result: kind, metadata: { ...why, fencing_token: order.claim?.fencingToken.toString() } },
      executing
        ? `lease lost (${describeLoss(loss)}); stopping the order`
        : `lease lost (${describeLoss(loss)}) after the order ran; its result is reported as it is`,
    );
  }

  private orderLog(order: WorkOrder): Logger {
    return this.log.child({
      tenant_id: order.target?.tenantId,
      request_id: order.requestId,
      correlation_id: order.correlationId,
      trace_id: parseTraceparent(order.traceparent)?.traceId,
      work_order_id: order.id,
    });
  }
}

// Runs one work order at a time: journal it, claim it, mark it claimed, execute it (its lease
// kept by order-lease.ts, heartbeats sent meanwhile, stopped by an admin's cancel or its own
// timeout), journal the result, report it (result-reporter.ts). The journal is written before
// each step it guards, so a restart finds every order the controller may think this node runs
// (journal-recovery.ts takes them up). Each order is a span (order-spans.ts), and its log lines
// carry its ids.
import { durationMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { WorkOrderType, type WorkOrder, type WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import { crashPoint } from "../common/crash-points.js";
import type { OrderChannel } from "./session/order-channel.js";
import { parseTraceparent } from "../common/trace-context.js";
import type { AgentTally } from "./agent-tally.js";
import { AGENT_VERSION } from "./agent-version.js";
import { failure, OrderTimeout, timedOutResult, withCause } from "./agent-results.js";
import type { AgentConfig } from "./config.js";
import type { ControllerClients } from "./controller-client.js";
import type { ProjectSecrets } from "./engine/project-secrets.js";
import type { ExecOutcome, Executor } from "./executors/executor.js";
import { executorFor, type ExecutorTable } from "./executors/executor-table.js";
import type { Heartbeats } from "./heartbeats.js";
import type { HostProbe } from "./host-probe.js";
import type { Journal } from "./journal.js";
import type { Clock } from "./lease-keeper.js";
import { OrderLease } from "./order-lease.js";
import type { OrderSpans } from "./order-spans.js";
import type { ResultReporter } from "./result-reporter.js";

export interface OrderRunnerDeps {
  config: AgentConfig;
  clients: ControllerClients;
  /** Where lease renewals go: the session while it is up, the unary call otherwise. */
  channel: OrderChannel;
  journal: Journal;
  /** The executor of each order type this agent runs (others get UNSUPPORTED_ORDER_TYPE). */
  executors: Partial<ExecutorTable>;
  host: HostProbe;
  heartbeats: Heartbeats;
  reporter: ResultReporter;
  tally: AgentTally;
  spans: OrderSpans;
  clock: Clock;
  /** The agent's log (with its node id). */
  log: Logger;
  /** A claim failed so that it may or may not have landed: the journal is to be gone through again. */
  claimUnsure: () => void;
}

export class OrderRunner {
  // The order being executed, so a cancel heard on the stream or a renewal can stop it.
  private running: { id: string; cancel: AbortController } | undefined;

  constructor(private readonly deps: OrderRunnerDeps) {}

  /** Claims `order` and runs it, in its span. */
  handle(order: WorkOrder, signal: AbortSignal): Promise<void> {
    return this.deps.spans.within(order, () => this.claimAndRun(order, signal));
  }

  /** Runs a claimed order, keeping its lease (granted to a request sent at `grantedAt`), then reports it. */
  async execute(order: WorkOrder, claimedAt: Date, grantedAt: number, signal: AbortSignal, log: Logger): Promise<void> {
    const { journal } = this.deps;
    await journal.record({ order, claimedAt });
    const executor = executorFor(this.deps.executors, order.type);
    const { outcome, lease } = executor
      ? await this.runExecutor(executor, order, claimedAt, grantedAt, log)
      : { outcome: unsupported(order), lease: undefined };
    const r = withCause(outcome.result);
    logResult(log, r);
    this.ended(order, r);
    await journal.record({ order, claimedAt, result: r });
    crashPoint("agent.before-report");
    // The lease is renewed until the result is accepted, not only while the order runs.
    const stopRenewing = () => lease?.stop();
    try {
      await this.deps.reporter.report(order, r, outcome.services, signal, log, stopRenewing);
    } finally {
      stopRenewing();
    }
  }

  /** Stops the order being executed, when it is `orderId` (an admin cancelled it). */
  cancel(orderId: string, reason: string, log: Logger = this.deps.log): void {
    if (this.running?.id !== orderId || this.running.cancel.signal.aborted) return;
    log.warn(
      { action: "cancel", result: "stopping", work_order_id: orderId, metadata: { reason } },
      "work order cancelled by an admin; stopping it",
    );
    this.running.cancel.abort(reason);
  }

  /** An order ended with `result` in this run of the agent: counted, and its span marked. */
  ended(order: WorkOrder, result: WorkOrderResult): void {
    this.deps.tally.orderEnded(order.type, result.code);
    if (!result.success) this.deps.spans.fail(order, result.code);
  }

  /** The log of lines about `order`: the agent's, with the order's ids. */
  logOf(order: WorkOrder): Logger {
    return this.deps.log.child({
      tenant_id: order.target?.tenantId,
      request_id: order.requestId,
      correlation_id: order.correlationId,
      trace_id: parseTraceparent(order.traceparent)?.traceId,
      work_order_id: order.id,
    });
  }

  private async claimAndRun(order: WorkOrder, signal: AbortSignal): Promise<void> {
    const { journal, tally, spans } = this.deps;
    const log = this.logOf(order);
    // Journal first: killed after the controller granted the claim but before a journal write,
    // the agent would forget an order the controller thinks it is running.
    await journal.record({ order });
    let claimed: WorkOrder;
    // The lease counts from before the claim was sent: the controller's lease cannot end earlier.
    const asked = this.deps.clock.now();
    try {
      const res = await this.deps.clients.orders.claimWorkOrder({ id: order.id }, spans.call(order));
      claimed = res.workOrder!;
    } catch (e) {
      const err = ConnectError.from(e);
      if (err.code === Code.FailedPrecondition || err.code === Code.PermissionDenied || err.code === Code.NotFound) {
        log.info({ action: "claim", result: Code[err.code], metadata: { message: err.rawMessage } }, "order not claimable; skipping");
        tally.count("claimsRefused");
        spans.fail(order, "CLAIM_REFUSED");
        await journal.remove(order.id);
        return;
      }
      // The claim may or may not have landed: go through the journal again next round.
      this.deps.claimUnsure();
      throw e;
    }
    log.info({ action: "claim", result: "ok" }, "work order claimed");
    crashPoint("agent.after-claim");
    await this.execute(claimed, new Date(), asked, signal, log);
  }

  /**
   * Runs the order's executor under its lease, its cancel and its timeout, with heartbeats
   * meanwhile; returns its outcome and the lease, still kept until the result is reported.
   */
  private async runExecutor(
    executor: Executor,
    order: WorkOrder,
    claimedAt: Date,
    grantedAt: number,
    log: Logger,
  ): Promise<{ outcome: ExecOutcome; lease: OrderLease }> {
    const host = await this.deps.host.refresh();
    const cancel = new AbortController();
    this.running = { id: order.id, cancel };
    const lease = new OrderLease(this.deps, order, claimedAt, log, {
      lost: (reason) => cancel.abort(reason),
      cancelRequested: (reason) => this.cancel(order.id, reason, log),
    }).start(grantedAt);
    const stopBeating = this.deps.heartbeats.keepBeating(log);
    const timer = startTimeout(order, claimedAt, cancel);
    let outcome: ExecOutcome;
    try {
      outcome = await executor(order, {
        config: this.deps.config,
        host,
        log,
        signal: cancel.signal,
        lease: lease.signal,
        secrets: () => this.orderSecrets(order),
        webhookUrl: async () => (await this.askSecrets(order)).webhookUrl,
        controller: this.deps.clients,
        agentVersion: AGENT_VERSION,
      });
    } catch (e) {
      log.error({ action: "execute", result: "AGENT_ERROR", err: e }, "executor failed unexpectedly");
      outcome = {
        result: failure("AGENT_ERROR", `the agent failed while applying: ${(e as Error).message}`),
        services: [],
        composePath: "",
      };
    } finally {
      lease.ranOut();
      clearTimeout(timer);
      stopBeating();
      this.running = undefined;
    }
    crashPoint("agent.after-execute");
    if (lease.lost) {
      // Never a success: the run was stopped, and another holder may have the order by now.
      outcome.result = await lease.lostResult(outcome.result);
    } else if (cancel.signal.reason instanceof OrderTimeout && !outcome.result.success) {
      outcome.result = timedOutResult(cancel.signal.reason, outcome.result);
    }
    if (outcome.result.code === "DOCKER_UNAVAILABLE") void this.deps.host.refresh(true);
    return { outcome, lease };
  }

  /** The secret values of a claimed order's project, asked for under its claim; kept in memory only. */
  private async orderSecrets(order: WorkOrder): Promise<ProjectSecrets> {
    const res = await this.askSecrets(order);
    return {
      env: { ...res.env },
      files: { ...res.files },
      registries: res.registries.map((r) => ({ registry: r.registry, username: r.username, password: r.password })),
    };
  }

  /** GetWorkOrderSecrets under the order's claim: what the controller hands its holder. */
  private askSecrets(order: WorkOrder) {
    return this.deps.clients.orders.getWorkOrderSecrets(
      { id: order.id, fencingToken: order.claim?.fencingToken ?? 0n },
      this.deps.spans.call(order),
    );
  }
}

/**
 * Stops the order (`cancel`) when its own timeout passes. The timeout counts from its claim, so a
 * run resumed after a restart keeps the deadline the first run had. Returns the timer.
 */
function startTimeout(order: WorkOrder, claimedAt: Date, cancel: AbortController): ReturnType<typeof setTimeout> | undefined {
  const timeoutMs = order.timeout ? durationMs(order.timeout) : 0;
  const left = timeoutMs > 0 ? Math.max(0, timeoutMs - (Date.now() - claimedAt.getTime())) : 0;
  return timeoutMs > 0 ? setTimeout(() => cancel.abort(new OrderTimeout(timeoutMs)), left) : undefined;
}

/** The outcome of an order of a type this agent has no executor for. */
function unsupported(order: WorkOrder): ExecOutcome {
  return {
    result: failure(
      "UNSUPPORTED_ORDER_TYPE",
      `this agent (${AGENT_VERSION}) cannot run order type ${WorkOrderType[order.type] ?? order.type}`,
    ),
    services: [],
    composePath: "",
  };
}

/** The one line an order's result gets. */
function logResult(log: Logger, r: WorkOrderResult): void {
  log[r.success ? "info" : "warn"](
    {
      action: "execute",
      result: r.code,
      metadata: {
        duration_ms: Number(r.details?.durationMs ?? 0n),
        changed: r.details?.changedResources,
        message: r.message,
        cause: r.cause?.summary,
      },
    },
    `work order ${r.success ? "succeeded" : "failed"}: ${r.code}`,
  );
}

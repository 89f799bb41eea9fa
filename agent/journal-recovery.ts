// Recovery from the journal (journal.ts): at start, and again after a claim whose fate is
// unknown, the agent finishes what its earlier runs left there. Each entry takes one of five
// ways, by how far its order got:
//
//   result journaled          -> reported again (the controller answers a repeat with what it stored)
//   pushed, ack not answered  -> left to the controller, the entry dropped: the session that carried
//                                the push releases it when it ends, or, if the ack landed, the lease
//                                lapses; either way the order is pushed again. Taking it up now would
//                                race that release (a half-open session of the dead process can end
//                                long after this restart), and the order would run twice
//   claim in flight, or a     -> taken up when the controller shows it granted to this node
//   pushed order acked           (nothing ran under it yet), else claimed again
//   claimed, lease still held -> run again when its kind may (common/order-kinds.ts), otherwise
//                                reported AGENT_RESTARTED: whether it finished is unknown
//   claimed, lease lapsed     -> dropped: the order went back to pending, or another claim has it
import { clone } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { WorkOrderSchema, WorkOrderStatus, type WorkOrder, type WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import { mayRunAgain } from "../common/order-kinds.js";
import type { AgentTally } from "./agent-tally.js";
import { failure, LEASE_LOST } from "./agent-results.js";
import type { ControllerClients } from "./controller-client.js";
import type { Journal, JournalEntry } from "./journal.js";
import { TRANSIENT, type Clock } from "./lease-keeper.js";
import type { OrderRunner } from "./order-runner.js";
import type { OrderSpans } from "./order-spans.js";
import type { ResultReporter } from "./result-reporter.js";

const INTERRUPTED =
  "the agent restarted while this order ran or before its result was saved: it is not run again, and whether it finished is unknown";

export interface JournalRecoveryDeps {
  nodeId: string;
  clients: ControllerClients;
  journal: Journal;
  runner: OrderRunner;
  reporter: ResultReporter;
  tally: AgentTally;
  spans: OrderSpans;
  clock: Clock;
  /** The agent's log (with its node id). */
  log: Logger;
}

export class JournalRecovery {
  private recovered = false;

  constructor(private readonly deps: JournalRecoveryDeps) {}

  /** Whether the journal is to be gone through (at start, and after a claim of unknown fate). */
  get needed(): boolean {
    return !this.recovered;
  }

  /** A claim may or may not have landed: go through the journal again next round. */
  again(): void {
    this.recovered = false;
  }

  /** Finishes what an earlier run of this agent left in the journal. */
  async run(signal: AbortSignal): Promise<void> {
    const { entries, problems } = await this.deps.journal.pending();
    for (const p of problems)
      this.deps.log.error({ action: "journal", result: "unreadable", metadata: { problem: p } }, "skipping an unreadable journal entry");
    for (const entry of entries) await this.deps.spans.within(entry.order, () => this.recoverEntry(entry, signal));
    this.recovered = true;
  }

  /** Finishes one order an earlier run left in the journal (the four ways above). */
  private async recoverEntry(entry: JournalEntry, signal: AbortSignal): Promise<void> {
    const { order, claimedAt } = entry;
    const log = this.deps.runner.logOf(order);
    if (entry.result) return this.reportAgain(order, entry.result, signal, log);
    if (!claimedAt && entry.push === "unacked") return this.leavePush(order, log);
    if (!claimedAt) return this.reclaim(order, signal, log);
    const granted = await this.renewHeld(order);
    if (granted === undefined) return this.dropLapsed(order, log);
    if (!mayRunAgain(order.type)) return this.reportInterrupted(order, claimedAt, signal, log);
    log.warn({ action: "recover", result: "resume" }, "resuming an order claimed before a restart");
    await this.deps.runner.execute(order, claimedAt, granted, signal, log);
  }

  /** An order whose result was journaled: reported (again). */
  private async reportAgain(order: WorkOrder, result: WorkOrderResult, signal: AbortSignal, log: Logger): Promise<void> {
    log.info({ action: "recover", result: "report" }, "reporting the result of an order finished before a restart");
    if (!result.success) this.deps.spans.fail(order, result.code);
    await this.deps.reporter.report(order, result, [], signal, log);
  }

  /**
   * An order whose claim was in flight at a restart, or a pushed order acked: when the controller granted it (the order
   * runs under this node's claim), that claim is this agent's and nothing ran under it yet (a run
   * journals its claim first), so it is taken up; otherwise the order is claimed again.
   */
  private async reclaim(order: WorkOrder, signal: AbortSignal, log: Logger): Promise<void> {
    const { clients, spans, runner } = this.deps;
    const now = (await clients.orders.getWorkOrder({ id: order.id }, spans.call(order)).catch(() => undefined))?.workOrder;
    const claim = now?.status === WorkOrderStatus.RUNNING ? now.claim : undefined;
    // What runs is the order as journaled (as handed out for the claim), under the granted claim.
    const held = clone(WorkOrderSchema, order);
    held.claim = claim;
    const granted = claim?.nodeId === this.deps.nodeId && claim.claimedAt ? await this.renewHeld(held) : undefined;
    if (granted !== undefined && claim?.claimedAt) {
      log.warn({ action: "recover", result: "adopt" }, "taking up the claim granted just before a restart");
      await runner.execute(held, timestampDate(claim.claimedAt), granted, signal, log);
      return;
    }
    log.warn({ action: "recover", result: "claim" }, "claiming again an order whose claim was in flight before a restart");
    await runner.handle(order, signal);
  }

  /** A pushed order whose ack was not answered before a restart: the controller's to push again (see the top). */
  private async leavePush(order: WorkOrder, log: Logger): Promise<void> {
    log.warn(
      { action: "recover", result: "leave_push", metadata: { fencing_token: (order.claim?.fencingToken ?? 0n).toString() } },
      "a pushed order's ack was not answered before a restart; leaving it to the controller to push again",
    );
    await this.deps.journal.remove(order.id);
  }

  /** A claimed order whose kind does not run again (common/order-kinds.ts): reported AGENT_RESTARTED. */
  private async reportInterrupted(order: WorkOrder, claimedAt: Date, signal: AbortSignal, log: Logger): Promise<void> {
    log.warn({ action: "recover", result: "interrupted" }, "an order claimed before a restart is not run again");
    const result = failure("AGENT_RESTARTED", INTERRUPTED);
    this.deps.runner.ended(order, result);
    await this.deps.journal.record({ order, claimedAt, result });
    await this.deps.reporter.report(order, result, [], signal, log);
  }

  /**
   * A claimed order whose lease lapsed while this agent was down: the order went back to pending
   * (the loop claims it afresh) or another claim finished it. Its journal entry is dropped.
   */
  private async dropLapsed(order: WorkOrder, log: Logger): Promise<void> {
    log.warn(
      { action: "recover", result: "lease_lost" },
      "an order claimed before a restart is no longer held; dropping the journal entry",
    );
    this.deps.tally.count("leasesLost");
    this.deps.spans.fail(order, LEASE_LOST);
    await this.deps.journal.remove(order.id);
  }

  /**
   * Renews the lease of an order claimed before a restart. Returns when (clock.now()) the granted
   * renewal was sent, or undefined when the controller no longer has the order under this claim.
   */
  private async renewHeld(order: WorkOrder): Promise<number | undefined> {
    const sent = this.deps.clock.now();
    const token = order.claim?.fencingToken ?? 0n;
    if (token === 0n) return sent;
    try {
      await this.deps.clients.orders.renewWorkOrderLease({ id: order.id, fencingToken: token }, this.deps.spans.call(order));
      return sent;
    } catch (e) {
      if (TRANSIENT.has(ConnectError.from(e).code)) throw e;
      return undefined;
    }
  }
}

// The lease of a claimed order while this agent holds it: kept by lease-keeper.ts from the run's
// start until the controller has the result (not only while the order runs: a controller that
// was down when the order ended must not hand it to a new claim while the agent retries its
// report). Lost while the order runs (a renewal refused, or none granted before the lease would
// end), the order is stopped as a cancel stops it and journaled at once with a LEASE_LOST result,
// so a restart does not run it again; that result is reported, and the controller refuses it
// when another claim has the order, which is the usual case. Lost after the order ran, its result
// is reported as it is.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";
import type { WorkOrder, WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import type { AgentTally } from "./agent-tally.js";
import { describeLoss, leaseLostResult } from "./agent-results.js";
import { LeaseLost } from "./executors/executor.js";
import type { Journal } from "./journal.js";
import { LeaseKeeper, type Clock, type LeaseLoss } from "./lease-keeper.js";
import type { OrderSpans } from "./order-spans.js";
import type { OrderChannel } from "./session/order-channel.js";

export interface OrderLeaseDeps {
  /** Where renewals go: the session while it is up, the unary call otherwise. */
  channel: OrderChannel;
  journal: Journal;
  tally: AgentTally;
  spans: OrderSpans;
  clock: Clock;
}

/** What the lease tells the run of its order. */
export interface LeaseEvents {
  /** The lease was lost while the order ran: stop it. */
  lost: (reason: LeaseLost) => void;
  /** A renewal's answer carried an admin's cancel request. */
  cancelRequested: (reason: string) => void;
}

export class OrderLease {
  private readonly aborter = new AbortController();
  private running = true;
  private keeper: LeaseKeeper | undefined;
  // Set when the lease was lost while the order ran, with the journal write of its result.
  private lostWhileRunning: { loss: LeaseLoss; journaled: Promise<void> } | undefined;

  constructor(
    private readonly deps: OrderLeaseDeps,
    private readonly order: WorkOrder,
    private readonly claimedAt: Date,
    private readonly log: Logger,
    private readonly on: LeaseEvents,
  ) {}

  /** Aborts when the lease is lost while the order runs (ExecContext.lease). */
  get signal(): AbortSignal {
    return this.aborter.signal;
  }

  /** Whether the lease was lost while the order ran. */
  get lost(): boolean {
    return this.lostWhileRunning !== undefined;
  }

  /**
   * Starts keeping the lease granted to a request sent at `grantedAt` (clock.now()). Nothing to
   * keep for an order without a lease (an old claim without a fencing token).
   */
  start(grantedAt: number): this {
    const { order } = this;
    const claim = order.claim;
    if (!claim?.leaseExpiresAt || !claim.claimedAt || claim.fencingToken === 0n) return this;
    const leaseMs = timestampDate(claim.leaseExpiresAt).getTime() - timestampDate(claim.claimedAt).getTime();
    this.keeper = new LeaseKeeper({
      leaseMs,
      grantedAt,
      clock: this.deps.clock,
      renew: (timeoutMs) => this.deps.channel.renew(order, timeoutMs),
      onRenewed: (o) => o?.cancelRequest && this.on.cancelRequested(o.cancelRequest.reason),
      onLost: (loss) => this.onLost(loss),
    }).start();
    return this;
  }

  /** The order's run ended: a loss from now on leaves its result as it is. */
  ranOut(): void {
    this.running = false;
  }

  /** The result to report of a run stopped by a lost lease (never a success), once it is journaled. */
  async lostResult(stopped: WorkOrderResult): Promise<WorkOrderResult> {
    const lost = this.lostWhileRunning!;
    const result = leaseLostResult(lost.loss, stopped);
    await lost.journaled;
    return result;
  }

  /** Stops renewing (idempotent): the controller has the result, or the agent gave up on it. */
  stop(): void {
    this.keeper?.stop();
  }

  private onLost(loss: LeaseLoss): void {
    const { order, running, log } = this;
    this.logLoss(loss, running);
    this.deps.tally.count("leasesLost");
    if (!running) return;
    const reason = new LeaseLost(describeLoss(loss));
    this.aborter.abort(reason);
    this.on.lost(reason);
    const journaled = this.deps.journal
      .record({ order, claimedAt: this.claimedAt, result: leaseLostResult(loss) })
      .catch((e: unknown) => log.error({ action: "journal", result: "error", err: e }, "could not journal the lost lease"));
    this.lostWhileRunning = { loss, journaled };
  }

  /** The one line a lost lease gets. */
  private logLoss(loss: LeaseLoss, executing: boolean): void {
    const { kind, ...why } = loss;
    this.log[executing ? "warn" : "info"](
      { action: "lease_lost", result: kind, metadata: { ...why, fencing_token: this.order.claim?.fencingToken.toString() } },
      executing
        ? `lease lost (${describeLoss(loss)}); stopping the order`
        : `lease lost (${describeLoss(loss)}) after the order ran; its result is reported as it is`,
    );
  }
}

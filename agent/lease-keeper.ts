// Keeps one claim's lease while its order runs, and says when the lease is lost. Classic
// lease-holder discipline: the holder stops acting on the order before anyone else can hold it.
//
//   granted ──(a third of the lease)──> renew ──ok──> granted again (from when it was asked)
//                                         │ transient error: retry soon, until the deadline
//                                         └ refused (the lease lapsed, another claim has it) ─> lost
//   deadline: the lease's length after the last granted request was sent, less a margin ─> lost
//
// The deadline runs on the agent's monotonic clock from when the granted request was *sent*:
// the controller stamped the lease after it received the request, so its lease ends no earlier
// than that, whatever the latency of the answer. The margin covers stopping the order's program
// (SIGTERM) and clock rate drift, so the order stops before the controller can hand it to another
// claim. Once lost, the keeper stays lost and renews no more; it reports the loss once.
import { Code, ConnectError } from "@connectrpc/connect";
import type { WorkOrder } from "../gen/skipper/v1/work_order_pb.js";

/** The agent's monotonic clock and timers (a fake one in tests). */
export interface Clock {
  /** Milliseconds on a monotonic clock (performance.now()). */
  now(): number;
  /** Calls `fn` after `ms`; returns the cancel. */
  after(ms: number, fn: () => void): () => void;
}

export const monotonicClock: Clock = {
  now: () => performance.now(),
  after: (ms, fn) => {
    const t = setTimeout(fn, ms);
    return () => clearTimeout(t);
  },
};

/** Why a lease was lost: the controller refused a renewal, or no renewal was granted in time. */
export type LeaseLoss =
  | { kind: "refused"; code: string; message: string }
  | { kind: "deadline"; lastGrantMs: number; leaseMs: number; marginMs: number };

// Errors that mean "try again later" rather than "the controller refuses this".
export const TRANSIENT = new Set([
  Code.Unavailable,
  Code.DeadlineExceeded,
  Code.Internal,
  Code.Unknown,
  Code.Aborted,
  Code.ResourceExhausted,
  Code.Canceled,
  Code.Unauthenticated,
]);

export interface LeaseKeeperOptions {
  /** The lease's length as the controller grants it (lease_expires_at - claimed_at). */
  leaseMs: number;
  /** clock.now() when the request that was granted the current lease (claim or renewal) was sent. */
  grantedAt: number;
  /** Asks the controller to renew; rejects with its error. `timeoutMs` bounds the call. */
  renew: (timeoutMs: number) => Promise<WorkOrder | undefined>;
  /** Told once, when the lease is lost. */
  onLost: (loss: LeaseLoss) => void;
  /** Told of each renewal's answer (it carries an admin's cancel request). */
  onRenewed?: (order: WorkOrder | undefined) => void;
  clock?: Clock;
}

/** How long before the lease's end the holder gives it up: a quarter of it, at most 5 s. */
export function leaseMargin(leaseMs: number): number {
  return Math.min(Math.floor(leaseMs / 4), 5000);
}

export class LeaseKeeper {
  private readonly clock: Clock;
  private readonly every: number;
  private readonly retryMs: number;
  private grantedAt: number;
  private cancelDeadline = () => {};
  private cancelRenewal = () => {};
  private stopped = false;
  private lostWith: LeaseLoss | undefined;

  constructor(private readonly opts: LeaseKeeperOptions) {
    this.clock = opts.clock ?? monotonicClock;
    this.every = Math.max(50, Math.floor(opts.leaseMs / 3));
    this.retryMs = Math.max(50, Math.min(this.every, Math.floor(opts.leaseMs / 10)));
    this.grantedAt = opts.grantedAt;
  }

  /** Starts renewing; the deadline counts from `grantedAt`. */
  start(): this {
    this.armDeadline();
    this.scheduleRenewal(this.grantedAt + this.every);
    return this;
  }

  /** Stops renewing and watching the deadline (idempotent). */
  stop(): void {
    this.stopped = true;
    this.cancelDeadline();
    this.cancelRenewal();
  }

  /** Why the lease was lost; undefined while it is held. */
  get lost(): LeaseLoss | undefined {
    return this.lostWith;
  }

  private get done(): boolean {
    return this.stopped || this.lostWith !== undefined;
  }

  private armDeadline(): void {
    this.cancelDeadline();
    const margin = leaseMargin(this.opts.leaseMs);
    const at = this.grantedAt + this.opts.leaseMs - margin;
    const lastGrant = this.grantedAt;
    this.cancelDeadline = this.clock.after(Math.max(0, at - this.clock.now()), () =>
      this.lose({ kind: "deadline", lastGrantMs: Math.round(this.clock.now() - lastGrant), leaseMs: this.opts.leaseMs, marginMs: margin }),
    );
  }

  private scheduleRenewal(at: number): void {
    this.cancelRenewal();
    this.cancelRenewal = this.clock.after(Math.max(0, at - this.clock.now()), () => void this.renewOnce());
  }

  // One renewal at a time: a refusal is heard once, and a slow call cannot pile up others.
  private async renewOnce(): Promise<void> {
    if (this.done) return;
    const sentAt = this.clock.now();
    try {
      const order = await this.opts.renew(this.every);
      if (this.done) return;
      this.grantedAt = sentAt;
      this.armDeadline();
      this.scheduleRenewal(sentAt + this.every);
      this.opts.onRenewed?.(order);
    } catch (e) {
      if (this.done) return;
      const err = ConnectError.from(e);
      if (TRANSIENT.has(err.code)) this.scheduleRenewal(this.clock.now() + this.retryMs);
      else this.lose({ kind: "refused", code: Code[err.code] ?? String(err.code), message: err.rawMessage });
    }
  }

  private lose(loss: LeaseLoss): void {
    if (this.done) return;
    this.lostWith = loss;
    this.cancelDeadline();
    this.cancelRenewal();
    this.opts.onLost(loss);
  }
}

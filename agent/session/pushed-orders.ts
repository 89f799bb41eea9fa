// What the agent does with an order a session pushed (already claimed for it, under a fencing
// token and a lease):
//
//   journal it (unacked) ─> agent.after-push ─> ack ─> answer accepted ─> journal it (acked) ─> agent.after-ack ─> run it
//                                                   │              (order-runner.ts execute: lease kept,
//                                                   │               timeout, cancel; result reported)
//                                                   ├─ answer refused ─> drop the journal entry, one line
//                                                   └─ session broke before the answer: did the ack land?
//                                                      a renewal under the token says (granted: run it;
//                                                      refused: the claim was released, drop it; no
//                                                      answer: the journal is gone through again,
//                                                      which leaves it to the controller)
//
// The journal entry is written before the ack, so a restart finds every order the controller may
// think this node holds, and again once the ack is answered accepted: only then is the claim this
// node's for sure (a session that ends with the push unacknowledged gives it back, however late it
// ends). journal-recovery.ts takes up an acked entry and leaves an unacked one to the controller.
import { Code, ConnectError } from "@connectrpc/connect";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { crashPoint } from "../../common/crash-points.js";
import type { AgentTally } from "../agent-tally.js";
import type { Journal } from "../journal.js";
import { TRANSIENT, type Clock } from "../lease-keeper.js";
import type { OrderRunner } from "../order-runner.js";
import type { OrderSpans } from "../order-spans.js";
import type { OrderChannel } from "./order-channel.js";
import type { SessionLink } from "./session-link.js";

export interface PushedOrderDeps {
  journal: Journal;
  runner: OrderRunner;
  channel: OrderChannel;
  spans: OrderSpans;
  tally: AgentTally;
  clock: Clock;
  /** The journal is to be gone through again (an order of unknown fate is in it). */
  recheckJournal: () => void;
}

/** Runs pushed orders one after the other (the controller pushes one at a time anyway). */
export class PushedOrders {
  private chain: Promise<void> = Promise.resolve();
  private runs = 0;
  /** Told when the last order taken is done with (the session sends its full report then). */
  onSettled: (() => void) | undefined;

  constructor(private readonly deps: PushedOrderDeps) {}

  /** Whether a pushed order runs (or waits its turn) now. */
  get busy(): boolean {
    return this.runs > 0;
  }

  /** Takes `order`, pushed on `link`, after any taken before it. */
  take(link: SessionLink, order: WorkOrder, signal: AbortSignal): void {
    this.runs++;
    const receivedAt = this.deps.clock.now();
    this.chain = this.chain
      .then(() => this.deps.spans.within(order, () => this.run(link, order, receivedAt, signal)))
      .catch((e: unknown) => {
        this.deps.runner
          .logOf(order)
          .error(
            { action: "session_order", result: "error", err: e },
            "a pushed order failed in the agent; the journal is gone through again",
          );
        this.deps.recheckJournal();
      })
      .finally(() => {
        if (--this.runs === 0) this.onSettled?.();
      });
  }

  /** Resolves once every order taken so far is done with. */
  settled(): Promise<void> {
    return this.chain;
  }

  private async run(link: SessionLink, order: WorkOrder, receivedAt: number, signal: AbortSignal): Promise<void> {
    const { journal, runner, tally } = this.deps;
    const log = runner.logOf(order);
    await journal.record({ order, push: "unacked" });
    crashPoint("agent.after-push");
    const token = order.claim?.fencingToken ?? 0n;
    let grantedAt = receivedAt;
    let refused: { code: string; message: string } | undefined;
    try {
      const a = await link.ack(order.id, token);
      if (!a.accepted) refused = { code: a.code, message: a.message };
    } catch {
      const fate = await this.ackFate(order);
      if (fate === "unknown") {
        log.warn({ action: "ack", result: "unknown" }, "the session broke before the ack was answered; the journal is gone through again");
        this.deps.recheckJournal();
        return;
      }
      if (typeof fate === "number") grantedAt = fate;
      else refused = fate;
    }
    if (refused) {
      log.info({ action: "ack", result: refused.code, metadata: { message: refused.message } }, "pushed order no longer ours; dropping it");
      tally.count("claimsRefused");
      this.deps.spans.fail(order, "CLAIM_REFUSED");
      await journal.remove(order.id);
      return;
    }
    await journal.record({ order, push: "acked" });
    crashPoint("agent.after-ack");
    log.info({ action: "ack", result: "ok", metadata: { fencing_token: token.toString() } }, "pushed work order acknowledged");
    await runner.execute(order, new Date(), grantedAt, signal, log);
  }

  // Whether an ack whose answer the session did not bring landed: a renewal under its token (over
  // whatever carries requests now) is granted (when it was sent), refused, or not answered.
  private async ackFate(order: WorkOrder): Promise<number | { code: string; message: string } | "unknown"> {
    const sent = this.deps.clock.now();
    try {
      await this.deps.channel.renew(order, 10_000);
      return sent;
    } catch (e) {
      const err = ConnectError.from(e);
      return TRANSIENT.has(err.code) ? "unknown" : { code: Code[err.code] ?? String(err.code), message: err.rawMessage };
    }
  }
}

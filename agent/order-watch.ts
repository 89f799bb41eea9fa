// The push half of dispatch: a WatchWorkOrders stream kept open to the controller. A notice rings
// a doorbell that cuts the main loop's poll sleep short; the loop then claims as usual. When the
// stream breaks (controller restart, a proxy that cuts long streams), it reconnects with capped,
// jittered backoff while the loop keeps polling at its interval, so push is only ever a speed-up.
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import type { WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { Backoff } from "../common/backoff.js";
import { sleep } from "./engine/sleep.js";

export class OrderWatch {
  private rung = false;
  private wakeLoop: (() => void) | undefined;
  private connected = false;
  private everConnected = false;

  constructor(
    private readonly nodes: Client<typeof NodeService>,
    private readonly nodeId: string,
    private readonly log: Logger,
    /** Told of every order a notice carries (e.g. to stop one an admin cancelled). */
    private readonly onNotice: (order: WorkOrder) => void = () => undefined,
    /** Told each time the stream is connected again after it broke (counted: agent-tally.ts). */
    private readonly onReconnected: () => void = () => undefined,
  ) {}

  /** Keeps a stream open until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const backoff = new Backoff(500, 30_000);
    while (!signal.aborted) {
      try {
        // No deadline: the stream is meant to stay open (the client's default is for unary calls).
        for await (const notice of this.nodes.watchWorkOrders({ nodeId: this.nodeId }, { signal, timeoutMs: 0 })) {
          if (!this.connected) {
            this.connected = true;
            if (this.everConnected) this.onReconnected();
            this.everConnected = true;
            backoff.reset();
            this.log.info({ action: "watch", result: "connected" }, "watching for work orders");
          }
          if (notice.workOrder) {
            this.onNotice(notice.workOrder);
            this.ring();
          }
        }
      } catch (e) {
        if (signal.aborted) break;
        const err = ConnectError.from(e);
        const delay = backoff.next();
        this.log[this.connected ? "warn" : "debug"](
          { action: "watch", result: Code[err.code] ?? String(err.code), metadata: { retry_in_ms: delay, message: err.rawMessage } },
          "work-order stream broke; polling until it is back",
        );
        this.connected = false;
        await sleep(delay, signal);
        continue;
      }
      this.connected = false;
      await sleep(backoff.next(), signal);
    }
  }

  /** Something is pending: wake the loop now (or at its next wait). */
  ring(): void {
    this.rung = true;
    this.wakeLoop?.();
  }

  /** Waits `ms`, or less when the doorbell rings; true when it rang. */
  wait(ms: number, signal: AbortSignal): Promise<boolean> {
    if (this.rung) {
      this.rung = false;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const done = (rang: boolean) => {
        clearTimeout(timer);
        signal.removeEventListener("abort", aborted);
        this.wakeLoop = undefined;
        this.rung = false;
        resolve(rang);
      };
      const aborted = () => done(false);
      const timer = setTimeout(() => done(false), ms);
      this.wakeLoop = () => done(true);
      signal.addEventListener("abort", aborted, { once: true });
    });
  }
}

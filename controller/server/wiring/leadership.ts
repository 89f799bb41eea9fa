// The singleton loops run where the coordination says this controller leads (always, alone). One
// list names them: they start in its order when this controller leads, and stop in the reverse
// order when it stops leading or closes. A controller that loses leadership stops its loops and
// tells main, which exits to start afresh.
import type { Logger } from "../../../common/logging/logger.js";
import type { Coordination } from "../../store/coordination.js";

/** A loop only the leader runs. */
export interface LeaderLoop {
  start(): void;
  /** Stops the loop and waits for the round under way. */
  stop(): Promise<void>;
}

export interface LeadershipDeps {
  coordination: Coordination;
  logger: Logger;
  /** Replays what a stop interrupted; a controller sharing its store does it when it takes over. */
  recover: () => Promise<void>;
  /** This controller stopped leading (its loops are stopped). */
  onLeadershipLost?: () => void;
}

/** Seeks leadership and runs the leader's loops while this controller holds it. */
export class Leadership {
  private loops: LeaderLoop[] = [];
  private loopsRunning = false;
  private started = false;
  private leading: Promise<void> | undefined;

  constructor(private readonly deps: LeadershipDeps) {}

  /** Whether this controller's loops run: a new leader drops reconcile triggers until they do. */
  get running(): boolean {
    return this.loopsRunning;
  }

  /** The leader's loops, in the order they start (an absent one is not configured). */
  runs(loops: Array<LeaderLoop | undefined>): void {
    this.loops = loops.filter((loop): loop is LeaderLoop => loop !== undefined);
  }

  /** Seeks leadership, once; the loops start when it is held. */
  start(): void {
    if (this.started) return;
    this.started = true;
    const { coordination, logger, onLeadershipLost } = this.deps;
    void coordination
      .start((isLeader) => {
        if (isLeader) {
          this.leading = this.lead().catch((e: unknown) => {
            logger.error({ action: "leader", result: "error", err: e }, "could not take over the loops");
            onLeadershipLost?.();
          });
          return;
        }
        // The store no longer knows this controller as the leader: another may start the loops.
        logger.error(
          { action: "leader", result: "error", metadata: { controller_id: coordination.controllerId } },
          "this controller lost leadership (its database session ended)",
        );
        void this.stopLoops().finally(() => onLeadershipLost?.());
      })
      .catch((e: unknown) => logger.error({ action: "leader", result: "error", err: e }, "could not seek leadership"));
  }

  /** Waits for a take-over under way, then stops the loops. */
  async stop(): Promise<void> {
    await this.leading?.catch(() => undefined);
    await this.stopLoops();
  }

  private async lead(): Promise<void> {
    const { coordination, logger, recover } = this.deps;
    if (coordination.shared) {
      logger.info({ action: "leader", result: "ok", metadata: { controller_id: coordination.controllerId } }, "this controller now leads");
      await recover();
    }
    // Every start is synchronous: no trigger can arrive between the first loop's start and the flag.
    for (const loop of this.loops) loop.start();
    this.loopsRunning = true;
  }

  private async stopLoops(): Promise<void> {
    this.loopsRunning = false;
    for (const loop of [...this.loops].reverse()) await loop.stop();
  }
}

// Heartbeats on a session: a keepalive (no report: the controller writes nothing) every
// welcome.heartbeat_interval_ms, and the full report (heartbeats.ts report()) instead at the start
// and whenever it differs from the last one sent. Fields that change on every beat (the uptime,
// the count of answered heartbeats) are left out of the comparison. The engine is observed only
// when no order runs, as the unary loop does. A change of the updater's state is reported at once
// (heartbeats.ts onUpdaterMoved).
import { clone, toBinary } from "@bufbuild/protobuf";
import { HeartbeatRequestSchema, type HeartbeatRequest } from "../../gen/skipper/v1/node_service_pb.js";
import type { Logger } from "pino";
import type { Heartbeats } from "../heartbeats.js";
import type { SessionLink } from "./session-link.js";

export class SessionHeartbeats {
  // The last full report sent, as compared (see fingerprint).
  private last = "";
  private sending = false;
  private timer: ReturnType<typeof setInterval> | undefined;
  private intervalMs = 0;
  private stopHearing: (() => void) | undefined;

  constructor(
    private readonly heartbeats: Heartbeats,
    private readonly link: SessionLink,
    private readonly log: Logger,
    /** Whether an order runs now (the engine is not observed meanwhile). */
    private readonly orderRuns: () => boolean,
  ) {}

  /** Sends the full report now, then a beat every `intervalMs` until stop(). */
  start(intervalMs: number): void {
    this.intervalMs = intervalMs;
    this.stopHearing = this.heartbeats.onUpdaterMoved(() => this.beatNow());
    void this.beat();
    this.timer = setInterval(() => void this.beat(), Math.max(100, intervalMs));
  }

  stop(): void {
    clearInterval(this.timer);
    this.stopHearing?.();
  }

  /** Beats every `intervalMs` from now on (the controller sent new terms); the next beat reports it. */
  retime(intervalMs: number): void {
    if (intervalMs <= 0 || intervalMs === this.intervalMs) return;
    this.intervalMs = intervalMs;
    clearInterval(this.timer);
    this.timer = setInterval(() => void this.beat(), Math.max(100, intervalMs));
  }

  /**
   * A beat now, out of turn: after an order, so what it changed on the host (a project up or
   * gone) reaches the controller at once, not at the next interval (10 s on a session).
   */
  beatNow(): void {
    void this.beat();
  }

  /** One beat: the full report when it changed, a keepalive otherwise. */
  private async beat(): Promise<void> {
    if (this.sending || !this.link.up) return;
    this.sending = true;
    try {
      const report = await this.heartbeats.report({ observe: !this.orderRuns(), intervalMs: this.intervalMs });
      const print = fingerprint(report);
      if (print === this.last) {
        this.link.send({ case: "heartbeat", value: {} });
        return;
      }
      this.link.send({ case: "heartbeat", value: { report } });
      this.heartbeats.sentOnSession(report.agentCounters);
      this.last = print;
    } catch (e) {
      // The host could not be probed: a keepalive still says the agent is alive.
      this.log.debug({ action: "heartbeat", result: "error", metadata: { message: (e as Error).message } }, "could not build the report");
      this.link.send({ case: "heartbeat", value: {} });
    } finally {
      this.sending = false;
    }
  }
}

/** The report without what changes on every beat, as bytes to compare. */
function fingerprint(report: HeartbeatRequest): string {
  const r = clone(HeartbeatRequestSchema, report);
  r.uptimeSeconds = 0n;
  if (r.agentCounters) r.agentCounters.heartbeatsAcknowledged = 0n;
  return Buffer.from(toBinary(HeartbeatRequestSchema, r)).toString("base64");
}

// skippy on a Session stream (NodeService.Session). Its states:
//
//   recover the journal (unary, journal-recovery.ts) ─> open ─hello─> welcomed ─> ... ─> ended
//        ^                                                                             │
//        └──────────── wait: capped exponential backoff, full jitter ──────────────────┘
//
// Welcomed, the session carries the heartbeats (session-heartbeats.ts), lease renewals and
// results (order-channel.ts: unary again while no session is up); pushed orders are taken by
// pushed-orders.ts, a cancel stops the running order, new terms change the heartbeat interval,
// notices are heeded (REPLACED: another process of this node took over, so wait before coming
// back; CREDENTIAL_REVOKED: say what would mend it; CERTIFICATE_RENEWAL_DUE: renew now). An order runs on across a broken session.
// The backoff starts over after a session that lived half a minute; it spreads a fleet reconnecting
// after a controller restart over up to 30 s. It never gives up on its own, except to hand over
// to the unary loop (transport auto) when the controller has no Session RPC (UNIMPLEMENTED) or
// the stream cannot be had while the unary calls can.
import { proxyCapability } from "../proxy/proxy-settings.js";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { SessionNoticeKind, type SessionNotice, type SessionResponse } from "../../gen/skipper/v1/node_service_pb.js";
import { Backoff } from "../../common/backoff.js";
import type { AgentTally } from "../agent-tally.js";
import { AGENT_VERSION } from "../agent-version.js";
import type { AgentConfig } from "../config.js";
import type { ControllerClients } from "../controller-client.js";
import { credentialHint } from "../credential-hint.js";
import { sleep } from "../engine/sleep.js";
import type { Heartbeats } from "../heartbeats.js";
import type { HostProbe } from "../host-probe.js";
import type { Journal } from "../journal.js";
import type { JournalRecovery } from "../journal-recovery.js";
import type { OrderRunner } from "../order-runner.js";
import type { SwitchingChannel } from "./order-channel.js";
import type { PushedOrders } from "./pushed-orders.js";
import { SessionHeartbeats } from "./session-heartbeats.js";
import { SessionLink } from "./session-link.js";
import { Terminals } from "./terminals.js";

/** A session that lived this long starts the backoff over. */
const LIVED_LONG_MS = 30_000;
/** Sessions that fail in a row, never welcomed, before transport auto checks the unary calls. */
const FAILURES_BEFORE_FALLBACK = 3;

export interface SessionLoopDeps {
  config: AgentConfig;
  clients: ControllerClients;
  journal: Journal;
  host: HostProbe;
  runner: OrderRunner;
  recovery: JournalRecovery;
  heartbeats: Heartbeats;
  channel: SwitchingChannel;
  pushed: PushedOrders;
  tally: AgentTally;
  log: Logger;
  /** Renews the client certificate now (a certificate identity only). */
  renewCertificate?: () => Promise<void>;
}

/** How one session went. */
interface SessionOutcome {
  welcomed: boolean;
  livedMs: number;
  error?: ConnectError;
  notice?: SessionNotice;
}

export class SessionLoop {
  // 0.5 s doubling to 30 s, full jitter: as the unary loop retries.
  private readonly backoff = new Backoff();
  // Terminals the controller opens on a session (exec_open), closed with it.
  private readonly terminals: Terminals;

  constructor(private readonly deps: SessionLoopDeps) {
    this.terminals = new Terminals(deps.config.workDir, deps.log);
  }

  /**
   * Runs sessions until `signal` aborts ("stopped"), or, when `mayFallBack`, until the controller
   * shows it has no session for this agent ("fallback": the caller polls for a while).
   */
  async run(signal: AbortSignal, mayFallBack: boolean): Promise<"stopped" | "fallback"> {
    let unwelcomed = 0;
    while (!signal.aborted) {
      const outcome = await this.once(signal);
      if (signal.aborted) break;
      if (outcome.welcomed) unwelcomed = 0;
      else unwelcomed++;
      if (mayFallBack && !outcome.welcomed && (await this.shouldFallBack(outcome, unwelcomed))) {
        await this.deps.pushed.settled();
        return "fallback";
      }
      if (outcome.livedMs >= LIVED_LONG_MS && !outcome.notice) this.backoff.reset();
      this.deps.tally.count("sessionReconnects");
      await sleep(this.ended(outcome), signal);
    }
    await this.deps.pushed.settled();
    return "stopped";
  }

  /** One session: journal recovery when due, then open it and serve it until it ends. */
  private async once(signal: AbortSignal): Promise<SessionOutcome> {
    const { deps } = this;
    const startedAt = performance.now();
    let welcomedAt: number | undefined;
    let notice: SessionNotice | undefined;
    let link: SessionLink | undefined;
    let beats: SessionHeartbeats | undefined;
    const close = () => link?.close();
    signal.addEventListener("abort", close, { once: true });
    try {
      const host = await deps.host.refresh();
      if (deps.recovery.needed && !deps.pushed.busy) await deps.recovery.run(signal);
      const held = (await deps.journal.pending()).entries.map((e) => e.order.id);
      link = new SessionLink(
        deps.clients.nodes,
        {
          nodeId: deps.config.nodeId,
          agentVersion: AGENT_VERSION,
          capabilities: {
            ...host.capabilities,
            allowedCommands: deps.config.allowCommands,
            allowedProcessSources: deps.config.allowProcessSources,
            proxy: proxyCapability(deps.config.proxy),
          },
          journalWorkOrderIds: held,
        },
        deps.log,
      );
      for await (const m of link.messages()) {
        if (m.kind.case === "welcome") {
          welcomedAt = performance.now();
          beats = this.welcomed(link);
        } else if (m.kind.case === "terms") this.retimed(beats, Number(m.kind.value.heartbeatIntervalMs));
        else notice = this.handle(link, m, signal) ?? notice;
      }
      return { welcomed: welcomedAt !== undefined, livedMs: performance.now() - (welcomedAt ?? startedAt), notice };
    } catch (e) {
      const lived = performance.now() - (welcomedAt ?? startedAt);
      return { welcomed: welcomedAt !== undefined, livedMs: lived, error: ConnectError.from(e), notice };
    } finally {
      signal.removeEventListener("abort", close);
      beats?.stop();
      deps.pushed.onSettled = undefined;
      if (link) deps.channel.drop(link);
      if (link) this.terminals.closeAll(link);
      deps.heartbeats.onSession = false;
      link?.close();
    }
  }

  // The session's terms came: it carries heartbeats, renewals and results from now on.
  private welcomed(link: SessionLink): SessionHeartbeats {
    const welcome = link.welcome!;
    const { deps } = this;
    deps.channel.use(link);
    deps.heartbeats.onSession = true;
    const beats = new SessionHeartbeats(deps.heartbeats, link, deps.log, () => deps.pushed.busy);
    beats.start(Number(welcome.heartbeatIntervalMs) || deps.config.pollIntervalMs);
    deps.pushed.onSettled = () => beats.beatNow();
    deps.log.info(
      {
        action: "session_opened",
        result: "ok",
        metadata: {
          session_id: welcome.sessionId,
          heartbeat_interval_ms: Number(welcome.heartbeatIntervalMs),
          lease_ms: Number(welcome.leaseMs),
        },
      },
      `session ${welcome.sessionId} opened`,
    );
    return beats;
  }

  // New terms: the controller's fleet changed size, and with it how often this agent beats.
  private retimed(beats: SessionHeartbeats | undefined, intervalMs: number): void {
    if (!beats || intervalMs <= 0) return;
    beats.retime(intervalMs);
    this.deps.log.info(
      { action: "session_terms", result: "ok", metadata: { heartbeat_interval_ms: intervalMs } },
      `the controller asks for a heartbeat every ${intervalMs} ms`,
    );
  }

  // An order, a cancel or a notice; returns a notice that ends the session.
  private handle(link: SessionLink, m: SessionResponse, signal: AbortSignal): SessionNotice | undefined {
    const { kind } = m;
    if (kind.case === "order" && kind.value.workOrder) this.deps.pushed.take(link, kind.value.workOrder, signal);
    if (kind.case === "cancel") this.deps.runner.cancel(kind.value.workOrderId, kind.value.reason);
    if (kind.case === "execOpen") this.terminals.opened(link, kind.value);
    if (kind.case === "execInput") this.terminals.input(kind.value);
    if (kind.case !== "notice") return undefined;
    const notice = kind.value;
    if (notice.kind === SessionNoticeKind.CERTIFICATE_RENEWAL_DUE) {
      this.deps.log.info(
        { action: "session_notice", result: "CERTIFICATE_RENEWAL_DUE" },
        "the controller says the certificate is due for renewal",
      );
      void this.deps.renewCertificate?.();
      return undefined;
    }
    return notice;
  }

  // The one line an ended session gets; returns how long to wait before the next.
  private ended(outcome: SessionOutcome): number {
    const { log, config } = this.deps;
    const delay = this.backoff.next();
    const meta = { retry_in_ms: delay, attempt: this.backoff.attempts, lived_ms: Math.round(outcome.livedMs) };
    const kind = outcome.notice?.kind;
    if (kind === SessionNoticeKind.REPLACED) {
      log.warn(
        { action: "session_replaced", result: "REPLACED", metadata: { ...meta, message: outcome.notice!.message } },
        `another session of this node replaced this one (is a second skippy running with this node's credential?); reconnecting in ${delay} ms`,
      );
    } else if (kind === SessionNoticeKind.CREDENTIAL_REVOKED || outcome.error?.code === Code.Unauthenticated) {
      const message = outcome.notice?.message ?? outcome.error?.rawMessage ?? "";
      log.error(
        { action: "credential_refused", result: "UNAUTHENTICATED", metadata: { ...meta, message } },
        `${credentialHint(config, message)}; retrying in ${delay} ms`,
      );
    } else {
      // The stream broke or could not be had: as the unary loop says when its calls fail.
      const result = outcome.error ? (Code[outcome.error.code] ?? String(outcome.error.code)) : "ended";
      log.warn(
        { action: "controller_unreachable", result, metadata: { ...meta, message: outcome.error?.rawMessage } },
        `session ${outcome.welcomed ? "ended" : "could not be opened"}; reconnecting in ${delay} ms`,
      );
    }
    return delay;
  }

  // Transport auto: hand over to the unary loop when the controller has no Session RPC, or when
  // sessions keep failing before their welcome while a unary heartbeat goes through.
  private async shouldFallBack(outcome: SessionOutcome, unwelcomed: number): Promise<boolean> {
    const { log, tally, heartbeats } = this.deps;
    let why: string | undefined;
    if (outcome.error?.code === Code.Unimplemented) why = "the controller has no Session RPC (an older controller)";
    else if (unwelcomed >= FAILURES_BEFORE_FALLBACK && outcome.error?.code !== Code.Unauthenticated) {
      const unaryWorks = await heartbeats.beat().then(
        () => true,
        () => false,
      );
      if (unaryWorks) why = `the session stream cannot be had (${outcome.error?.rawMessage ?? "no welcome"}) while unary calls work`;
    }
    if (!why) return false;
    tally.count("sessionFallbacks");
    log.warn(
      {
        action: "session_fallback",
        result: outcome.error ? Code[outcome.error.code] : "no_welcome",
        metadata: { message: outcome.error?.rawMessage },
      },
      `${why}: polling with unary calls, trying the session again later`,
    );
    return true;
  }
}

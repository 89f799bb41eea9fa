// The agent: its loops, and the parts it is composed of. It talks to the controller over its
// Session stream (session/session-loop.ts; --transport session) or by unary polling, the loop
// below (--transport poll); auto (the default) runs the session and polls while the controller
// has none to give (SESSION_RETRY_MS, then it tries the session again). Both run the same orders
// the same way (order-runner.ts), and renewals and results go over the session while one is up,
// unary otherwise (session/order-channel.ts). Each round of the polling loop:
//
//   probe the host (host-probe.ts)
//   finish what the journal holds from an earlier run (journal-recovery.ts), at start and after
//     a claim of unknown fate
//   heartbeat every poll interval (heartbeats.ts); its answer says whether orders wait
//   when there may be an order, ask for it; if there is one, run it (order-runner.ts: journal,
//     claim, execute under its lease (order-lease.ts), journal the result, then
//     result-reporter.ts: report it, report the observed state of what it touched, drop the
//     journal entry) and ask again at once
//   otherwise wait until the next heartbeat is due, cut short when the stream rings
//
// Beside the loops, the process modules are supervised on their own clock (process-supervision.ts),
// so a module that died runs again while the controller cannot be reached.
// At start, beside the loops, the host proxy's backends are set to the containers running now
// (proxy/route-sync.ts), when the agent drives a proxy.
//
// There may be an order at start, after one, when the heartbeat's answer counts pending orders
// for this node (pull, the floor: it works without the stream), and when the WatchWorkOrders
// stream rings (push, order-watch.ts; it also carries an admin's cancel of the running order).
// An idle agent thus costs the controller one call per interval, not two. When the controller
// cannot be reached it retries with capped exponential backoff and jitter, and never exits on
// its own. It counts what it does (agent-tally.ts: orders by type and result, refused claims,
// lost leases, report retries, watch reconnects, heartbeat failures) and sends the totals with
// every heartbeat; each order it handles is a span, and each call for it a client span under it
// (order-spans.ts).
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { ProcessObservation, ProjectObservation } from "../gen/skipper/v1/resource_pb.js";
import { Backoff } from "../common/backoff.js";
import { AgentTally } from "./agent-tally.js";
import type { AgentConfig } from "./config.js";
import type { ControllerClients } from "./controller-client.js";
import type { DockerHost } from "./engine/docker-host.js";
import { sleep } from "./engine/sleep.js";
import { hostProxyFor } from "./proxy/proxy-settings.js";
import { engineContainers, syncRoutesAtStart } from "./proxy/route-sync.js";
import type { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { ExecutorTable } from "./executors/executor-table.js";
import { Heartbeats } from "./heartbeats.js";
import { HostProbe } from "./host-probe.js";
import type { Journal } from "./journal.js";
import { JournalRecovery } from "./journal-recovery.js";
import { sweepEnvFiles } from "./engine/container-engine.js";
import { monotonicClock, type Clock } from "./lease-keeper.js";
import { OrderRunner } from "./order-runner.js";
import { OrderSpans } from "./order-spans.js";
import { OrderWatch } from "./order-watch.js";
import { credentialHint } from "./credential-hint.js";
import { ResultReporter } from "./result-reporter.js";
import { SwitchingChannel } from "./session/order-channel.js";
import { PushedOrders } from "./session/pushed-orders.js";
import { SessionLoop } from "./session/session-loop.js";
import { superviseOnOwnClock } from "./process-supervision.js";

/** How long transport auto polls before it tries the session again. */
export const SESSION_RETRY_MS = 5 * 60_000;

export interface AgentDeps {
  config: AgentConfig;
  clients: ControllerClients;
  journal: Journal;
  log: Logger;
  /** Finds out what the host can run (engine, compose). */
  probe: () => Promise<DockerHost>;
  /** The executor of each order type this agent runs (others get UNSUPPORTED_ORDER_TYPE). */
  executors: Partial<ExecutorTable>;
  /**
   * The projects this agent manages, as the engine shows them (throws when it cannot tell);
   * without the engine (`engine` false), those that need none, or undefined when one does.
   */
  observe: (engine: boolean) => Promise<ProjectObservation[] | undefined>;
  /** Restarts process modules that died and reports them all (hosts without Docker). */
  supervise?: () => Promise<ProcessObservation[]>;
  /** The clock leases are kept by (default: performance.now() and setTimeout). */
  clock?: Clock;
  /** Where the agent counts what it does (default: a tally of its own). */
  tally?: AgentTally;
  /** Renews the node's client certificate now (when the controller says it is due). */
  renewCertificate?: () => Promise<void>;
  /** Whether `executors` really runs a type, for the capabilities reported (default: the global table). */
  hasExecutor?: (type: WorkOrderType) => boolean;
}

export class Agent {
  // Whether the next round asks for an order (see the top of this file).
  private mayHaveWork = true;
  private readonly backoff = new Backoff();
  private readonly log: Logger;
  private readonly tally: AgentTally;
  private readonly host: HostProbe;
  private readonly heartbeats: Heartbeats;
  private readonly runner: OrderRunner;
  private readonly recovery: JournalRecovery;
  private readonly session: SessionLoop;

  constructor(private readonly deps: AgentDeps) {
    const { config, clients, journal } = deps;
    const log = deps.log.child({ node_id: config.nodeId });
    const clock = deps.clock ?? monotonicClock;
    const tally = deps.tally ?? new AgentTally();
    const spans = new OrderSpans();
    const host = new HostProbe(deps.probe, log);
    const { observe, supervise, hasExecutor } = deps;
    const heartbeats = new Heartbeats({ config, clients, host, tally, log, observe, supervise, hasExecutor });
    const channel = new SwitchingChannel(clients, spans);
    const reporter = new ResultReporter({ nodeId: config.nodeId, clients, channel, journal, tally, spans });
    const runner = new OrderRunner({
      config,
      clients,
      channel,
      journal,
      executors: deps.executors,
      host,
      heartbeats,
      reporter,
      tally,
      spans,
      clock,
      log,
      claimUnsure: () => this.recovery.again(),
    });
    this.recovery = new JournalRecovery({ nodeId: config.nodeId, clients, journal, runner, reporter, tally, spans, clock, log });
    this.log = log;
    this.tally = tally;
    this.host = host;
    this.heartbeats = heartbeats;
    this.runner = runner;
    const pushed = new PushedOrders({ journal, runner, channel, spans, tally, clock, recheckJournal: () => this.recovery.again() });
    this.session = new SessionLoop({
      ...{ config, clients, journal, host, runner, heartbeats, channel, pushed, tally, log },
      recovery: this.recovery,
      renewCertificate: deps.renewCertificate,
    });
  }

  /** Runs until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    await this.deps.journal.open();
    // Containers may have new addresses since the proxy's file was written (a reboot, an engine
    // restart): its backends are set to what runs now, beside the loop (never throws).
    const { proxy, workDir } = this.deps.config;
    // Env files of a container create that a kill interrupted (secret values): gone before any order runs.
    const swept = await sweepEnvFiles(workDir);
    if (swept > 0) this.log.info({ action: "sweep_env_files", count: swept }, "removed env files an interrupted run left");
    if (proxy) void syncRoutesAtStart(hostProxyFor(proxy), workDir, engineContainers(), this.log, { signal });
    const supervising = this.deps.supervise
      ? superviseOnOwnClock(this.deps.supervise, Math.min(this.deps.config.pollIntervalMs, 5000), this.log, signal)
      : undefined;
    const { transport } = this.deps.config;
    if (transport === "poll") await this.poll(signal);
    else if (transport === "session") await this.session.run(signal, false);
    else {
      while ((await this.session.run(signal, true)) === "fallback") {
        const until = performance.now() + SESSION_RETRY_MS;
        await this.poll(signal, () => performance.now() >= until);
        if (!signal.aborted) this.log.info({ action: "session_retry", result: "trying" }, "trying the session again");
      }
    }
    await supervising;
    this.log.info({ action: "stop" }, "agent stopped");
  }

  /** The polling loop, until `signal` aborts or, between rounds, `enough` says so. */
  private async poll(signal: AbortSignal, enough: () => boolean = () => false): Promise<void> {
    const watchStop = new AbortController();
    const stopWatch = () => watchStop.abort();
    signal.addEventListener("abort", stopWatch, { once: true });
    const watch = this.deps.config.watch
      ? new OrderWatch(
          this.deps.clients.nodes,
          this.deps.config.nodeId,
          this.log,
          (o) => o.cancelRequest && this.runner.cancel(o.id, o.cancelRequest.reason),
          () => this.tally.count("watchReconnects"),
        )
      : undefined;
    const watching = watch?.run(watchStop.signal);
    this.mayHaveWork = true;
    while (!signal.aborted && !enough()) {
      try {
        await this.round(watch, signal);
      } catch (e) {
        if (signal.aborted) break;
        await this.waitToRetry(e, signal);
      }
    }
    stopWatch();
    signal.removeEventListener("abort", stopWatch);
    await watching;
  }

  /** One round of the loop (the top of this file). */
  private async round(watch: OrderWatch | undefined, signal: AbortSignal): Promise<void> {
    await this.host.refresh();
    if (this.recovery.needed) await this.recovery.run(signal);
    if (this.heartbeats.due() && (await this.heartbeats.beat()) > 0) this.mayHaveWork = true;
    if (this.mayHaveWork) {
      const next = await this.deps.clients.nodes.getNextWorkOrder({ nodeId: this.deps.config.nodeId });
      if (next.workOrder) {
        this.backoff.reset();
        await this.runner.handle(next.workOrder, signal);
        return;
      }
      this.mayHaveWork = false;
    }
    this.backoff.reset();
    // Until the next heartbeat is due, cut short when the stream rings.
    const due = this.heartbeats.untilDue();
    if (await (watch ? watch.wait(due, signal) : sleep(due, signal).then(() => false))) this.mayHaveWork = true;
  }

  /** After a failed round: one line, then the backoff's delay. */
  private async waitToRetry(e: unknown, signal: AbortSignal): Promise<void> {
    const delay = this.backoff.next();
    const err = ConnectError.from(e);
    if (err.code === Code.Unauthenticated) {
      // Retrying does not mend a refused credential: say what would.
      this.log.error(
        {
          action: "credential_refused",
          result: "UNAUTHENTICATED",
          metadata: { retry_in_ms: delay, attempt: this.backoff.attempts, message: err.rawMessage },
        },
        `${credentialHint(this.deps.config, err.rawMessage)}; retrying in ${delay} ms`,
      );
      await sleep(delay, signal);
      return;
    }
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

// The node's heartbeats. A full one (the loop's, every poll interval) reports the host's
// capabilities, the agent's counters (agent-tally.ts), the projects the engine shows (for drift
// detection) and the process modules, which it supervises on the way (a module that died is
// started again at most one interval later); its answer counts the orders waiting for this node.
// While an order runs, lighter ones keep the node alive (keepBeating): liveness, capabilities and
// the last processes seen, no observation. Every report says what the agent's updater does
// (AgentUpdateReport, updater/update-report.ts), and the first one the controller accepts tells
// the updater this version works (confirmed.json). When the updater's state.json changes (an
// update CONFIRMED, ROLLED_BACK, FAILED...), a report goes out at once: on the session when one
// carries the heartbeats (onUpdaterMoved), otherwise a unary one out of turn.
import { proxyCapability } from "./proxy/proxy-settings.js";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { create } from "@bufbuild/protobuf";
import { HeartbeatRequestSchema, type HeartbeatRequest } from "../gen/skipper/v1/node_service_pb.js";
import {
  NodeCapabilitiesSchema,
  type AgentCounters,
  type ProcessObservation,
  type ProjectObservation,
} from "../gen/skipper/v1/resource_pb.js";
import type { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { agentCapabilities } from "./capabilities.js";
import type { AgentTally } from "./agent-tally.js";
import { AGENT_VERSION } from "./agent-version.js";
import type { AgentConfig } from "./config.js";
import type { ControllerClients } from "./controller-client.js";
import type { DockerHost } from "./engine/docker-host.js";
import type { HostProbe } from "./host-probe.js";
import { UpdaterLink } from "./updater/update-report.js";

export interface HeartbeatDeps {
  config: AgentConfig;
  clients: ControllerClients;
  host: HostProbe;
  tally: AgentTally;
  log: Logger;
  /**
   * The projects this agent manages, as the engine shows them (throws when it cannot tell);
   * without the engine (`engine` false), those that need none, or undefined when one does.
   */
  observe: (engine: boolean) => Promise<ProjectObservation[] | undefined>;
  /** Restarts process modules that died and reports them all (hosts without Docker). */
  supervise?: () => Promise<ProcessObservation[]>;
  /**
   * Whether this agent's executor table really runs an order type (a refused type counts as
   * absent); default: the agent's global table.
   */
  hasExecutor?: (type: WorkOrderType) => boolean;
  /** The agent's skippy-updater; default: as this process's environment says (SKIPPY_UPDATER_DIR). */
  updater?: UpdaterLink;
}

export class Heartbeats {
  // performance.now() of the last full heartbeat (with what runs here), and of the last beat of
  // any kind: a monotonic clock, so a wall-clock step cannot stall the loop.
  private lastHeartbeat = -Infinity;
  private lastBeat = -Infinity;
  // What the last full heartbeat reported of process modules (heartbeats during an order repeat it).
  private lastProcesses: ProcessObservation[] = [];
  // Whether an order runs (between keepBeating and its stop).
  private duringOrder = false;
  // Whether a session carries the heartbeats now (its own keepalives; see onSession).
  private sessionCarries = false;
  private readonly startedAt = Date.now();

  // An SSH node's reports (a relay's, host.ssh set) say nothing of the relay's own updater.
  private readonly updater: UpdaterLink;
  // Whether the reports are of this agent's own host (not an SSH node it relays).
  private ownNode = true;
  // The watch of state.json (started with the first report; its timer does not hold the process
  // up), the session's wish to hear of a change, and whether a unary report of one is on its way.
  private stopWatch: (() => void) | undefined;
  private sessionHears: (() => void) | undefined;
  private reportingMove = false;

  constructor(private readonly deps: HeartbeatDeps) {
    this.updater =
      deps.updater ??
      UpdaterLink.fromEnv(process.env, process.argv[1], (what, e) =>
        deps.log.warn({ action: "updater_link", result: "error", metadata: { message: e.message } }, `could not ${what}: ${e.message}`),
      );
  }

  /** Whether the loop's full heartbeat is due. */
  due(): boolean {
    return performance.now() - this.lastHeartbeat >= this.deps.config.pollIntervalMs;
  }

  /** Milliseconds until the loop's full heartbeat is due (0: now). */
  untilDue(): number {
    return Math.max(0, this.lastHeartbeat + this.deps.config.pollIntervalMs - performance.now());
  }

  /**
   * Heartbeats while an order runs (a deploy can take minutes; without them the node would be
   * judged offline meanwhile). These report liveness and capabilities only: they do not count as
   * the loop's full heartbeat, so the loop reports what runs before it asks for another order.
   * Returns the stop.
   */
  keepBeating(log: Logger): () => void {
    this.duringOrder = true;
    let sending = false;
    const timer = setInterval(
      () => {
        if (sending || this.sessionCarries || performance.now() - this.lastBeat < this.deps.config.pollIntervalMs) return;
        sending = true;
        this.beat({ observe: false })
          .catch((e: unknown) =>
            log.debug(
              { action: "heartbeat", result: Code[ConnectError.from(e).code], metadata: { message: (e as Error).message } },
              "heartbeat during an order failed",
            ),
          )
          .finally(() => (sending = false));
      },
      Math.max(100, Math.floor(this.deps.config.pollIntervalMs / 4)),
    );
    return () => {
      clearInterval(timer);
      this.duringOrder = false;
    };
  }

  /** Sends a heartbeat; returns how many orders wait for this node. */
  async beat(opts: { observe: boolean } = { observe: true }): Promise<number> {
    await this.refreshUpdater();
    if (!opts.observe) return this.send(await this.deps.host.refresh(), undefined, this.lastProcesses);
    const host = await this.deps.host.refresh();
    const projects = await this.observeProjects(host);
    const processes = await this.superviseProcesses();
    this.lastProcesses = processes;
    return this.send(host, projects, processes);
  }

  // Supervision rides the heartbeat: a module that died is started again at most one interval later.
  private superviseProcesses(): Promise<ProcessObservation[]> {
    return (this.deps.supervise?.() ?? Promise.resolve([])).catch((e: unknown) => {
      this.deps.log.warn(
        { action: "supervise", result: "error", metadata: { message: (e as Error).message } },
        "could not supervise process modules",
      );
      return [];
    });
  }

  // What runs here, for drift detection. When the engine cannot tell, say nothing (undefined)
  // rather than "nothing runs"; projects of process modules only need no engine to be told.
  private async observeProjects(host: DockerHost): Promise<ProjectObservation[] | undefined> {
    try {
      return await this.deps.observe(host.capabilities.dockerAvailable);
    } catch (e) {
      this.deps.log.warn({ action: "observe", result: "error", metadata: { message: (e as Error).message } }, "could not observe projects");
      return undefined;
    }
  }

  /**
   * The full report as a session sends it (session/session-heartbeats.ts): what the unary
   * heartbeat carries, the engine observed unless `observe` is false (an order runs), with the
   * session's heartbeat interval.
   */
  async report(opts: { observe: boolean; intervalMs: number }): Promise<HeartbeatRequest> {
    await this.refreshUpdater();
    const host = await this.deps.host.refresh();
    const projects = opts.observe ? await this.observeProjects(host) : undefined;
    if (opts.observe) this.lastProcesses = await this.superviseProcesses();
    const req = this.request(host, projects, this.lastProcesses, true);
    // Liveness is judged at the session's interval, not the poll interval.
    req.heartbeatIntervalMs = BigInt(opts.intervalMs);
    return req;
  }

  /** A report sent on a session went out with `counters`: as an answered unary heartbeat counts. */
  sentOnSession(counters: AgentCounters | undefined): void {
    if (counters) this.deps.tally.acknowledged(counters);
    // A report goes on a session only once the controller welcomed it: accepted.
    this.accepted();
  }

  // The controller accepted this agent: the updater may count the version as working.
  private accepted(): void {
    if (this.ownNode) void this.updater.accepted();
  }

  /**
   * While a session carries the heartbeats, a change of the updater's state calls `listener` (the
   * session's beat out of turn) instead of a unary heartbeat. Returns the stop.
   */
  onUpdaterMoved(listener: () => void): () => void {
    this.sessionHears = listener;
    return () => {
      if (this.sessionHears === listener) this.sessionHears = undefined;
    };
  }

  // What the updater does, read again for a report; the watch starts with the first.
  private async refreshUpdater(): Promise<void> {
    await this.updater.refresh();
    this.stopWatch ??= this.updater.watch(() => this.updaterMoved());
  }

  // state.json changed since the last report: report it now rather than in up to one interval.
  private updaterMoved(): void {
    if (!this.ownNode) return;
    if (this.sessionCarries) {
      this.sessionHears?.();
      return;
    }
    if (this.reportingMove) return;
    this.reportingMove = true;
    void (async () => {
      await this.refreshUpdater();
      // Not the loop's full heartbeat: nothing observed, so it does not put that one off.
      await this.send(await this.deps.host.refresh(), undefined, this.lastProcesses, false);
    })()
      .catch((e: unknown) =>
        this.deps.log.debug(
          { action: "heartbeat", result: Code[ConnectError.from(e).code], metadata: { message: (e as Error).message } },
          "the report of the updater's new state failed",
        ),
      )
      .finally(() => (this.reportingMove = false));
  }

  /** While a session carries the heartbeats, keepBeating sends none of its own. */
  set onSession(on: boolean) {
    this.sessionCarries = on;
  }

  // `onSession`: the report goes over a session, the only transport a terminal opens on.
  private request(
    host: DockerHost,
    projects: ProjectObservation[] | undefined,
    processes: ProcessObservation[],
    onSession = false,
  ): HeartbeatRequest {
    const { config, tally } = this.deps;
    const capabilities = create(NodeCapabilitiesSchema, {
      ...host.capabilities,
      allowedCommands: config.allowCommands,
      allowedProcessSources: config.allowProcessSources,
      proxy: proxyCapability(config.proxy),
    });
    this.ownNode = host.ssh === undefined;
    const supervised = this.ownNode && this.updater.supervised;
    capabilities.capabilities = agentCapabilities(capabilities, this.deps.hasExecutor, supervised).filter(
      (c) => onSession || c !== "exec.terminal",
    );
    return create(HeartbeatRequestSchema, {
      nodeId: config.nodeId,
      agentVersion: AGENT_VERSION,
      capabilities,
      labels: config.labels,
      uptimeSeconds: BigInt(Math.floor((Date.now() - this.startedAt) / 1000)),
      heartbeatIntervalMs: BigInt(config.pollIntervalMs),
      projects: projects ?? [],
      projectsReported: projects !== undefined,
      processes,
      agentCounters: tally.snapshot(),
      ssh: host.ssh,
      agentUpdate: this.ownNode ? this.updater.report() : undefined,
    });
  }

  // `projects` undefined: not reported (the controller keeps what it had). `full`: counts as the
  // loop's full heartbeat.
  private async send(
    host: DockerHost,
    projects: ProjectObservation[] | undefined,
    processes: ProcessObservation[],
    full = projects !== undefined || !this.duringOrder,
  ): Promise<number> {
    const { tally } = this.deps;
    const req = this.request(host, projects, processes);
    const res = await this.deps.clients.nodes.heartbeat(req).catch((e: unknown) => {
      tally.count("heartbeatFailures");
      throw e;
    });
    tally.acknowledged(req.agentCounters!);
    this.accepted();
    this.lastBeat = performance.now();
    if (full) this.lastHeartbeat = this.lastBeat;
    return res.pendingWorkOrders;
  }
}

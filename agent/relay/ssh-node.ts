// One SSH node its relay serves: the node's SSH files and connection (ssh-files.ts, ssh-link.ts),
// the bridge to its engine (engine-bridge.ts), and an Agent for it, the agent's own loop with
// the node's id, its own journal and work directory under the relay's, the relay's controller
// clients acting for the node (x-skipper-relay-for), the SSH node's executors
// (ssh-executors.ts) and a probe that checks the connection before it probes the engine. The
// whole Agent runs inside withEngineEnv, so every engine command it starts goes to the node.
// Its process modules live on the node (ssh-process-executors.ts): artifacts from the relay's
// --allow-process-source, and each heartbeat reports the node's modules, observed with one
// command (the last seen while the connection is down).
import { create } from "@bufbuild/protobuf";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { RelayTarget } from "../../gen/skipper/v1/node_service_pb.js";
import {
  ComposeVariant,
  NodeCapabilitiesSchema,
  SshTargetState,
  type ProcessObservation,
  type SshTargetStatus,
} from "../../gen/skipper/v1/resource_pb.js";
import { Agent } from "../agent.js";
import { AgentTally } from "../agent-tally.js";
import type { AgentConfig } from "../config.js";
import type { ControllerClients } from "../controller-client.js";
import { probeDockerHost, type DockerHost } from "../engine/docker-host.js";
import { withEngineEnv } from "../engine/engine-env.js";
import { observeForHeartbeat } from "../engine/project-state.js";
import { executors } from "../executors/registry.js";
import { Journal } from "../journal.js";
import { EngineBridge } from "./engine-bridge.js";
import { RemoteProcesses, sshScriptRunner } from "./remote-processes.js";
import { sshProcessExecutors, superviseOnNode } from "./ssh-process-executors.js";
import { sshExecutors, sshRuns } from "./ssh-executors.js";
import { removeSshFiles, targetProblem, writeSshFiles, type SshFiles } from "./ssh-files.js";
import { type Limiter, SshLink } from "./ssh-link.js";

// The shortest heartbeat interval of an SSH node.
const MIN_POLL_MS = 1000;

export interface SshNodeDeps {
  /** The relay's own configuration. */
  relay: AgentConfig;
  /** The relay's clients (relayFor makes the node's). */
  clients: ControllerClients;
  log: Logger;
  handshakes: Limiter;
}

export class SshNode {
  private readonly stop = new AbortController();
  private running: Promise<void> | undefined;
  private link: SshLink | undefined;
  private bridge: EngineBridge | undefined;
  private files: SshFiles | undefined;
  // The connection as the last probe found it, and the node's modules as last observed.
  private ssh: SshTargetStatus | undefined;
  private processes: ProcessObservation[] = [];
  private superviseFailed = false;
  private observing: Promise<ProcessObservation[]> | undefined;
  private observedAt = Number.NEGATIVE_INFINITY;
  // Bumped when a process order ends: what was observed before (or while) it ran is not reused.
  private generation = 0;
  private observedGeneration = -1;

  constructor(
    private readonly deps: SshNodeDeps,
    /** What ListRelayTargets said of the node (with its key). */
    readonly target: RelayTarget,
  ) {}

  /** Writes the node's files, opens its bridge and starts its Agent. */
  async start(): Promise<void> {
    const { relay, clients } = this.deps;
    const t = this.target;
    const nodeId = t.nodeId;
    const log = this.deps.log.child({ relayed_node_id: nodeId });
    const dir = join(relay.stateDir, "relay", nodeId);
    const ssh = t.ssh!;
    const problem = t.keyProblem || targetProblem(ssh) || (t.privateKey === "" ? "no key was handed out" : "");
    let files: SshFiles | undefined;
    if (!problem) files = await writeSshFiles(join(dir, "ssh"), ssh, t.privateKey);
    this.files = files;
    const link = new SshLink(ssh, relay.nodeId, files, problem, this.deps.handshakes);
    this.link = link;
    const env: Record<string, string> = {};
    if (files) {
      const bridge = new EngineBridge(join(files.socketDir, "docker.sock"), (...remote) => link.args(...remote), log);
      await bridge.start();
      this.bridge = bridge;
      env.DOCKER_HOST = bridge.dockerHost;
    }
    // Without a bridge (no key), an address that answers nothing: never the relay's own engine.
    env.DOCKER_HOST ??= `unix://${join(dir, "no-engine.sock")}`;
    const config: AgentConfig = {
      ...relay,
      nodeId,
      stateDir: dir,
      workDir: join(relay.workDir, "relay", nodeId),
      labels: {},
      // Each heartbeat observes the node's engine over SSH: at most once a second.
      pollIntervalMs: Math.max(relay.pollIntervalMs, MIN_POLL_MS),
      transport: "poll",
      allowCommands: [],
      // Artifacts are fetched by the relay, from the sources its operator allowed.
      allowProcessSources: relay.allowProcessSources,
      proxy: undefined,
      metricsListen: undefined,
    };
    const all = executors();
    const remote = new RemoteProcesses(
      sshScriptRunner((line) => link.args(line)),
      config.workDir,
    );
    const own = sshProcessExecutors(remote, config.workDir, { changed: () => this.generation++ });
    const agent = new Agent({
      config,
      clients: clients.relayFor!(nodeId),
      journal: new Journal(dir),
      log,
      probe: () => this.probe(ssh.address),
      executors: sshExecutors(all, nodeId, () => link.check(), own),
      // Capabilities come from what this table runs: the refused kinds are not offered.
      hasExecutor: (type) => sshRuns(all, type),
      observe: (engine) => observeForHeartbeat(config.workDir, engine),
      supervise: () => this.supervise(remote, config.workDir, log),
      tally: new AgentTally(),
    });
    log.info({ action: "relay_start", node_id: nodeId }, `relaying SSH node ${nodeId} (${ssh.user}@${ssh.address}:${ssh.port || 22})`);
    this.running = withEngineEnv(env, () => agent.run(this.stop.signal));
  }

  /**
   * Stops the node's Agent, its bridge and its master connection. `forget`: the node left this
   * relay, so its files go too (its key first of all, and its journal: the orders are no longer
   * this relay's to report).
   */
  async close(opts: { forget?: boolean } = {}): Promise<void> {
    this.stop.abort();
    await this.running?.catch(() => undefined);
    await this.bridge?.stop();
    await this.link?.close();
    if (this.files) await removeSshFiles(this.files, { all: opts.forget === true });
    if (opts.forget) await rm(join(this.deps.relay.stateDir, "relay", this.target.nodeId), { recursive: true, force: true });
  }

  // The node's modules; while the connection is down (or the observation fails) the last seen,
  // told once per failure streak rather than at every beat. The Agent asks on its own clock and
  // with each heartbeat: one command on the node serves both (at most one per MIN_POLL_MS).
  private supervise(remote: RemoteProcesses, lockKey: string, log: Logger): Promise<ProcessObservation[]> {
    if (this.ssh?.state !== SshTargetState.CONNECTED) return Promise.resolve(this.processes);
    const generation = this.generation;
    if (this.observing && this.observedGeneration === generation) return this.observing;
    if (performance.now() - this.observedAt < MIN_POLL_MS && this.observedGeneration === generation) return Promise.resolve(this.processes);
    this.observedGeneration = generation;
    const observing: Promise<ProcessObservation[]> = superviseOnNode(remote, lockKey, log)
      .then(
        (seen) => {
          // An order that ended meanwhile may have changed what this saw: the next call looks again.
          if (this.generation === generation) this.processes = seen;
          this.superviseFailed = false;
        },
        (e: unknown) => {
          if (!this.superviseFailed)
            log.warn(
              { action: "supervise", result: "error", metadata: { message: (e as Error).message } },
              "could not observe the node's process modules",
            );
          this.superviseFailed = true;
        },
      )
      .then(() => {
        if (this.observing === observing) this.observing = undefined;
        this.observedAt = performance.now();
        return this.processes;
      });
    this.observing = observing;
    return observing;
  }

  // The connection first: an engine behind a refused host key is not probed at all.
  private async probe(address: string): Promise<DockerHost> {
    const ssh = await this.link!.check();
    this.ssh = ssh;
    if (ssh.state !== SshTargetState.CONNECTED) {
      const capabilities = create(NodeCapabilitiesSchema, {
        dockerAvailable: false,
        composeVariant: ComposeVariant.NONE,
        hostname: address,
        message: `ssh: ${ssh.message}`,
      });
      return { capabilities, ssh };
    }
    const host = await probeDockerHost();
    // What probeDockerHost reads of the local machine is the relay's, not the node's.
    const capabilities = create(NodeCapabilitiesSchema, { ...host.capabilities, hostname: address, os: "", arch: "", systemd: false });
    return { ...host, capabilities, ssh };
  }
}

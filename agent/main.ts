#!/usr/bin/env node
// skippy: the Skipper agent. Reads configuration, then pulls and applies work orders until stopped;
// `skippy install` sets a host up to run it as a service instead (install.ts); `skippy join`
// makes the host a node in one step: pin, verified bundle, enrollment, install, start (join.ts);
// `skippy updater [flags]` runs skippy-updater, which runs the agent with those flags as its child
// and switches its versions (updater/updater.ts; the service unit runs this).
import { startTracing } from "../common/tracing.js";
import { readFileSync } from "node:fs";
import { createLogger } from "../common/logging/logger.js";
import { Agent } from "./agent.js";
import { AGENT_VERSION } from "./agent-version.js";
import { loadAgentConfig, USAGE, type AgentConfig } from "./config.js";
import { installCommand, ownBundleFile } from "./install.js";
import { joinCommand } from "./join.js";
import { updaterCommand } from "./updater/updater.js";
import { createControllerClients, type AgentCredential } from "./controller-client.js";
import { CertificateKeeper, chooseCredential } from "./certificate-keeper.js";
import { probeDockerHost } from "./engine/docker-host.js";
import { executors } from "./executors/registry.js";
import { observeForHeartbeat } from "./engine/project-state.js";
import { Journal } from "./journal.js";
import { superviseAll } from "./process/supervise-all.js";
import { AgentTally } from "./agent-tally.js";
import { listenForMetrics, type MetricsListener } from "./metrics-listener.js";
import { RelayLoop } from "./relay/relay-loop.js";

async function main(): Promise<void> {
  if (process.argv[2] === "install") {
    process.exitCode = await installCommand(process.argv.slice(3));
    return;
  }
  if (process.argv[2] === "updater") {
    process.exitCode = await updaterCommand(process.argv.slice(3), ownBundleFile());
    return;
  }
  if (process.argv[2] === "join") {
    process.exitCode = await joinCommand(process.argv.slice(3));
    return;
  }
  let config: AgentConfig | "help";
  try {
    config = loadAgentConfig(process.argv.slice(2), process.env, (p) => readFileSync(p, "utf8"));
  } catch (e) {
    process.stderr.write(`skippy: ${(e as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (config === "help") {
    process.stdout.write(USAGE);
    return;
  }
  const cfg = config;
  const { logger, close } = createLogger({ service: "skippy", level: cfg.logLevel });
  logger.info(
    {
      action: "start",
      node_id: cfg.nodeId,
      metadata: {
        version: AGENT_VERSION,
        controller: cfg.controllerUrl,
        state_dir: cfg.stateDir,
        work_dir: cfg.workDir,
        poll_interval_ms: cfg.pollIntervalMs,
        labels: cfg.labels,
      },
    },
    `skippy ${AGENT_VERSION} starting for node ${cfg.nodeId}`,
  );
  // Each order's run is a span in the order's trace, exported when OTEL_EXPORTER_OTLP_ENDPOINT is set.
  const stopTracing = await startTracing("skippy");
  // What the agent does, counted from now: sent with every heartbeat, and served when asked to.
  const tally = new AgentTally();
  let metrics: MetricsListener | undefined;
  if (cfg.metricsListen) {
    const at = cfg.metricsListen;
    try {
      metrics = await listenForMetrics(at, tally, AGENT_VERSION, logger);
    } catch (e) {
      const message = `--metrics-listen ${at.host}:${at.port}: cannot listen there: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
      logger.error({ action: "metrics_listen", result: "error", node_id: cfg.nodeId, metadata: { message } }, message);
      close();
      process.stderr.write(`skippy: ${message}\n`);
      process.exit(2);
    }
  }
  const stop = new AbortController();
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.once(sig, () => {
      logger.info({ action: "shutdown", metadata: { signal: sig } }, "stopping after the current step");
      stop.abort();
    });
  }
  const clientsWith = (credential: AgentCredential) =>
    createControllerClients({ baseUrl: cfg.controllerUrl, credential, caFile: cfg.caFile, wire: cfg.wire });
  let chosen: Awaited<ReturnType<typeof chooseCredential>>;
  try {
    chosen = await chooseCredential(cfg, () => clientsWith({ none: true }), logger, stop.signal);
  } catch (e) {
    logger.error(
      { action: "start", result: "error", node_id: cfg.nodeId, metadata: { message: (e as Error).message } },
      (e as Error).message,
    );
    close();
    process.stderr.write(`skippy: ${(e as Error).message}\n`);
    process.exit(2);
  }
  const clients = clientsWith(chosen.credential);
  const keeper = chosen.identity ? new CertificateKeeper(chosen.identity, { clients, stateDir: cfg.stateDir, log: logger }) : undefined;
  const agent = new Agent({
    config: cfg,
    clients,
    journal: new Journal(cfg.stateDir),
    log: logger,
    probe: probeDockerHost,
    executors: executors(),
    observe: (engine) => observeForHeartbeat(cfg.workDir, engine),
    supervise: () => superviseAll(cfg.workDir, { log: logger }),
    tally,
    renewCertificate: keeper ? () => keeper.renewNow() : undefined,
  });
  // A keeper that stops on its own found the certificate expired: the agent stops too, non-zero,
  // so that its supervisor restarts it (and an enrollment token, when configured, enrolls it again).
  const renewing = keeper?.run(stop.signal).then(() => {
    if (stop.signal.aborted) return;
    process.exitCode = 1;
    stop.abort();
  });
  // A relay serves its SSH nodes beside its own loop (agent/relay/).
  const relaying = cfg.relay ? new RelayLoop({ config: cfg, clients, log: logger }).run(stop.signal) : undefined;
  await agent.run(stop.signal);
  stop.abort();
  await relaying;
  await renewing;
  await metrics?.close();
  await stopTracing();
  close();
  process.exit(process.exitCode ?? 0);
}

main().catch((e) => {
  process.stderr.write(`skippy: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});

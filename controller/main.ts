#!/usr/bin/env node
// skipper-controller: reads configuration, prepares TLS, builds the controller and listens.
import { startTracing, tracingConfigured } from "../common/tracing.js";
import { loadConfig, USAGE, type ControllerConfig } from "./base/config.js";
import { createLogger, type Logger } from "../common/logging/logger.js";
import { build, type BuildOptions, type Controller } from "./server/build.js";
import { serve, type ServeOptions } from "./server/listener.js";
import { ensureTlsMaterial } from "./tls/tls-material.js";
import { ensureClientCa } from "./tls/client-ca.js";
import { SecretKeyRing } from "./tls/secret-key-ring.js";
import { currentTicketKey } from "./tls/session-tickets.js";
import { VERSION } from "./base/version.js";
import { PostgresStore } from "./store/postgres/pg-store.js";
import { PgCoordination } from "./store/postgres/pg-coordination.js";
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";

// Every durable write ends in fsyncs, which run on libuv's thread pool (4 threads by default);
// with more threads, concurrent requests' fsyncs overlap instead of queueing. The pool starts on
// first use, which is after this line. An operator's own setting wins.
process.env.UV_THREADPOOL_SIZE ??= "16";

async function main(): Promise<void> {
  let config: ControllerConfig | "help";
  try {
    config = loadConfig(process.argv.slice(2), process.env);
  } catch (e) {
    process.stderr.write(`skipper-controller: ${(e as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (config === "help") {
    process.stdout.write(USAGE);
    return;
  }
  const { logger, close: closeLog } = createLogger({
    service: "skipper-controller",
    dataDir: config.dataDir,
    level: config.logLevel,
  });
  const shared = config.storeUrl ? sharedStore(config.storeUrl, config.storeConnections ?? 30, logger) : {};
  const keys = await loadKeys(config, logger);
  // Spans go to an OTLP collector when OTEL_EXPORTER_OTLP_ENDPOINT says where (common/tracing.ts).
  const stopTracing = await startTracing("skipper-controller");
  if (tracingConfigured()) logger.info({ action: "tracing", result: "ok" }, "exporting spans over OTLP/HTTP");
  const controller = await build({
    dataDir: config.dataDir,
    ...shared,
    // Another controller may already run the loops this one stopped: start afresh as a follower.
    onLeadershipLost: () => {
      logger.error({ action: "shutdown", result: "error" }, "exiting: leadership was lost; a restarted controller rejoins as a follower");
      closeLog();
      process.exit(1);
    },
    logger,
    ...buildSettings(config),
    deferLoops: true,
    clientCa: keys.clientCa,
    tls: keys.tls,
    tlsCaPem: keys.caPem,
    agentBundle: config.agentBundle,
    agentSigningKey: config.agentSigningKey,
    keyRing: keys.keyRing,
    registryCaPem: await registryCa(config.registryCaFile),
  });
  const serving = await listen(controller, config, keys.tls, logger);
  logListening(logger, config, serving.url, controller, keys.caFile);
  // Recovery ran in build(); the loops' first rounds (a sweep reads every resource) wait until now.
  controller.start();
  logNotices(logger, config, serving.url, controller, keys.caFile);
  stopOnSignals(logger, async () => {
    await serving.close();
    await controller.close();
    await stopTracing();
    closeLog();
  });
}

/** The keys this controller holds: the client CA, the secret key ring, and its TLS certificate. */
async function loadKeys(config: ControllerConfig, logger: Logger) {
  // The CA that signs enrolled nodes' certificates; none without TLS (no enrollment then).
  const clientCa = config.insecureHttp
    ? undefined
    : await ensureClientCa({
        dataDir: config.dataDir,
        certFile: config.clientCaCert,
        keyFile: config.clientCaKey,
        onInfo: (msg, meta) => logger.info({ action: "tls", metadata: meta }, msg),
      });
  // The keys that seal secrets at rest (secret values, webhook URLs).
  const keyRing = await SecretKeyRing.load({ dataDir: config.dataDir, keysText: config.secretKeys, keysFile: config.secretKeysFile });
  if (config.storeUrl && keyRing.source.kind === "generated") {
    // Each controller would seal with keys the others do not hold.
    logger.warn(
      { action: "secrets", metadata: { key_ring: keyRing.source.file } },
      "several controllers on one database must share one secret key ring: set SKIPPER_SECRET_KEYS_FILE (or SKIPPER_SECRET_KEYS) to the same keys on each, or secrets sealed by one cannot be opened by another",
    );
  }
  let tls: ServeOptions["tls"];
  let caFile: string | undefined;
  let caPem: string | undefined;
  if (!config.insecureHttp) {
    const material = await ensureTlsMaterial({
      dataDir: config.dataDir,
      certFile: config.tlsCert,
      keyFile: config.tlsKey,
      hostnames: config.tlsHostnames,
      onInfo: (msg, meta) => logger.info({ action: "tls", metadata: meta }, msg),
    });
    // The ticket key lives beside the other keys, so agents resume their sessions after a restart.
    const ticketKey = () =>
      currentTicketKey(config.dataDir).catch((err: unknown) => {
        logger.warn({ action: "tls", err }, "could not read or replace the TLS ticket key (tls/ticket.key): the one in use stays");
        throw err;
      });
    tls = { cert: material.cert, key: material.key, clientCa: clientCa?.cert, ticketKey };
    caFile = material.caFile;
    caPem = material.caCert;
  }
  return { clientCa, keyRing, tls, caFile, caPem };
}

/** --registry-ca-file's PEM, read once at start (a file that is no PEM certificate stops the start). */
async function registryCa(file: string | undefined): Promise<string | undefined> {
  if (!file) return undefined;
  const pem = await readFile(file, "utf8");
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) throw new Error(`--registry-ca-file ${file} holds no PEM certificate`);
  return pem;
}

/** The settings of build() that come straight from the configuration. */
function buildSettings(config: ControllerConfig): Partial<BuildOptions> {
  return {
    adminToken: config.adminToken,
    resetAdminToken: config.resetAdminToken,
    reconcileIntervalMs: config.reconcileIntervalMs,
    promotionIntervalMs: config.promotionIntervalMs,
    processIntervalMs: config.processIntervalMs,
    leaseMs: config.leaseMs,
    eventRetentionMs: config.eventRetentionMs,
    workOrderRetentionMs: config.workOrderRetentionMs,
    auditRetentionMs: config.auditRetentionMs,
    webhooks: { retryForMs: config.webhookRetryMs, backoffBaseMs: config.webhookBackoffMs },
    maxRequestBytes: config.maxRequestBytes,
    maxWatchStreamsPerNode: config.maxWatchStreamsPerNode,
    metricsOpen: config.metricsOpen,
    allowGitFileUrls: config.allowGitFileUrls,
  };
}

/** Puts the controller on its port; a failed listen still shows the admin token this start minted. */
async function listen(controller: Controller, config: ControllerConfig, tls: ServeOptions["tls"], logger: Logger) {
  try {
    return await serve(controller.handler, {
      host: config.host,
      port: config.port,
      tls,
      limits: definedOnly(config.limits),
      onRefusedConnection: refusalReporter(logger),
      onWaitingConnection: lineReporter(logger),
    });
  } catch (e) {
    // The token minted by this start is stored (as a hash) already: shown now, or never.
    if (controller.generatedAdminToken) printAdminToken(controller.generatedAdminToken);
    throw new Error(`cannot listen on ${config.host}:${config.port}: ${(e as Error).message}`);
  }
}

function logListening(logger: Logger, config: ControllerConfig, url: string, controller: Controller, caFile: string | undefined): void {
  logger.info(
    {
      action: "listen",
      result: "ok",
      metadata: {
        url,
        data_dir: config.dataDir,
        tls: !config.insecureHttp,
        ca_file: caFile,
        store: controller.store.backend,
        controller_id: controller.coordination.controllerId,
        version: VERSION,
      },
    },
    `skipper-controller listening on ${url}`,
  );
}

/** What an operator should know once the controller serves: clear text, the CA file, open metrics, the admin token. */
function logNotices(logger: Logger, config: ControllerConfig, url: string, controller: Controller, caFile: string | undefined): void {
  if (config.insecureHttp) {
    logger.warn({ action: "listen", metadata: { url } }, "TLS is off (SKIPPER_INSECURE_HTTP): tokens cross the network in clear text");
  } else if (caFile) {
    logger.info({ action: "tls", metadata: { ca_file: caFile } }, `clients trust the controller with: --cacert ${caFile}`);
  }
  if (config.metricsOpen) {
    logger.warn({ action: "listen", metadata: { path: "/metrics" } }, "GET /metrics answers without a credential (SKIPPER_METRICS_OPEN)");
  }
  if (controller.generatedAdminToken) printAdminToken(controller.generatedAdminToken);
  else if (!config.adminToken) {
    logger.info(
      { action: "auth", metadata: { admin_token: "stored hash" } },
      "admin calls take the token printed at first start (SKIPPER_ADMIN_TOKEN); lost it? restart with --reset-admin-token",
    );
  }
}

/** On SIGINT or SIGTERM, once: `close` everything and exit 0, or exit 1 after STOP_DEADLINE_MS. */
function stopOnSignals(logger: Logger, close: () => Promise<void>): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ action: "shutdown", metadata: { signal } }, "shutting down");
    // A stop always ends: whatever still waits (a store, a lock) after this long is left behind.
    setTimeout(() => {
      logger.error({ action: "shutdown", result: "error" }, `still stopping after ${STOP_DEADLINE_MS} ms; exiting anyway`);
      process.exit(1);
    }, STOP_DEADLINE_MS).unref();
    await close();
    process.exit(0);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
}

/** How long a stop may take before the process exits regardless. */
const STOP_DEADLINE_MS = 20_000;

main().catch((e: unknown) => {
  process.stderr.write(`skipper-controller: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});

// The PostgreSQL store and the coordination of the controllers that share it.
// Of `connections`, a quarter are sessions for cross-controller locks, one is the coordination's
// own, and the rest the store's pool.
function sharedStore(url: string, connections: number, logger: Logger): { store: PostgresStore; coordination: PgCoordination } {
  const lockSessions = Math.max(1, Math.floor(connections / 4));
  const controllerId = `${hostname()
    .replace(/[^A-Za-z0-9._-]/g, "-")
    .slice(0, 64)}-${process.pid}-${randomBytes(3).toString("hex")}`;
  const store = new PostgresStore(url, {
    maxConnections: Math.max(2, connections - lockSessions - 1),
    onInfo: (msg: string, meta: object) => logger.info({ action: "store", result: "ok", metadata: meta }, msg),
  });
  const coordination = new PgCoordination(url, {
    controllerId,
    lockSessions,
    onError: (msg, err) => logger.warn({ action: "leader", err }, msg),
  });
  return { store, coordination };
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

// Connections closed on arrival by a cap are logged at most once a minute, with counts: a flood
// of them must not become a flood of log lines.
function refusalReporter(logger: Logger): (address: string, cap: string) => void {
  let counts = new Map<string, number>();
  return (address, cap) => {
    const key = `${cap} ${address}`;
    const first = counts.size === 0;
    counts.set(key, (counts.get(key) ?? 0) + 1);
    if (!first) return;
    setTimeout(() => {
      const refused = Object.fromEntries(counts);
      counts = new Map();
      logger.warn(
        { action: "listen", result: "RESOURCE_EXHAUSTED", metadata: { refused } },
        "connections closed on arrival: a connection cap was reached",
      );
    }, 60_000).unref();
  };
}

// Connections held in line for the pool of those not yet vouched for (a restart's storm), let in,
// or closed while they waited: counted per event, not per address (a fleet's restart holds
// thousands of addresses), and logged at most once a minute; closed ones as a warning.
function lineReporter(logger: Logger): (address: string, event: string) => void {
  let counts: Record<string, number> | undefined;
  return (_address, event) => {
    if (!counts) {
      const line: Record<string, number> = (counts = {});
      setTimeout(() => {
        counts = undefined;
        const lost = (line["timed-out"] ?? 0) + (line.closed ?? 0) > 0;
        logger[lost ? "warn" : "info"](
          { action: "listen", result: lost ? "RESOURCE_EXHAUSTED" : "ok", metadata: { line } },
          "connections waited in line for the pool of connections not yet vouched for",
        );
      }, 60_000).unref();
    }
    counts[event] = (counts[event] ?? 0) + 1;
  };
}

// Printed once, straight to the terminal; never through the logger (logs are kept on disk).
function printAdminToken(token: string): void {
  process.stdout.write(`\nAdmin token (shown only now; stored as a SHA-256 hash):\n  export SKIPPER_ADMIN_TOKEN=${token}\n\n`);
}

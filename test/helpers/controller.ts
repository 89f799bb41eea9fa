// Starts a real controller for tests: file store in a temp dir, real TLS (generated CA) or plain
// HTTP, listening on 127.0.0.1 port 0. Returns typed clients that speak Connect over HTTP/2.
import type { BodyBudgets } from "../../controller/boundary/body-limits.js";
import { mkdtemp, rm, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { compressionGzip, createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { build, type Controller } from "../../controller/server/build.js";
import type { Store } from "../../controller/store/store.js";
import type { Coordination } from "../../controller/store/coordination.js";
import { serve, type ConnectionLimits, type ServeOptions, type Serving } from "../../controller/server/listener.js";
import { createLogger } from "../../common/logging/logger.js";
import { ensureTlsMaterial } from "../../controller/tls/tls-material.js";
import { ensureClientCa } from "../../controller/tls/client-ca.js";
import { currentTicketKey } from "../../controller/tls/session-tickets.js";
import type { WebhookSettings } from "../../controller/webhooks/webhook-worker.js";

export const ADMIN_TOKEN = "test-admin-token-0123456789";

export interface TestController {
  url: string;
  dataDir: string;
  ca?: string;
  controller: Controller;
  serving: Serving;
  /** A Connect client (HTTP/2, TLS when enabled) with the given bearer/admin token. */
  client<S extends DescService>(
    service: S,
    opts?: {
      token?: string;
      admin?: boolean;
      grpc?: boolean;
      /** Connect with JSON messages, or with gzip-compressed ones (default: Connect, binary, uncompressed; gRPC with `grpc`). */
      connect?: "json" | "gzip";
      headers?: Record<string, string>;
    },
  ): Client<S>;
  /** Stops the server, closes the store; removes the data dir unless keep. */
  stop(opts?: { keep?: boolean }): Promise<void>;
}

/** Starts a controller; `dataDir` may be reused to test restarts. */
export async function startController(
  opts: {
    tls?: boolean;
    dataDir?: string;
    logToFile?: boolean;
    reconcileIntervalMs?: number;
    livenessCheckMs?: number;
    limits?: Partial<ConnectionLimits>;
    maxWatchStreamsPerNode?: number;
    /** The fixed admin token (default ADMIN_TOKEN); null: none fixed, the controller mints one into the store. */
    adminToken?: string | null;
    now?: () => Date;
    /** Webhook pacing (short retry periods in tests). */
    webhooks?: Partial<WebhookSettings>;
    /** Lease of a work-order claim (default 30 s). */
    leaseMs?: number;
    /** Serve GET /metrics without a credential. */
    metricsOpen?: boolean;
    /** How long the fleet's gauges are kept between scrapes (default 5 s). */
    metricsCensusMs?: number;
    /** The store (default: a file store on the data directory); the controller opens and closes it. */
    store?: Store;
    /** How it coordinates with controllers sharing the store (default: alone; PgCoordination to share a PostgreSQL store). */
    coordination?: Coordination;
    /** The request-body limits and budgets (default: body-limits.ts's). */
    bodyBudgets?: BodyBudgets;
    /** Told of connections refused on arrival and of those held in line for the unvouched pool (listener.ts ServeOptions). */
    connectionEvents?: Pick<ServeOptions, "onRefusedConnection" | "onWaitingConnection">;
  } = {},
): Promise<TestController> {
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), "skipper-test-")));
  const { logger, close: closeLog } = createLogger({
    service: "skipper-controller",
    dataDir: opts.logToFile ? dataDir : undefined,
    stdout: false,
    level: "debug",
  });
  const clientCa = opts.tls !== false ? await ensureClientCa({ dataDir }) : undefined;
  let tls: ServeOptions["tls"];
  let ca: string | undefined;
  if (opts.tls !== false) {
    const m = await ensureTlsMaterial({ dataDir });
    tls = { cert: m.cert, key: m.key, clientCa: clientCa?.cert, ticketKey: () => currentTicketKey(dataDir) };
    ca = m.caFile ? await readFile(m.caFile, "utf8") : undefined;
  }
  const controller = await build({
    dataDir,
    clientCa,
    tls: tls && { cert: tls.cert, key: tls.key },
    logger,
    adminToken: opts.adminToken === null ? undefined : (opts.adminToken ?? ADMIN_TOKEN),
    now: opts.now,
    reconcileIntervalMs: opts.reconcileIntervalMs,
    livenessCheckMs: opts.livenessCheckMs,
    maxWatchStreamsPerNode: opts.maxWatchStreamsPerNode,
    webhooks: opts.webhooks,
    leaseMs: opts.leaseMs,
    metricsOpen: opts.metricsOpen,
    metricsCensusMs: opts.metricsCensusMs,
    store: opts.store,
    coordination: opts.coordination,
    bodyBudgets: opts.bodyBudgets,
  });
  const serving = await serve(controller.handler, { host: "127.0.0.1", port: 0, tls, limits: opts.limits, ...opts.connectionEvents });
  const url = serving.url;
  return {
    url,
    dataDir,
    ca,
    controller,
    serving,
    client(service, o = {}) {
      const headers: Record<string, string> = { ...(o.headers ?? {}) };
      if (o.admin) headers["x-admin-token"] = ADMIN_TOKEN;
      if (o.token) headers.authorization = `Bearer ${o.token}`;
      const auth: Interceptor = (next) => (req) => {
        for (const [k, v] of Object.entries(headers)) if (!req.header.has(k)) req.header.set(k, v);
        return next(req);
      };
      const nodeOptions = ca ? { ca } : {};
      const transport = o.grpc
        ? createGrpcTransport({ baseUrl: `${url}/v1`, nodeOptions, interceptors: [auth] })
        : createConnectTransport({
            baseUrl: `${url}/v1`,
            httpVersion: "2",
            nodeOptions,
            interceptors: [auth],
            useBinaryFormat: o.connect !== "json",
            ...(o.connect === "gzip" ? { sendCompression: compressionGzip } : {}),
          });
      return createClient(service, transport);
    },
    async stop(s = {}) {
      await serving.close();
      await controller.close();
      closeLog();
      if (!s.keep) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** Reads a JSON file from the data dir. */
export async function readJson(path: string): Promise<unknown> {
  return JSON.parse(await readFile(path, "utf8"));
}

// Controller configuration from flags and environment (flags win). Documented in the README.
import { LOG_LEVELS } from "../../common/logging/logger.js";
import { duration } from "../../common/duration.js";
import { parseArgs } from "node:util";
import { resolve } from "node:path";

export interface ControllerConfig {
  dataDir: string;
  /**
   * A postgres:// URL: the PostgreSQL store, which several controllers may share. Unset: the file
   * store in dataDir. It may hold a password, so it is never logged or echoed.
   */
  storeUrl?: string;
  /** Connections this controller opens to PostgreSQL at most (store pool and lock sessions); unset keeps 30. */
  storeConnections?: number;
  host: string;
  port: number;
  /** Admin token from SKIPPER_ADMIN_TOKEN (never a flag: flags show up in `ps`). */
  adminToken?: string;
  tlsCert?: string;
  tlsKey?: string;
  /** The client CA that signs enrolled nodes' certificates (both or neither; default generated under tls/). */
  clientCaCert?: string;
  clientCaKey?: string;
  /** The key ring that seals secrets at rest: its text (SKIPPER_SECRET_KEYS) or a file holding it. */
  secretKeys?: string;
  secretKeysFile?: string;
  /** Extra names/IPs for the generated server certificate. */
  tlsHostnames: string[];
  insecureHttp: boolean;
  /** Serve GET /metrics without a credential (trusted networks only). */
  metricsOpen: boolean;
  /** Let Git sources use file:// URLs (a repository on the controller's host). */
  allowGitFileUrls: boolean;
  /** A PEM file of one more CA for registries over https (the registry watch). */
  registryCaFile?: string;
  /** The agent bundle served to joining hosts (default: the built dist/skippy.mjs, if any). */
  agentBundle?: string;
  /** The Ed25519 key that signs it (default: tls/agent-signing.key, made once). */
  agentSigningKey?: string;
  logLevel: string;
  resetAdminToken: boolean;
  /** Period of the reconcile sweep. */
  reconcileIntervalMs: number;
  /** Period of the promotion loop's sweep over every environment. */
  promotionIntervalMs: number;
  /** Period of the process reconciler's sweep over every process resource. */
  processIntervalMs: number;
  /** How often node liveness is checked. */
  livenessCheckMs: number;
  /** Lease of a work-order claim. */
  leaseMs: number;
  /** How long events are kept; 0 keeps them for ever. */
  eventRetentionMs: number;
  /** How long finished work orders are kept (unless still in use); 0 keeps them for ever. */
  workOrderRetentionMs: number;
  /** Audit trail days older than this are deleted; 0 keeps them. */
  auditRetentionMs: number;
  /** How long a webhook delivery is retried before the dead letter. */
  webhookRetryMs: number;
  /** The first webhook retry waits up to this (each further one up to twice as long, at most an hour). */
  webhookBackoffMs: number;
  /** Limits on connections and requests (listener.ts ConnectionLimits; unset ones keep their defaults). */
  limits: {
    handshakeTimeoutMs?: number;
    requestIdleMs?: number;
    sessionIdleMs?: number;
    pingIntervalMs?: number;
    maxConcurrentStreams?: number;
    maxConnectionsPerAddress?: number;
    maxConnections?: number;
    maxUnvouchedConnections?: number;
    unvouchedGraceMs?: number;
    maxWaitingConnections?: number;
    connectionWaitMs?: number;
  };
  /** Largest request body of an admitted call; unset keeps the default (4 MiB). */
  maxRequestBytes?: number;
  /** Work-order watch streams one node may hold; unset keeps the default (4). */
  maxWatchStreamsPerNode?: number;
}

export const USAGE = `Usage: skipper-controller [options]

Options (environment variable in brackets):
  --data-dir DIR        data directory [SKIPPER_DATA_DIR] (default ./data): the file store,
                        TLS material and logs
  --store URL           postgres://USER[:PASSWORD]@HOST[:PORT]/DB: keep state in PostgreSQL
                        instead, shared by every controller given the same URL [SKIPPER_STORE_URL]
                        (default: the file store in the data directory)
  --store-connections N connections to PostgreSQL this controller opens at most, for queries and
                        cross-controller locks [SKIPPER_STORE_CONNECTIONS] (default 30; keep the
                        sum over controllers under the server's max_connections)
  --listen HOST:PORT    address to serve on [SKIPPER_LISTEN] (default 127.0.0.1:8443)
  --tls-cert FILE       PEM certificate to serve [SKIPPER_TLS_CERT]
  --tls-key FILE        PEM private key for --tls-cert [SKIPPER_TLS_KEY]
  --client-ca-cert FILE CA that signs enrolled nodes' certificates; share it between controllers
                        on one database [SKIPPER_CLIENT_CA_CERT] (default: tls/client-ca.crt)
  --client-ca-key FILE  its private key [SKIPPER_CLIENT_CA_KEY]
  --secret-keys-file FILE  the keys that seal secrets at rest, one "<id> <base64 key>" a line,
                        newest first [SKIPPER_SECRET_KEYS_FILE; or the text in SKIPPER_SECRET_KEYS]
                        (default: tls/secret-keys, generated; controllers on one database share one)
  --tls-hostname NAME   extra DNS name or IP for the generated certificate, repeatable
                        [SKIPPER_TLS_HOSTNAMES, comma-separated]
  --insecure-http       serve plain HTTP instead of TLS [SKIPPER_INSECURE_HTTP=1]
  --metrics-open        serve GET /metrics to anyone who reaches the port, without a
                        credential [SKIPPER_METRICS_OPEN=1] (default: a credential holding READ
                        over every tenant, such as a viewer API key)
  --allow-git-file-urls let Git sources use file:// URLs, repositories on the controller's
                        host [SKIPPER_ALLOW_GIT_FILE_URLS=1] (default: https and ssh only)
  --registry-ca-file FILE  one more CA (PEM) trusted for registries over https, besides Node's
                        own [SKIPPER_REGISTRY_CA_FILE]
  --agent-bundle FILE   the agent bundle (npm run bundle:agent) served to hosts that join, signed
                        [SKIPPER_AGENT_BUNDLE] (default: dist/skippy.mjs beside the controller)
  --agent-signing-key FILE  Ed25519 key (PEM) that signs it; controllers on one database share
                        one [SKIPPER_AGENT_SIGNING_KEY] (default: tls/agent-signing.key, made once)
  --log-level LEVEL     trace, debug, info, warn, error [SKIPPER_LOG_LEVEL] (default info)
  --reconcile-interval DUR  period of the full reconcile sweep [SKIPPER_RECONCILE_INTERVAL]
  --promotion-interval DUR  period of the promotion loop's sweep over every environment (default 30s)
                            [SKIPPER_PROMOTION_INTERVAL]
  --process-interval DUR    period of the process reconciler's sweep over process resources; a
                            failed order waits twice that, doubling, up to 5m (default 5s)
                            [SKIPPER_PROCESS_INTERVAL]
                        (default 30s; changes are reconciled at once regardless)
  --lease-duration DUR  how long a work-order claim lasts unless the agent renews it
                        [SKIPPER_LEASE_DURATION] (default 30s)
  --event-retention DUR events older than this are deleted, checked hourly; 0 keeps them
                        [SKIPPER_EVENT_RETENTION] (default 30d)
  --work-order-retention DUR  finished work orders and deployments older than this are
                        deleted, checked hourly, except each tenant's last order per node, its
                        current deployment, and those of its last 5 successful specs per node
                        (rollback); 0 keeps them
                        [SKIPPER_WORK_ORDER_RETENTION] (default 30d)
  --audit-retention DUR whole days of the audit trail older than this are deleted, checked
                        hourly; the chain stays checkable from the oldest day kept; 0 keeps
                        them [SKIPPER_AUDIT_RETENTION] (default 365d)
  --webhook-retry-period DUR  a webhook delivery that keeps failing is retried this long, then
                        dead-lettered [SKIPPER_WEBHOOK_RETRY_PERIOD] (default 24h)
  --webhook-backoff DUR the first webhook retry waits a random time up to this, each further
                        one up to twice as long (at most 1h) [SKIPPER_WEBHOOK_BACKOFF] (default 1s)
  --reset-admin-token   mint and print a new admin token (when SKIPPER_ADMIN_TOKEN is unset)

Limits (0 turns a cap off):
  --handshake-timeout DUR     a connection must finish TLS (or, over plain HTTP, send its
                        first bytes) within this [SKIPPER_HANDSHAKE_TIMEOUT] (default 10s)
  --request-idle-timeout DUR  a request or stream with nothing moving either way for this
                        long is closed [SKIPPER_REQUEST_IDLE_TIMEOUT] (default 60s; keep it
                        above the agents' 45 s watch keepalive)
  --session-idle-timeout DUR  an HTTP/2 connection with no streams for this long is closed
                        [SKIPPER_SESSION_IDLE_TIMEOUT] (default 5m)
  --ping-interval DUR   an HTTP/2 connection whose peer sent no ping for two of these is
                        pinged, and closed when it does not answer within 10 s (or the
                        interval, if shorter): an agent that vanished ends its session, and
                        its node goes offline
                        [SKIPPER_PING_INTERVAL] (default 20s)
  --max-streams-per-connection N  concurrent HTTP/2 streams per connection
                        [SKIPPER_MAX_STREAMS_PER_CONNECTION] (default 100)
  --max-connections-per-address N  open connections per client IP address
                        [SKIPPER_MAX_CONNECTIONS_PER_ADDRESS] (default 512; raise it when
                        many agents share one NAT address)
  --max-connections N   open connections in all [SKIPPER_MAX_CONNECTIONS] (default 10000)
  --max-unvouched-connections N  open connections no admitted call has vouched for yet; past
                        it the oldest of the address holding most is closed
                        [SKIPPER_MAX_UNVOUCHED_CONNECTIONS] (default 256)
  --unvouched-grace D   how long such a connection is kept, however many arrive, to finish
                        its handshake and first call; while every one is within it a newcomer
                        waits in line instead [SKIPPER_UNVOUCHED_GRACE] (default 2s; 0: none)
  --max-waiting-connections N  connections that may wait, accepted but not yet read, for room
                        among those not vouched for; let in first come first served, past it
                        a newcomer is closed [SKIPPER_MAX_WAITING_CONNECTIONS] (default 8192)
  --connection-wait D   how long one may wait in that line before it is closed
                        [SKIPPER_CONNECTION_WAIT] (default 60s)
  --max-request-bytes N request body of an authenticated call, in bytes
                        [SKIPPER_MAX_REQUEST_BYTES] (default 4194304; public calls: 16384)
  --max-watch-streams-per-node N  work-order watch streams one node may hold
                        [SKIPPER_MAX_WATCH_STREAMS_PER_NODE] (default 4)
  -h, --help            show this help

The admin token comes from SKIPPER_ADMIN_TOKEN; when unset, one is generated on first start,
printed once and stored only as a SHA-256 hash under <data-dir>/auth/admin.json.
`;

/** Parses argv and env into a config; throws Error with a readable message on bad input. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): ControllerConfig | "help" {
  const { values } = parseArgs({
    args: argv,
    options: {
      "data-dir": { type: "string" },
      store: { type: "string" },
      "store-connections": { type: "string" },
      listen: { type: "string" },
      "tls-cert": { type: "string" },
      "client-ca-cert": { type: "string" },
      "client-ca-key": { type: "string" },
      "secret-keys-file": { type: "string" },
      "tls-key": { type: "string" },
      "tls-hostname": { type: "string", multiple: true },
      "insecure-http": { type: "boolean" },
      "metrics-open": { type: "boolean" },
      "allow-git-file-urls": { type: "boolean" },
      "registry-ca-file": { type: "string" },
      "agent-bundle": { type: "string" },
      "agent-signing-key": { type: "string" },
      "log-level": { type: "string" },
      "reset-admin-token": { type: "boolean" },
      "reconcile-interval": { type: "string" },
      "promotion-interval": { type: "string" },
      "process-interval": { type: "string" },
      "lease-duration": { type: "string" },
      "event-retention": { type: "string" },
      "audit-retention": { type: "string" },
      "webhook-retry-period": { type: "string" },
      "webhook-backoff": { type: "string" },
      "work-order-retention": { type: "string" },
      "handshake-timeout": { type: "string" },
      "unvouched-grace": { type: "string" },
      "max-waiting-connections": { type: "string" },
      "connection-wait": { type: "string" },
      "request-idle-timeout": { type: "string" },
      "session-idle-timeout": { type: "string" },
      "ping-interval": { type: "string" },
      "max-streams-per-connection": { type: "string" },
      "max-unvouched-connections": { type: "string" },
      "max-connections-per-address": { type: "string" },
      "max-connections": { type: "string" },
      "max-request-bytes": { type: "string" },
      "max-watch-streams-per-node": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) return "help";
  const listen = values.listen ?? env.SKIPPER_LISTEN ?? "127.0.0.1:8443";
  const { host, port } = parseListen(listen);
  const adminToken = env.SKIPPER_ADMIN_TOKEN === "" ? undefined : env.SKIPPER_ADMIN_TOKEN;
  if (adminToken !== undefined && !/^[\x21-\x7e]{16,512}$/.test(adminToken)) {
    throw new Error("SKIPPER_ADMIN_TOKEN must be 16-512 printable ASCII characters without spaces");
  }
  const logLevel = values["log-level"] ?? env.SKIPPER_LOG_LEVEL ?? "info";
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new Error(`unknown log level '${logLevel}'`);
  }
  const hostnames = [
    ...(values["tls-hostname"] ?? []),
    ...(env.SKIPPER_TLS_HOSTNAMES ?? "")
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean),
  ];
  return {
    dataDir: resolve(values["data-dir"] ?? env.SKIPPER_DATA_DIR ?? "./data"),
    storeUrl: storeUrl(values.store ?? env.SKIPPER_STORE_URL),
    storeConnections: count(values["store-connections"] ?? env.SKIPPER_STORE_CONNECTIONS, "--store-connections", 4),
    host,
    port,
    adminToken,
    tlsCert: values["tls-cert"] ?? (env.SKIPPER_TLS_CERT || undefined),
    tlsKey: values["tls-key"] ?? (env.SKIPPER_TLS_KEY || undefined),
    clientCaCert: values["client-ca-cert"] ?? (env.SKIPPER_CLIENT_CA_CERT || undefined),
    clientCaKey: values["client-ca-key"] ?? (env.SKIPPER_CLIENT_CA_KEY || undefined),
    secretKeys: env.SKIPPER_SECRET_KEYS || undefined,
    secretKeysFile: values["secret-keys-file"] ?? (env.SKIPPER_SECRET_KEYS_FILE || undefined),
    tlsHostnames: hostnames,
    insecureHttp: values["insecure-http"] ?? (env.SKIPPER_INSECURE_HTTP === "1" || env.SKIPPER_INSECURE_HTTP === "true"),
    metricsOpen: values["metrics-open"] ?? (env.SKIPPER_METRICS_OPEN === "1" || env.SKIPPER_METRICS_OPEN === "true"),
    allowGitFileUrls:
      values["allow-git-file-urls"] ?? (env.SKIPPER_ALLOW_GIT_FILE_URLS === "1" || env.SKIPPER_ALLOW_GIT_FILE_URLS === "true"),
    registryCaFile: values["registry-ca-file"] ?? (env.SKIPPER_REGISTRY_CA_FILE || undefined),
    agentBundle: values["agent-bundle"] ?? (env.SKIPPER_AGENT_BUNDLE || undefined),
    agentSigningKey: values["agent-signing-key"] ?? (env.SKIPPER_AGENT_SIGNING_KEY || undefined),
    logLevel,
    resetAdminToken: values["reset-admin-token"] ?? false,
    reconcileIntervalMs: duration(values["reconcile-interval"] ?? env.SKIPPER_RECONCILE_INTERVAL ?? "30s", "--reconcile-interval", 100),
    promotionIntervalMs: duration(values["promotion-interval"] ?? env.SKIPPER_PROMOTION_INTERVAL ?? "30s", "--promotion-interval", 100),
    processIntervalMs: duration(values["process-interval"] ?? env.SKIPPER_PROCESS_INTERVAL ?? "5s", "--process-interval", 100),
    livenessCheckMs: 1000,
    leaseMs: duration(values["lease-duration"] ?? env.SKIPPER_LEASE_DURATION ?? "30s", "--lease-duration", 500),
    eventRetentionMs: retention(values["event-retention"] ?? env.SKIPPER_EVENT_RETENTION ?? "30d", "--event-retention"),
    workOrderRetentionMs: retention(values["work-order-retention"] ?? env.SKIPPER_WORK_ORDER_RETENTION ?? "30d", "--work-order-retention"),
    auditRetentionMs: retention(values["audit-retention"] ?? env.SKIPPER_AUDIT_RETENTION ?? "365d", "--audit-retention"),
    webhookRetryMs: duration(values["webhook-retry-period"] ?? env.SKIPPER_WEBHOOK_RETRY_PERIOD ?? "24h", "--webhook-retry-period", 100),
    webhookBackoffMs: duration(values["webhook-backoff"] ?? env.SKIPPER_WEBHOOK_BACKOFF ?? "1s", "--webhook-backoff", 10),
    limits: connectionLimits((flag) => values[flag as keyof typeof values] as string | undefined, env),
    maxRequestBytes: count(values["max-request-bytes"] ?? env.SKIPPER_MAX_REQUEST_BYTES, "--max-request-bytes", 16 * 1024),
    maxWatchStreamsPerNode: count(
      values["max-watch-streams-per-node"] ?? env.SKIPPER_MAX_WATCH_STREAMS_PER_NODE,
      "--max-watch-streams-per-node",
      0,
    ),
  };
}

/** The connection limits set by a flag or its environment variable (listener.ts ConnectionLimits); unset ones keep their defaults. */
function connectionLimits(flag: (name: string) => string | undefined, env: NodeJS.ProcessEnv): ControllerConfig["limits"] {
  return {
    handshakeTimeoutMs: optionalDuration(flag("handshake-timeout") ?? env.SKIPPER_HANDSHAKE_TIMEOUT, "--handshake-timeout", 100),
    requestIdleMs: optionalDuration(flag("request-idle-timeout") ?? env.SKIPPER_REQUEST_IDLE_TIMEOUT, "--request-idle-timeout", 1000),
    sessionIdleMs: optionalDuration(flag("session-idle-timeout") ?? env.SKIPPER_SESSION_IDLE_TIMEOUT, "--session-idle-timeout", 1000),
    pingIntervalMs: optionalDuration(flag("ping-interval") ?? env.SKIPPER_PING_INTERVAL, "--ping-interval", 100),
    maxConcurrentStreams: count(
      flag("max-streams-per-connection") ?? env.SKIPPER_MAX_STREAMS_PER_CONNECTION,
      "--max-streams-per-connection",
      1,
    ),
    maxConnectionsPerAddress: count(
      flag("max-connections-per-address") ?? env.SKIPPER_MAX_CONNECTIONS_PER_ADDRESS,
      "--max-connections-per-address",
      0,
    ),
    maxConnections: count(flag("max-connections") ?? env.SKIPPER_MAX_CONNECTIONS, "--max-connections", 0),
    maxUnvouchedConnections: count(
      flag("max-unvouched-connections") ?? env.SKIPPER_MAX_UNVOUCHED_CONNECTIONS,
      "--max-unvouched-connections",
      0,
    ),
    unvouchedGraceMs: optionalDuration(flag("unvouched-grace") ?? env.SKIPPER_UNVOUCHED_GRACE, "--unvouched-grace", 0),
    maxWaitingConnections: count(flag("max-waiting-connections") ?? env.SKIPPER_MAX_WAITING_CONNECTIONS, "--max-waiting-connections", 0),
    connectionWaitMs: optionalDuration(flag("connection-wait") ?? env.SKIPPER_CONNECTION_WAIT, "--connection-wait", 100),
  };
}

/** A store URL: "file" or empty for the file store, else a PostgreSQL URL (never echoed: it may hold a password). */
function storeUrl(text: string | undefined): string | undefined {
  if (text === undefined || text === "" || text === "file") return undefined;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new Error("--store must be a postgres:// URL (or 'file')");
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new Error(`--store must be a postgres:// URL (or 'file'), not a ${url.protocol.replace(/:$/, "").slice(0, 16)} URL`);
  }
  if (!url.hostname && !url.searchParams.get("host")) throw new Error("--store: the PostgreSQL URL names no host");
  return text;
}

/** A duration setting that may be left unset (the default applies). */
function optionalDuration(text: string | undefined, what: string, min: number): number | undefined {
  return text === undefined || text === "" ? undefined : duration(text, what, min);
}

/** A whole-number setting of at least `min`, or unset. */
function count(text: string | undefined, what: string, min: number): number | undefined {
  if (text === undefined || text === "") return undefined;
  if (!/^\d{1,12}$/.test(text.trim()) || Number(text) < min)
    throw new Error(`${what} must be a whole number of at least ${min}, got '${text}'`);
  return Number(text);
}

/** Splits "host:port" or "[v6]:port". */
export function parseListen(listen: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]*)):(\d{1,5})$/.exec(listen);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new Error(`listen address must be HOST:PORT, got '${listen}'`);
  return { host: m[1] ?? (m[2] || "0.0.0.0"), port };
}

/** Parses "500", "500ms", "5s", "2m", "1h" to milliseconds. */
/** A retention setting: 0 keeps for ever; otherwise at least an hour. */
function retention(text: string, what: string): number {
  return text.trim() === "0" ? 0 : duration(text, what, 3_600_000);
}

// skippy's configuration: flags override SKIPPY_* environment variables, which override defaults.
import { LOG_LEVELS } from "../common/logging/logger.js";
import { duration } from "../common/duration.js";
export { duration };
import { accessSync, constants, mkdirSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { type ParseArgsConfig, parseArgs } from "node:util";
import { MAX_HEARTBEAT_INTERVAL_MS, MIN_HEARTBEAT_INTERVAL_MS } from "../common/heartbeat-interval.js";
import { ID_PATTERN } from "../common/ids.js";
import { validAllowEntry } from "./engine/allow-list.js";
import type { ExecConfig } from "./executors/executor.js";
import { validProcessSourceEntry } from "../common/action-rules.js";
import { runtimeAddress, type ProxySettings } from "./proxy/proxy-settings.js";
import { parseMetricsAddress, type MetricsAddress } from "./metrics-address.js";

/** skippy's settings: the loop's, and what executors read (ExecConfig). */
export interface AgentConfig extends ExecConfig {
  /** Base URL of the controller's API, ending in /v1. */
  controllerUrl: string;
  nodeId: string;
  /** The node's bearer token; "" when it enrolls or has enrolled. */
  token: string;
  /** An enrollment token ("" when none): used when the node has no valid client certificate. */
  enrollToken: string;
  caFile?: string;
  stateDir: string;
  pollIntervalMs: number;
  labels: Record<string, string>;
  logLevel: string;
  /** Keep a WatchWorkOrders stream open for pushed orders (polling continues regardless). */
  watch: boolean;
  /** How skippy talks to the controller: its Session stream, unary polling, or the session with polling as the fallback. */
  transport: Transport;
  /** How calls are encoded: Connect's JSON (the default, readable on the wire) or its binary protobuf. */
  wire: WireFormat;
  /** Where to serve the agent's own metrics (metrics-listener.ts); undefined: nowhere (the default). */
  metricsListen?: MetricsAddress;
  /** Serve the SSH nodes whose spec names this node as their relay (agent/relay/). */
  relay?: boolean;
}

export type WireFormat = "json" | "binary";
export type Transport = "auto" | "session" | "poll";

export const USAGE = `Usage: skippy [options]
       skippy install [options]   run skippy as this host's systemd service (skippy install --help)
       skippy join URL --fingerprint PIN   join a controller in one step, the token in SKIPPER_JOIN_TOKEN (skippy join --help)
       skippy updater [options]   what the service runs: skippy-updater, with these options passed
                                  on to the agent it runs and switches versions of (skippy updater --help)

  --controller URL       controller base URL [SKIPPY_CONTROLLER_URL] (default https://127.0.0.1:8443)
  --node-id ID           this node's id [SKIPPY_NODE_ID] (required)
  --token TOKEN          node token [SKIPPY_NODE_TOKEN]
  --token-file PATH      file holding the node token [SKIPPY_NODE_TOKEN_FILE]
  --enroll-token TOKEN   enrollment token: the agent makes a key pair here, gets a client
                         certificate for it and authenticates with mutual TLS from then on,
                         renewing it itself; needed again only once a certificate expired
                         [SKIPPY_ENROLL_TOKEN]
  --enroll-token-file PATH  file holding the enrollment token [SKIPPY_ENROLL_TOKEN_FILE]
  --ca-file PATH         CA certificate to trust for the controller [SKIPPY_CA_FILE]
  --state-dir PATH       agent state (order journal) [SKIPPY_STATE_DIR]
                         (default /var/lib/skippy, else ~/.local/state/skippy)
  --work-dir PATH        compose projects live in <work-dir>/tenants/<tenant> [SKIPPY_WORK_DIR]
                         (default /opt/skipper, else ~/.local/share/skipper)
  --poll-interval DUR    how often to heartbeat and ask for work, 100ms..5m [SKIPPY_POLL_INTERVAL] (default 5s)
  --label KEY=VALUE      a node label, repeatable [SKIPPY_LABELS=k=v,k2=v2]
  --compose-timeout DUR  limit for one compose command [SKIPPY_COMPOSE_TIMEOUT] (default 5m)
  --ready-timeout DUR    how long services may take to be running/healthy [SKIPPY_READY_TIMEOUT] (default 60s)
  --log-level LEVEL      pino level [SKIPPY_LOG_LEVEL] (default info)
  --transport MODE       session (one Session stream: orders pushed, renewals, results and
                         heartbeats on it), poll (unary calls: heartbeat, ask, claim, report)
                         or auto: the session, polling while the controller has none (older
                         controller, no HTTP/2 stream on the way), trying it again every 5 min
                         [SKIPPY_TRANSPORT or SKIPPER_AGENT_TRANSPORT] (default auto)
  --no-watch             poll only: do not keep a WatchWorkOrders stream open [SKIPPY_WATCH=0]
  --wire FORMAT          json (Connect JSON over HTTPS, the default) or binary (Connect's
                         protobuf encoding, smaller) [SKIPPY_WIRE]
  --allow-command PROG   a program execute_command orders and deploy hooks may run, repeatable:
                         a name looked up on PATH or an absolute path, matched exactly
                         [SKIPPY_ALLOW_COMMANDS=prog,/abs/prog] (default none)
  --allow-process-source SRC
                         where deploy_process and a deploy's process modules may
                         fetch artifacts, repeatable: an http(s):// URL prefix or an
                         absolute directory
                         [SKIPPY_ALLOW_PROCESS_SOURCES=...] (default none: refused)
  --proxy-runtime ADDR   the Runtime API of the host's HAProxy (its "stats socket ... level
                         admin"): an absolute socket path or a loopback HOST:PORT. Set, skippy
                         drives it for tenants' routes and start-first updates
                         [SKIPPY_PROXY_RUNTIME] (default: no proxy; orders with routes refused)
  --proxy-config FILE    the configuration file skippy writes for its routes; HAProxy loads it
                         after its own (-f haproxy.cfg -f FILE) [SKIPPY_PROXY_CONFIG]
                         (default <state-dir>/haproxy-skipper.cfg)
  --proxy-listen ADDR    where skippy's frontend listens [SKIPPY_PROXY_LISTEN] (default 0.0.0.0:80)
  --proxy-master PATH    HAProxy's master CLI socket (-S): reloads go through it [SKIPPY_PROXY_MASTER]
  --proxy-reload-command CMD
                         otherwise the command that reloads HAProxy, words split on spaces
                         [SKIPPY_PROXY_RELOAD_COMMAND] (e.g. "systemctl reload haproxy")
  --metrics-listen HOST:PORT
                         serve the agent's counters at http://HOST:PORT/metrics in
                         Prometheus' text format, on a loopback address only (127.0.0.1:9464,
                         [::1]:9464) [SKIPPY_METRICS_LISTEN] (default: not served)
  --metrics-allow-remote allow a --metrics-listen address other hosts reach (plain HTTP,
                         no credential) [SKIPPY_METRICS_ALLOW_REMOTE=1]
  --relay                serve the SSH nodes whose spec names this node as relay
                         (NodeSpec.ssh.relay_node_id): their orders run over SSH from here
                         [SKIPPY_RELAY=1] (default off)
  -h, --help             this text

Durations: a number of milliseconds or a number with ms, s, m or h.
`;

/** skippy's flags (USAGE above), as node:util parseArgs takes them; `skippy install` accepts them too. */
export const AGENT_OPTIONS = {
  controller: { type: "string" },
  "node-id": { type: "string" },
  token: { type: "string" },
  "token-file": { type: "string" },
  "ca-file": { type: "string" },
  "state-dir": { type: "string" },
  "work-dir": { type: "string" },
  "poll-interval": { type: "string" },
  label: { type: "string", multiple: true },
  "allow-command": { type: "string", multiple: true },
  "allow-process-source": { type: "string", multiple: true },
  "proxy-runtime": { type: "string" },
  "proxy-config": { type: "string" },
  "proxy-listen": { type: "string" },
  "proxy-master": { type: "string" },
  "proxy-reload-command": { type: "string" },
  "compose-timeout": { type: "string" },
  "ready-timeout": { type: "string" },
  "no-watch": { type: "boolean" },
  wire: { type: "string" },
  transport: { type: "string" },
  "log-level": { type: "string" },
  "metrics-listen": { type: "string" },
  "metrics-allow-remote": { type: "boolean" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

/** The configuration from flags, then SKIPPY_* variables, then defaults; "help" when asked for the usage. */
export function loadAgentConfig(argv: string[], env: NodeJS.ProcessEnv, fileReader: (p: string) => string): AgentConfig | "help" {
  const { values } = parseArgs({
    args: argv,
    options: {
      ...AGENT_OPTIONS,
      "enroll-token": { type: "string" },
      "enroll-token-file": { type: "string" },
      relay: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) return "help";
  const nodeId = values["node-id"] ?? env.SKIPPY_NODE_ID ?? "";
  if (!ID_PATTERN.test(nodeId))
    throw new Error(
      `--node-id (SKIPPY_NODE_ID) ${nodeId === "" ? "is required" : `'${nodeId}' is not an id`}: 1-128 characters of [A-Za-z0-9._-], starting alphanumeric`,
    );
  let token = values.token ?? env.SKIPPY_NODE_TOKEN ?? "";
  const tokenFile = values["token-file"] ?? env.SKIPPY_NODE_TOKEN_FILE;
  if (token === "" && tokenFile) token = fileReader(tokenFile).trim();
  let enrollToken = values["enroll-token"] ?? env.SKIPPY_ENROLL_TOKEN ?? "";
  const enrollFile = values["enroll-token-file"] ?? env.SKIPPY_ENROLL_TOKEN_FILE;
  if (enrollToken === "" && enrollFile) enrollToken = fileReader(enrollFile).trim();
  // Without either, a certificate saved by an earlier enrollment may still do: main checks.
  let controllerUrl = (values.controller ?? env.SKIPPY_CONTROLLER_URL ?? "https://127.0.0.1:8443").replace(/\/+$/, "");
  if (!/^https?:\/\/[^/]+(\/.*)?$/.test(controllerUrl)) throw new Error(`--controller must be an http(s) URL, got '${controllerUrl}'`);
  if (!controllerUrl.endsWith("/v1")) controllerUrl += "/v1";
  const labels: Record<string, string> = {};
  const labelSpecs = [
    ...(env.SKIPPY_LABELS ?? "")
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean),
    ...(values.label ?? []),
  ];
  for (const spec of labelSpecs) {
    const m = /^([A-Za-z0-9][A-Za-z0-9._/-]{0,62})=([A-Za-z0-9._-]{0,63})$/.exec(spec);
    if (!m) throw new Error(`label must be KEY=VALUE with safe characters, got '${spec}'`);
    labels[m[1]!] = m[2]!;
  }
  const allowCommands = [
    ...(env.SKIPPY_ALLOW_COMMANDS ?? "")
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean),
    ...(values["allow-command"] ?? []),
  ];
  for (const c of allowCommands) {
    if (!validAllowEntry(c))
      throw new Error(`--allow-command takes a program name or absolute path without spaces or shell syntax, got '${c}'`);
  }
  const allowProcessSources = [
    ...(env.SKIPPY_ALLOW_PROCESS_SOURCES ?? "")
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean),
    ...(values["allow-process-source"] ?? []),
  ];
  for (const s of allowProcessSources) {
    if (!validProcessSourceEntry(s))
      throw new Error(`--allow-process-source takes an http(s):// URL prefix or an absolute directory, got '${s}'`);
  }
  // The poll interval is the heartbeat interval the controller judges liveness by, within its bounds.
  const pollIntervalMs = duration(values["poll-interval"] ?? env.SKIPPY_POLL_INTERVAL ?? "5s", "poll interval", MIN_HEARTBEAT_INTERVAL_MS);
  if (pollIntervalMs > MAX_HEARTBEAT_INTERVAL_MS) throw new Error(`poll interval must be at most ${MAX_HEARTBEAT_INTERVAL_MS} ms (5m)`);
  const logLevel = values["log-level"] ?? env.SKIPPY_LOG_LEVEL ?? "info";
  if (!LOG_LEVELS.includes(logLevel)) throw new Error(`unknown log level '${logLevel}'`);
  const wire = values.wire ?? env.SKIPPY_WIRE ?? "json";
  if (wire !== "json" && wire !== "binary") throw new Error(`--wire must be json or binary, got '${wire}'`);
  const transport = values.transport ?? env.SKIPPY_TRANSPORT ?? env.SKIPPER_AGENT_TRANSPORT ?? "auto";
  if (transport !== "auto" && transport !== "session" && transport !== "poll")
    throw new Error(`--transport must be auto, session or poll, got '${transport}'`);
  const metricsListen = values["metrics-listen"] ?? env.SKIPPY_METRICS_LISTEN;
  const allowRemote =
    values["metrics-allow-remote"] ?? (env.SKIPPY_METRICS_ALLOW_REMOTE === "1" || env.SKIPPY_METRICS_ALLOW_REMOTE === "true");
  const stateDir = resolve(
    values["state-dir"] ?? env.SKIPPY_STATE_DIR ?? writableOr("/var/lib/skippy", join(homedir(), ".local", "state", "skippy")),
  );
  return {
    controllerUrl,
    nodeId,
    token,
    enrollToken,
    caFile: values["ca-file"] ?? env.SKIPPY_CA_FILE,
    stateDir,
    workDir: resolve(
      values["work-dir"] ?? env.SKIPPY_WORK_DIR ?? writableOr("/opt/skipper", join(homedir(), ".local", "share", "skipper")),
    ),
    pollIntervalMs,
    labels,
    composeTimeoutMs: duration(values["compose-timeout"] ?? env.SKIPPY_COMPOSE_TIMEOUT ?? "5m", "compose timeout", 1000),
    readyTimeoutMs: duration(values["ready-timeout"] ?? env.SKIPPY_READY_TIMEOUT ?? "60s", "ready timeout", 0),
    logLevel,
    watch: !(values["no-watch"] ?? false) && env.SKIPPY_WATCH !== "0" && env.SKIPPY_WATCH !== "false",
    wire,
    transport,
    allowCommands: [...new Set(allowCommands)],
    allowProcessSources: [...new Set(allowProcessSources)],
    metricsListen: metricsListen ? parseMetricsAddress(metricsListen, allowRemote) : undefined,
    proxy: proxySettings(values, env, stateDir),
    relay: values.relay ?? (env.SKIPPY_RELAY === "1" || env.SKIPPY_RELAY === "true"),
  };
}

// The --proxy-* flags: undefined without --proxy-runtime (no proxy driven).
function proxySettings(values: Record<string, unknown>, env: NodeJS.ProcessEnv, stateDir: string): ProxySettings | undefined {
  const str = (k: string, e: string) => (values[k] as string | undefined) ?? env[e];
  const runtime = str("proxy-runtime", "SKIPPY_PROXY_RUNTIME");
  if (!runtime) return undefined;
  runtimeAddress(runtime);
  const master = str("proxy-master", "SKIPPY_PROXY_MASTER");
  const reload = str("proxy-reload-command", "SKIPPY_PROXY_RELOAD_COMMAND")?.split(" ").filter(Boolean);
  if (!master && !reload?.length)
    throw new Error("--proxy-runtime needs --proxy-master or --proxy-reload-command: how HAProxy is reloaded");
  if (master && !master.startsWith("/")) throw new Error(`--proxy-master takes an absolute socket path, got '${master}'`);
  const listen = str("proxy-listen", "SKIPPY_PROXY_LISTEN") ?? "0.0.0.0:80";
  if (!/^(\[[0-9a-fA-F:]+\]|[0-9.]+|\*):\d{1,5}$/.test(listen)) throw new Error(`--proxy-listen takes ADDRESS:PORT, got '${listen}'`);
  return {
    runtime,
    configPath: resolve(str("proxy-config", "SKIPPY_PROXY_CONFIG") ?? join(stateDir, "haproxy-skipper.cfg")),
    listen,
    master,
    reloadCommand: reload,
  };
}

function writableOr(preferred: string, fallback: string): string {
  try {
    mkdirSync(preferred, { recursive: true });
    accessSync(preferred, constants.W_OK);
    return preferred;
  } catch {
    return fallback;
  }
}

// Which controller a command talks to, and the typed clients it talks through. Flags win over the
// environment (SKIPPER_SERVER, SKIPPER_CA_FILE, SKIPPER_TOKEN, SKIPPER_CONTEXT), which wins over
// the context (the current one, or --context NAME). Calls go over HTTP/2 with TLS trusting the
// CA file (or the system's CAs without one), Connect's binary encoding, the credential as a bearer
// token: the same generated clients and transport as the agent (agent/controller-client.ts).
import { readFileSync } from "node:fs";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { AgentBundleService } from "../gen/skipper/v1/agent_bundle_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { RolloutService } from "../gen/skipper/v1/rollout_service_pb.js";
import { SecretService } from "../gen/skipper/v1/secret_service_pb.js";
import { DeliveryService } from "../gen/skipper/v1/delivery_service_pb.js";
import { GitSourceService } from "../gen/skipper/v1/git_source_service_pb.js";
import { SnapshotService } from "../gen/skipper/v1/snapshot_service_pb.js";
import { WebhookService } from "../gen/skipper/v1/webhook_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { TerminalService } from "../gen/skipper/v1/terminal_service_pb.js";
import { configPath, readConfig, type Context } from "./config-file.js";
import { CliError } from "./errors.js";

/** The options every command takes (commander's global options). */
export interface GlobalOptions {
  server?: string;
  caFile?: string;
  token?: string;
  context?: string;
}

/** A controller to call: where, trusting which CA, with which credential. */
export interface Target {
  server: string;
  caFile?: string;
  token?: string;
  /** The context it came from, if any. */
  contextName?: string;
}

export interface Clients {
  target: Target;
  resources: Client<typeof ResourceService>;
  rollouts: Client<typeof RolloutService>;
  events: Client<typeof EventService>;
  orders: Client<typeof WorkOrderService>;
  access: Client<typeof AccessService>;
  enrollment: Client<typeof EnrollmentService>;
  agentBundles: Client<typeof AgentBundleService>;
  deployments: Client<typeof DeploymentService>;
  nodes: Client<typeof NodeService>;
  webhooks: Client<typeof WebhookService>;
  audit: Client<typeof AuditService>;
  snapshots: Client<typeof SnapshotService>;
  secrets: Client<typeof SecretService>;
  delivery: Client<typeof DeliveryService>;
  gitSources: Client<typeof GitSourceService>;
  terminals: Client<typeof TerminalService>;
  /** Closes the connection (an open HTTP/2 session would keep the process alive). */
  close(): void;
}

/** The controller a command is for, from flags, environment and the config file. */
export function resolveTarget(opts: GlobalOptions, env: NodeJS.ProcessEnv): Target {
  const path = configPath(env);
  const config = readConfig(path);
  const name = opts.context ?? env.SKIPPER_CONTEXT ?? config.currentContext;
  let ctx: Context | undefined;
  if (name !== undefined) {
    ctx = config.contexts[name];
    if (!ctx && (opts.context !== undefined || env.SKIPPER_CONTEXT !== undefined)) {
      const known = Object.keys(config.contexts);
      throw new CliError(`no context named ${JSON.stringify(name)} in ${path}`, {
        hint: known.length > 0 ? `known contexts: ${known.join(", ")}` : "create one with `skipper login`",
      });
    }
  }
  const server = opts.server ?? env.SKIPPER_SERVER ?? ctx?.server;
  if (!server) {
    throw new CliError("no controller to talk to", {
      hint: "run `skipper login --server https://HOST:8443 --ca-file ca.crt --token-stdin`, or pass --server (SKIPPER_SERVER)",
    });
  }
  // The context's CA and credential are for the context's server: a command sent elsewhere
  // (--server, SKIPPER_SERVER) takes its own, so a saved token never goes to another host.
  const sameServer = ctx !== undefined && normalizeServer(server) === normalizeServer(ctx.server);
  const caFile = opts.caFile ?? env.SKIPPER_CA_FILE ?? (sameServer ? ctx?.caFile : undefined);
  const token = opts.token ?? env.SKIPPER_TOKEN ?? (sameServer ? ctx?.token : undefined);
  return {
    server: normalizeServer(server),
    ...(caFile ? { caFile } : {}),
    ...(token ? { token } : {}),
    ...(ctx && name ? { contextName: name } : {}),
  };
}

/** `https://host:port`, without a trailing slash or /v1; refuses anything that is not an http(s) URL. */
export function normalizeServer(server: string): string {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new CliError(`server ${JSON.stringify(server)} is not a URL`, {
      hint: "give it as https://HOST:PORT, e.g. https://127.0.0.1:8443",
    });
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new CliError(`server ${JSON.stringify(server)} must be an https:// URL`, { hint: "e.g. https://127.0.0.1:8443" });
  }
  return `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "").replace(/\/v1$/, "")}`;
}

/** Typed clients for `target`. */
export function connect(target: Target, opts: { timeoutMs?: number } = {}): Clients {
  let ca: string | undefined;
  if (target.caFile) {
    try {
      ca = readFileSync(target.caFile, "utf8");
    } catch (e) {
      throw new CliError(`cannot read the CA file ${target.caFile}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, {
        hint: "pass --ca-file with the controller's CA certificate (npm start writes data/tls/ca.crt)",
      });
    }
  }
  const interceptors: Interceptor[] = [];
  if (target.token) {
    const token = target.token;
    interceptors.push((next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    });
  }
  const baseUrl = `${target.server}/v1`;
  const sessions = new Http2SessionManager(baseUrl, {}, ca ? { ca } : {});
  const transport = createConnectTransport({
    baseUrl,
    httpVersion: "2",
    useBinaryFormat: true,
    sessionManager: sessions,
    interceptors,
    defaultTimeoutMs: opts.timeoutMs ?? 30_000,
  });
  return {
    target,
    resources: createClient(ResourceService, transport),
    rollouts: createClient(RolloutService, transport),
    events: createClient(EventService, transport),
    orders: createClient(WorkOrderService, transport),
    access: createClient(AccessService, transport),
    enrollment: createClient(EnrollmentService, transport),
    agentBundles: createClient(AgentBundleService, transport),
    deployments: createClient(DeploymentService, transport),
    nodes: createClient(NodeService, transport),
    webhooks: createClient(WebhookService, transport),
    audit: createClient(AuditService, transport),
    snapshots: createClient(SnapshotService, transport),
    secrets: createClient(SecretService, transport),
    delivery: createClient(DeliveryService, transport),
    gitSources: createClient(GitSourceService, transport),
    terminals: createClient(TerminalService, transport),
    close: () => sessions.abort(),
  };
}

#!/usr/bin/env node
// `npm start`: the controller on the file store in ./data plus one local agent (node host-1),
// as two processes, the way they run on real hosts. The agent's credential and state live in
// ./.skippy/ (token mode 0600). Arguments after `npm start --` go to the controller.
//
// Docker: when DOCKER_HOST is unset and no engine answers on /var/run/docker.sock, this starts a
// private engine with scripts/docker-engine.sh (root only). Without an engine the agent still
// runs and reports in its heartbeat why it cannot deploy.
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

const root = resolve(fileURLToPath(new URL("..", import.meta.url)));
const { NodeService } = await import(join(root, "dist/gen/skipper/v1/node_service_pb.js"));
const NODE_ID = process.env.SKIPPY_NODE_ID ?? "host-1";
const agentHome = resolve(process.env.SKIPPY_HOME ?? ".skippy");
const tokenFile = join(agentHome, "token");
const say = (s) => process.stderr.write(`start: ${s}\n`);

// 1. The controller; its stdout passes through, and we read the listen line and the admin token.
const controller = spawn(process.execPath, [join(root, "dist/controller/main.js"), ...process.argv.slice(2)], {
  stdio: ["ignore", "pipe", "inherit"],
});
let adminToken = process.env.SKIPPER_ADMIN_TOKEN || undefined;
const listening = new Promise((resolveListen, reject) => {
  controller.once("exit", (code) => reject(new Error(`controller exited with ${code}`)));
  createInterface({ input: controller.stdout }).on("line", (line) => {
    process.stdout.write(`${line}\n`);
    const t = /export SKIPPER_ADMIN_TOKEN=(\S+)/.exec(line);
    if (t) adminToken = t[1];
    try {
      const l = JSON.parse(line);
      if (l.action === "listen") resolveListen(l.metadata);
    } catch {
      // the admin-token banner is plain text
    }
  });
});
let agent;
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    agent?.kill(sig);
    controller.kill(sig);
  });
}
controller.on("exit", (code) => {
  agent?.kill("SIGTERM");
  process.exitCode = code ?? 0;
});

const meta = await listening;
await new Promise((r) => setTimeout(r, 100)); // let the token banner, printed after listen, arrive
const url = meta.url;
const caFile = meta.ca_file;

// 2. The local node's credential: kept from an earlier start, else registered (or rotated) now.
mkdirSync(agentHome, { recursive: true, mode: 0o700 });
if (!existsSync(tokenFile)) {
  if (!adminToken) {
    say(`no agent token in ${tokenFile} and the admin token is unknown; set SKIPPER_ADMIN_TOKEN and start again to run the local agent`);
  } else {
    const transport = createConnectTransport({
      baseUrl: `${url}/v1`,
      httpVersion: "2",
      nodeOptions: caFile ? { ca: readFileSync(caFile, "utf8") } : {},
      interceptors: [(next) => (req) => (req.header.set("x-admin-token", adminToken), next(req))],
    });
    const nodes = createClient(NodeService, transport);
    let token;
    try {
      token = (await nodes.registerNode({ nodeId: NODE_ID, displayName: "Local host", labels: { env: "dev" } })).token;
      say(`registered node ${NODE_ID}`);
    } catch (e) {
      if (ConnectError.from(e).code !== Code.Aborted) throw e;
      token = (await nodes.rotateNodeToken({ nodeId: NODE_ID })).token;
      say(`node ${NODE_ID} was registered before; issued it a new token`);
    }
    writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
    chmodSync(tokenFile, 0o600);
  }
}

// 3. A Docker engine for the agent, when none is configured. A private engine this start
// started is stopped again when it ends, with the containers it runs (the example's included).
const env = { ...process.env };
const engineScript = join(root, "scripts/docker-engine.sh");
let startedEngine = false;
if (!env.DOCKER_HOST) {
  const r = spawnSync(engineScript, ["start"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  process.stderr.write(r.stderr ?? "");
  const host = /DOCKER_HOST=(\S+)/.exec(r.stdout ?? "")?.[1];
  if (r.status === 0 && host) {
    env.DOCKER_HOST = host;
    startedEngine = /starting dockerd/.test(r.stderr ?? "");
  } else {
    say("no Docker engine available; the agent will report that in its heartbeat");
  }
}
if (env.DOCKER_HOST)
  say(`the agent deploys to the Docker engine at ${env.DOCKER_HOST} (export DOCKER_HOST=${env.DOCKER_HOST} to look at it)`);
controller.on("exit", () => {
  if (startedEngine) {
    say("stopping the private Docker engine this start started, and the containers it runs");
    spawnSync(engineScript, ["stop"], { stdio: "inherit" });
  } else if (env.DOCKER_HOST) {
    // Stopping a control plane does not stop what it deployed on an engine it did not start.
    say(`containers deployed to ${env.DOCKER_HOST} are still running; delete the tenant through the API to take them down`);
  }
});

// 4. The agent. Its allow-list (what execute_command orders may run) holds two read-only
// programs for the README's examples unless SKIPPY_ALLOW_COMMANDS says otherwise.
env.SKIPPY_ALLOW_COMMANDS ??= "uptime,df";
say(`agent ${NODE_ID} may run: ${env.SKIPPY_ALLOW_COMMANDS || "(nothing)"} (SKIPPY_ALLOW_COMMANDS)`);
if (existsSync(tokenFile)) {
  agent = spawn(
    process.execPath,
    [
      join(root, "dist/agent/main.js"),
      "--controller",
      url,
      "--node-id",
      NODE_ID,
      "--token-file",
      tokenFile,
      "--state-dir",
      join(agentHome, "state"),
      ...(caFile ? ["--ca-file", caFile] : []),
    ],
    { stdio: ["ignore", "inherit", "inherit"], env },
  );
  agent.on("exit", (code, signal) => say(`agent exited (${signal ?? code})`));
  const cacert = caFile ? ` --cacert ${caFile}` : "";
  say(`controller ${url}, agent ${NODE_ID} (token in ${tokenFile})`);
  say(`deploy the example tenant (creating it is enough: the reconciler sends ${NODE_ID} the order):
  curl${cacert} -H "x-admin-token: $SKIPPER_ADMIN_TOKEN" -d @examples/tenant.json ${url}/v1/resources/tenant
  curl${cacert} -H "x-admin-token: $SKIPPER_ADMIN_TOKEN" -d @examples/service.json ${url}/v1/resources/service
  curl${cacert} -H "x-admin-token: $SKIPPER_ADMIN_TOKEN" ${url}/v1/resources/tenant/example-tenant/explain
  curl http://127.0.0.1:8081/      # the example's web service, once converged`);
}

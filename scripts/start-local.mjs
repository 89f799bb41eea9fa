#!/usr/bin/env node
// `npm start`: the controller (file store in ./data unless --store says otherwise) plus one local
// agent (node host-1), as two processes, the way they run on real hosts. Arguments after
// `npm start --` go to the controller, but for --log-format text|json, which is this script's.
//
// The terminal is for a person (scripts/start-local/terminal.mjs): what started where, the
// once-only banners last, then one line per deploy, failure and node change. The programs' JSON
// logs go to <data dir>/logs/YYYY-MM-DD/{skipper-controller,skippy}.ndjson (the controller writes
// its own; this script writes the agent's), and to the terminal with --log-format json; with
// --log-level LEVEL both programs log at LEVEL and the terminal shows their lines from it up.
//
// What it uses, and owns: the agent's credential in ./.skippy/token (checked against the
// controller; a store that does not know it gets host-1 registered again: node-token.mjs), its
// compose projects in ./.skippy/work (SKIPPY_WORK_DIR), a Docker engine (engine.mjs: DOCKER_HOST,
// else as root a private one of this checkout, else the machine's). Ctrl-C stops the agent and
// the controller, then what this start started of the engine, and nothing it did not start.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { isAbsolute, join, relative, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { chooseEngine, releaseEngine, SHARING_HINT } from "./start-local/engine.mjs";
import { ensureNodeToken, storeLabel } from "./start-local/node-token.mjs";
import { followEvents, logLineFilter, terminal } from "./start-local/terminal.mjs";

const root = resolve(fileURLToPath(new URL("..", import.meta.url)));
const dist = (p) => import(join(root, "dist", p));
const { NodeService } = await dist("gen/skipper/v1/node_service_pb.js");
const { EventService } = await dist("gen/skipper/v1/event_service_pb.js");
const { loadConfig } = await dist("controller/base/config.js");
const { DailyFileStream } = await dist("common/logging/daily-file-stream.js");

const NODE_ID = process.env.SKIPPY_NODE_ID ?? "host-1";
const agentHome = resolve(process.env.SKIPPY_HOME ?? ".skippy");
const out = terminal();
const say = (s) => out.line(`npm start: ${s}`);
/** A path as a person types it from here: relative when below the current directory. */
const shown = (p) => {
  const r = relative(process.cwd(), p);
  return r && !r.startsWith("..") && !isAbsolute(r) ? r : p;
};

/** This script's own flags out of argv; the rest is the controller's. */
function ownOptions(argv, env) {
  const args = [];
  let logFormat = "text";
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--log-format") logFormat = argv[++i] ?? "";
    else if (a.startsWith("--log-format=")) logFormat = a.slice("--log-format=".length);
    else args.push(a);
  }
  if (logFormat !== "text" && logFormat !== "json") {
    process.stderr.write(`npm start: --log-format takes text or json, got '${logFormat}'\n`);
    process.exit(2);
  }
  const levelArg = args.findIndex((a) => a === "--log-level" || a.startsWith("--log-level="));
  const logLevel = levelArg < 0 ? env.SKIPPER_LOG_LEVEL : args[levelArg].includes("=") ? args[levelArg].split("=")[1] : args[levelArg + 1];
  return { args, logFormat, logLevel };
}

const options = ownOptions(process.argv.slice(2), process.env);
let config;
try {
  config = loadConfig(options.args, process.env);
} catch {
  config = "invalid";
}
if (config === "help" || config === "invalid") {
  // The controller says what is wrong (or prints its usage) itself.
  const child = spawn(process.execPath, [join(root, "dist/controller/main.js"), ...options.args], { stdio: "inherit" });
  child.on("exit", (code) => {
    if (config === "help")
      out.line("npm start also takes --log-format text|json (the terminal: a summary and one line per event, or every JSON log line)");
    process.exit(code ?? 1);
  });
} else {
  await run(config);
}

/** Starts the controller and reads its output; resolves once it listens and its admin token is settled. */
function startController(config, showLine) {
  const child = spawn(process.execPath, [join(root, "dist/controller/main.js"), ...options.args], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const state = { child, banner: [], adminToken: config.adminToken, tokenStored: false, meta: undefined };
  const ready = new Promise((resolveReady, reject) => {
    child.once("exit", (code) => reject(new Error(`the controller exited with ${code} before it served`)));
    const settled = () => state.meta && (state.adminToken || state.tokenStored || config.adminToken);
    createInterface({ input: child.stdout }).on("line", (line) => {
      let parsed;
      try {
        parsed = JSON.parse(line);
      } catch {
        // The admin-token banner is plain text, printed once: kept for the end of start-up.
        if (line.trim() !== "") state.banner.push(line);
        const t = /export SKIPPER_ADMIN_TOKEN=(\S+)/.exec(line);
        if (t) state.adminToken = t[1];
        if (options.logFormat === "json") out.line(line);
        if (settled()) resolveReady(state);
        return;
      }
      if (parsed.action === "listen" && parsed.metadata?.url) state.meta = parsed.metadata;
      if (parsed.action === "auth") state.tokenStored = true;
      const text = showLine(line, parsed);
      if (text !== undefined) out.line(text);
      if (settled()) resolveReady(state);
    });
  });
  return { child, ready, state };
}

/** Starts the agent; its JSON lines go to the data directory's log files, and the terminal as filtered. */
function startAgent({ url, caFile, tokenFile, workDir, env, logs, showLine }) {
  const child = spawn(
    process.execPath,
    [
      join(root, "dist/agent/main.js"),
      ...["--controller", url, "--node-id", NODE_ID, "--token-file", tokenFile],
      ...["--state-dir", join(agentHome, "state"), "--work-dir", workDir],
      ...(caFile ? ["--ca-file", caFile] : []),
      ...(options.logLevel ? ["--log-level", options.logLevel] : []),
    ],
    { stdio: ["ignore", "pipe", "pipe"], env },
  );
  createInterface({ input: child.stdout }).on("line", (line) => {
    logs.write(`${line}\n`);
    let parsed;
    try {
      parsed = JSON.parse(line);
    } catch {
      parsed = undefined;
    }
    const text = showLine(line, parsed);
    if (text !== undefined) out.line(text);
  });
  createInterface({ input: child.stderr }).on("line", (line) => out.line(`agent: ${line}`));
  return child;
}

/** What runs and where, then the once-only banners: the last thing on the screen. */
function printSummary({ config, controller, url, caFile, engine, node, workDir, workDirCreated, env }) {
  const ca = caFile ? shown(caFile) : undefined;
  const logs = join(config.dataDir, "logs");
  const storeNote = config.storeUrl ? " (given by --store; npm start did not start it and leaves it running)" : "";
  out.block([
    "",
    `npm start: ready. What runs, and where (Ctrl-C stops what npm start started, and only that):`,
    `  controller  ${url} (store: ${storeLabel(config)}${storeNote})`,
    `  dashboard   ${url}/ui/${ca ? ` (your browser asks about the certificate: trust ${ca})` : ""}`,
    `  data        ${shown(config.dataDir)} (TLS in ${shown(join(config.dataDir, "tls"))}, JSON logs in ${shown(logs)}/<day>/)`,
    `  engine      ${engine.how}`,
    `              ${SHARING_HINT}`,
    node
      ? `  agent       ${NODE_ID}: token ${node.how}; compose projects in ${shown(workDir)} (${workDirCreated ? "created now" : "existing"}; SKIPPY_WORK_DIR); may run: ${env.SKIPPY_ALLOW_COMMANDS || "(nothing)"} (SKIPPY_ALLOW_COMMANDS)`
      : `  agent       not started (see above)`,
    "  terminal    one line per deploy, failure and node change; all JSON lines: --log-format json; more: --log-level info",
    `  next        npx skipper login --server ${url}${ca ? ` --ca-file ${ca}` : ""} --token-stdin <<< "$SKIPPER_ADMIN_TOKEN"`,
    "              npx skipper apply -f examples/tenant.json -f examples/service.json   # deploys the example tenant",
    "              curl http://127.0.0.1:8081/                                      # its web service, once converged",
  ]);
  if (controller.banner.length > 0) out.block(["", ...controller.banner, ""]);
  else if (config.adminToken) out.line("admin token: SKIPPER_ADMIN_TOKEN, as set in this shell");
  else
    out.line(
      "admin token: the one printed at this store's first start (export SKIPPER_ADMIN_TOKEN=…); lost it? npm start -- --reset-admin-token mints a new one",
    );
}

async function run(config) {
  const level = options.logLevel ?? "warn";
  const quietCalls = options.logLevel === undefined;
  let following = false;
  const showController = logLineFilter({
    program: "controller",
    format: options.logFormat,
    level,
    quietCalls,
    followingEvents: () => following,
  });
  const controller = startController(config, showController);
  let stopping;
  const exited = (child) =>
    child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((r) => child.once("exit", r));
  const events = new AbortController();
  let agent;
  let engine = { host: undefined, started: false };
  const env = { ...process.env };
  const workDir = resolve(env.SKIPPY_WORK_DIR ?? join(agentHome, "work"));
  const agentLogs = new DailyFileStream(join(config.dataDir, "logs"), "skippy");
  // Passed on as SIGTERM: a Ctrl-C reached the children already as SIGINT, and each stops once per signal.
  const stop = () => {
    stopping ??= (async () => {
      events.abort();
      agent?.kill("SIGTERM");
      if (agent) await exited(agent);
      controller.child.kill("SIGTERM");
      await exited(controller.child);
      releaseEngine({ engine, workDir, root, env, say });
      agentLogs.end();
      process.exit(controller.child.exitCode ?? 0);
    })();
  };
  for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, stop);
  controller.child.on("exit", (code) => {
    if (!stopping && agent) say(`the controller exited (${code ?? "signal"}); stopping the agent`);
    stop();
  });

  const state = await controller.ready.catch((e) => {
    say(e.message);
    // A token minted by a start that then could not serve is stored already: shown now, or never.
    if (options.logFormat === "text" && controller.state.banner.length > 0) out.block(["", ...controller.state.banner, ""]);
    return undefined;
  });
  if (!state) return;
  const url = state.meta.url;
  const caFile = state.meta.ca_file;
  const ca = caFile ? readFileSync(caFile, "utf8") : undefined;

  mkdirSync(agentHome, { recursive: true, mode: 0o700 });
  const node = await ensureNodeToken({
    NodeService,
    url,
    ca,
    adminToken: state.adminToken,
    nodeId: NODE_ID,
    agentHome,
    store: storeLabel(config),
    say,
  });
  engine = chooseEngine({ env, root, agentHome, say });
  if (engine.host) env.DOCKER_HOST = engine.host;
  const workDirCreated = !existsSync(workDir);
  mkdirSync(workDir, { recursive: true, mode: 0o700 });
  env.SKIPPY_ALLOW_COMMANDS ??= "uptime,df";
  if (node && !stopping) {
    const showAgent = logLineFilter({ program: `agent ${NODE_ID}`, format: options.logFormat, level, quietCalls });
    agent = startAgent({ url, caFile, tokenFile: node.tokenFile, workDir, env, logs: agentLogs, showLine: showAgent });
    agent.on("exit", (code, signal) => {
      if (!stopping) say(`the agent exited (${signal ?? code})`);
    });
  }
  printSummary({ config, controller: state, url, caFile, engine, node, workDir, workDirCreated, env });
  following = Boolean(state.adminToken);
  if (state.adminToken) void followEvents({ EventService, url, ca, adminToken: state.adminToken, print: out.line, signal: events.signal });
  else say("deploy events show here when SKIPPER_ADMIN_TOKEN is set; meanwhile they are in the log files and `npx skipper events`");
}

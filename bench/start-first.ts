// Start-first benchmark (npm run bench:start-first). Run on demand; it prints figures.
//
// One web service (busybox httpd, stop_grace_period 1s) behind a real HAProxy that skippy's code
// drives (master-worker, skippy's own configuration file), four keep-alive clients requesting it
// through the proxy the whole time. Measured, for start-first and then stop-first updates of the
// same service (each update a deploy_service order run by the agent's executor on a real engine):
//
//   latency before     the clients' request latency (p50, p99) for 3 s with no update
//   latency during     their latency (p50, p99) and failed requests while an update runs
//   order -> old gone  from the order's start until the engine no longer lists the old container
//   (and, as the ceiling of the same run: a bare `compose up -d` of the same change, which is
//   what stop-first runs)
//
// Options: --updates <n> per order kind (default 5).
import { spawn, type ChildProcess, execFileSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { Agent, request } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import { execa } from "execa";
import { pino } from "pino";
import { WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { probeDockerHost } from "../agent/engine/docker-host.js";
import type { DeployContext } from "../agent/executors/deploy-context.js";
import { deployService } from "../agent/executors/deploy-service.js";
import { hostProxyFor } from "../agent/proxy/proxy-settings.js";
import { percentile } from "./measure.js";

const { values } = parseArgs({ options: { updates: { type: "string", default: "5" } } });
const UPDATES = Number(values.updates);
const root = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..");
const log = (m: string) => console.error(`bench:start-first: ${m}`);
const PROJECT = `bench-sf-${process.pid}`;
const HOST = "bench.test";

const out = execFileSync(join(root, "scripts", "docker-engine.sh"), ["start"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
const engine = /DOCKER_HOST=(\S+)/.exec(out)?.[1];
if (!engine) throw new Error("bench:start-first needs a Docker engine (scripts/docker-engine.sh start)");
process.env.DOCKER_HOST = engine;
const haproxyBin = ["/usr/sbin/haproxy", "haproxy"].find((b) => {
  try {
    execFileSync(b, ["-v"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
});
if (!haproxyBin) throw new Error("bench:start-first needs haproxy (apt-get install haproxy)");

function file(v: string, startFirst: boolean): string {
  return [
    "services:",
    "  web:",
    "    image: skipper-busybox:local",
    `    command: ["sh", "-c", "mkdir -p /www && echo ${v} > /www/index.html && exec httpd -f -p 8080 -h /www"]`,
    "    stop_grace_period: 1s",
    ...(startFirst ? ["    deploy: {update_config: {order: start-first}}"] : []),
    "",
  ].join("\n");
}

let n = 0;
const order = (v: string, startFirst: boolean) =>
  create(WorkOrderSchema, {
    id: `wo-bench-${++n}`,
    type: WorkOrderType.DEPLOY_SERVICE,
    target: { tenantId: PROJECT, nodeId: "bench" },
    desiredState: {
      tenantId: PROJECT,
      specHash: `h-${n}`,
      composeProject: { projectName: PROJECT, composeFile: file(v, startFirst) },
      routes: [{ host: HOST, service: "web", port: 8080, drainSeconds: 10 }],
    },
  });

/** Four keep-alive clients; each request's latency (ms) and failures, until stopped. */
function load(port: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: 4 });
  const t = { latencies: [] as number[], failed: 0 };
  let running = true;
  const one = () =>
    new Promise<void>((done) => {
      const t0 = performance.now();
      const fail = () => {
        t.failed++;
        done();
      };
      const req = request({ host: "127.0.0.1", port, path: "/", agent, headers: { host: HOST } }, (res) => {
        res.resume();
        res.on("end", () => {
          if (res.statusCode === 200) t.latencies.push(performance.now() - t0);
          else t.failed++;
          done();
        });
        res.on("close", () => !res.complete && fail());
      });
      req.setTimeout(5000, () => req.destroy(new Error("timeout")));
      req.on("error", fail);
      req.end();
    });
  const loops = Array.from({ length: 4 }, async () => {
    while (running) await one();
  });
  return {
    t,
    async stop() {
      running = false;
      await Promise.all(loops);
      agent.destroy();
    },
  };
}

const names = async () =>
  (await execa("docker", ["ps", "-a", "--filter", `label=com.docker.compose.project=${PROJECT}`, "--format", "{{.Names}}"])).stdout
    .split("\n")
    .filter(Boolean);
const ms = (xs: number[], p: number) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    p,
  ).toFixed(1);

const dir = await mkdtemp(join(tmpdir(), "bench-sf-"));
let haproxy: ChildProcess | undefined;
try {
  const front = 18000 + (process.pid % 1000);
  const socket = join(dir, "admin.sock");
  const master = join(dir, "master.sock");
  const global = [
    "global",
    `  stats socket ${socket} mode 600 level admin expose-fd listeners`,
    "defaults",
    "  timeout connect 2s",
    "  timeout client 30s",
    "  timeout server 30s",
    "",
  ];
  await writeFile(join(dir, "base.cfg"), global.join("\n"));
  await writeFile(join(dir, "skipper.cfg"), "");
  haproxy = spawn(haproxyBin, ["-W", "-db", "-S", master, "-f", join(dir, "base.cfg"), "-f", join(dir, "skipper.cfg")], {
    stdio: "ignore",
  });
  const proxy = hostProxyFor({ runtime: socket, configPath: join(dir, "skipper.cfg"), listen: `127.0.0.1:${front}`, master });
  for (let i = 0; i < 100 && !(await proxy.describe().catch(() => "")); i++) await new Promise((r) => setTimeout(r, 100));
  const ctx: DeployContext = {
    workDir: join(dir, "work"),
    docker: await probeDockerHost(),
    composeTimeoutMs: 120_000,
    readyTimeoutMs: 30_000,
    log: pino({ level: "silent" }),
    proxy,
  };
  for (const startFirst of [true, false]) {
    const label = startFirst ? "start-first" : "stop-first";
    const first = await deployService(order(`${label}-0`, startFirst), ctx);
    if (!first.result.success) throw new Error(first.result.message);
    const quiet = load(front);
    await new Promise((r) => setTimeout(r, 3000));
    await quiet.stop();
    const during = { latencies: [] as number[], failed: 0, gone: [] as number[] };
    for (let i = 1; i <= UPDATES; i++) {
      const old = await names();
      const traffic = load(front);
      const t0 = performance.now();
      const goneAt = (async () => {
        while ((await names()).some((c) => old.includes(c))) await new Promise((r) => setTimeout(r, 50));
        return performance.now() - t0;
      })();
      const r = await deployService(order(`${label}-${i}`, startFirst), ctx);
      if (!r.result.success) throw new Error(r.result.message);
      during.gone.push(await goneAt);
      await traffic.stop();
      during.latencies.push(...traffic.t.latencies);
      during.failed += traffic.t.failed;
    }
    log(`${label}: ${UPDATES} updates`);
    console.log(
      `${label.padEnd(11)}  before p50 ${ms(quiet.t.latencies, 50)} ms p99 ${ms(quiet.t.latencies, 99)} ms (${quiet.t.latencies.length} requests)` +
        ` | during p50 ${ms(during.latencies, 50)} ms p99 ${ms(during.latencies, 99)} ms, ${during.failed} failed of ${during.latencies.length + during.failed}` +
        ` | order -> old container gone p50 ${ms(during.gone, 50)} ms max ${ms(during.gone, 100)} ms`,
    );
  }
  // The ceiling: what a bare `compose up -d` of such a change costs on this engine now.
  const bare = join(dir, "bare");
  const times: number[] = [];
  for (let i = 0; i < UPDATES; i++) {
    await execa("mkdir", ["-p", bare]);
    await writeFile(join(bare, "docker-compose.yml"), file(`bare-${i}`, false));
    const t0 = performance.now();
    await execa("docker-compose", ["-p", `${PROJECT}-bare`, "up", "-d"], { cwd: bare });
    times.push(performance.now() - t0);
  }
  await execa("docker-compose", ["-p", `${PROJECT}-bare`, "down"], { cwd: bare, reject: false });
  console.log(`bare compose up -d of the same change: p50 ${ms(times, 50)} ms max ${ms(times, 100)} ms`);
} finally {
  const left = await names().catch(() => []);
  if (left.length > 0) await execa("docker", ["rm", "-f", ...left], { reject: false });
  haproxy?.kill("SIGTERM");
  await rm(dir, { recursive: true, force: true });
}

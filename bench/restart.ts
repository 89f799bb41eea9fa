// Restart benchmark (npm run bench:restart). Run on demand; it prints figures.
//
// Writes (once, then reuses) a data directory with --resources resources (default 10,000) and
// --orders finished work orders (default 100,000) with --events-per-order events each (default
// 9, what one deploy records; 0 for none), spread over --days days (default 25, inside the default 30-day retention), then starts the
// built controller on it --runs times (default 5, after one warm-up start that makes its TLS
// material and lets the reconciler settle). Measured per start, from spawning the process:
//
//   listen   until it logs that it listens
//   ready    until an authenticated HealthService.Check, a ListResources page and a
//            ListWorkOrders page of one tenant have all answered
//   rss      the controller's resident memory once ready, and 5 s later
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import type { DescService } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { percentile, procStats } from "./measure.js";
import { writeHistory, type HistoryShape } from "./restart-data.js";

const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const ADMIN = "bench-admin-token-0123456789abcdef";
const { values } = parseArgs({
  options: {
    resources: { type: "string", default: "10000" },
    orders: { type: "string", default: "100000" },
    "events-per-order": { type: "string", default: "9" },
    days: { type: "string", default: "25" },
    runs: { type: "string", default: "5" },
    // Writes a V8 CPU profile of each start to this directory.
    "cpu-prof": { type: "string" },
  },
});
const shape: HistoryShape = {
  resources: Number(values.resources),
  orders: Number(values.orders),
  eventsPerOrder: Number(values["events-per-order"]),
  days: Number(values.days),
};
const RUNS = Number(values.runs);

interface Start {
  listenMs: number;
  readyMs: number;
  rssMb: number;
  rssLaterMb: number;
}

/** The data directory for `shape`, written on first use. */
async function dataDirFor(s: HistoryShape): Promise<string> {
  const base = join(resolve(dist, ".."), ".bench-data-restart", `r${s.resources}-o${s.orders}-e${s.eventsPerOrder}-d${s.days}`);
  const marker = join(base, "shape.json");
  const dataDir = join(base, "data");
  if (existsSync(marker)) return dataDir;
  await rm(base, { recursive: true, force: true });
  await mkdir(base, { recursive: true });
  const t0 = performance.now();
  const files = await writeHistory(dataDir, s);
  console.log(`wrote ${files.toLocaleString("en")} files in ${((performance.now() - t0) / 1000).toFixed(1)} s to ${dataDir}`);
  await writeFile(marker, JSON.stringify(s));
  return dataDir;
}

async function startOnce(dataDir: string, run: number): Promise<Start> {
  const profile = values["cpu-prof"]
    ? ["--cpu-prof", "--cpu-prof-dir", resolve(values["cpu-prof"]), `--cpu-prof-name=restart-${run}.cpuprofile`]
    : [];
  const t0 = performance.now();
  const child = spawn(
    process.execPath,
    [...profile, join(dist, "controller", "main.js"), "--data-dir", dataDir, "--listen", "127.0.0.1:0"],
    {
      env: { ...process.env, SKIPPER_ADMIN_TOKEN: ADMIN },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  try {
    const url = await listening(child);
    const listenMs = performance.now() - t0;
    const ca = await readFile(join(dataDir, "tls", "ca.crt"), "utf8");
    await clientFor(HealthService, url, ca).check({});
    await clientFor(ResourceService, url, ca).listResources({ pageSize: 100 });
    await clientFor(WorkOrderService, url, ca).listWorkOrders({ tenantId: "tenant-1", pageSize: 100 });
    const readyMs = performance.now() - t0;
    const rssMb = procStats(child.pid!).rssMb;
    await new Promise((r) => setTimeout(r, 5_000));
    return { listenMs, readyMs, rssMb, rssLaterMb: procStats(child.pid!).rssMb };
  } finally {
    await stop(child);
  }
}

function listening(child: ChildProcess): Promise<string> {
  return new Promise((res, rej) => {
    child.once("exit", (c) => rej(new Error(`controller exited ${c} before it listened`)));
    const rl = createInterface({ input: child.stdout! });
    rl.on("line", (line) => {
      try {
        const l = JSON.parse(line) as { action?: string; metadata?: { url?: string } };
        if (l.action !== "listen" || !l.metadata?.url) return;
        rl.removeAllListeners("line");
        child.stdout!.resume();
        res(l.metadata.url);
      } catch {
        // not JSON
      }
    });
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  await exited;
}

function clientFor<S extends DescService>(service: S, url: string, ca: string): Client<S> {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("x-admin-token", ADMIN);
    return next(req);
  };
  return createClient(
    service,
    createConnectTransport({ baseUrl: `${url}/v1`, httpVersion: "2", nodeOptions: { ca }, interceptors: [auth] }),
  );
}

const dataDir = await dataDirFor(shape);
const warm = await startOnce(dataDir, 0);
console.log(`warm-up start: ready in ${(warm.readyMs / 1000).toFixed(2)} s`);
const starts: Start[] = [];
for (let run = 1; run <= RUNS; run++) starts.push(await startOnce(dataDir, run));
const col = (pick: (s: Start) => number) => starts.map(pick).sort((a, b) => a - b);
const row = (name: string, xs: number[], unit: string, digits: number) =>
  `${name.padEnd(28)}${percentile(xs, 50).toFixed(digits).padStart(10)}${Math.max(...xs)
    .toFixed(digits)
    .padStart(10)}  ${unit}`;
console.log(
  `\nrestart: ${shape.resources.toLocaleString("en")} resources, ${shape.orders.toLocaleString("en")} finished orders, ` +
    `${(shape.orders * shape.eventsPerOrder).toLocaleString("en")} events over ${shape.days} days; ${RUNS} starts`,
);
console.log(`${"".padEnd(28)}${"p50".padStart(10)}${"max".padStart(10)}`);
console.log(
  row(
    "listening",
    col((s) => s.listenMs / 1000),
    "s",
    2,
  ),
);
console.log(
  row(
    "first requests answered",
    col((s) => s.readyMs / 1000),
    "s",
    2,
  ),
);
console.log(
  row(
    "RSS when ready",
    col((s) => s.rssMb),
    "MB",
    0,
  ),
);
console.log(
  row(
    "RSS 5 s later",
    col((s) => s.rssLaterMb),
    "MB",
    0,
  ),
);

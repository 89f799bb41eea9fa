// Authentication benchmark (npm run bench:auth; also a section of npm run bench). Run on demand;
// it prints figures. The cost of authentication per call, admin token, API key, node token and
// client certificate (mTLS) side by side on the same RPC, with the same RPC without a credential
// as the ceiling: see auth-cost.ts for what is measured and how.
//
// Options: --concurrency <n> clients per phase (default 16), --round <s> per phase and round
//          (default 0.5), --rounds <n> (default 12), --warmup <s> per phase (default 0.5),
//          --no-heartbeat leaves out Heartbeat (node token against mTLS), --store <url> runs the
//          controller on that PostgreSQL database (e.g. from `scripts/postgres.sh createdb
//          bench_auth`) instead of the file store, --cpu-prof <dir> writes a V8 CPU profile of the
//          controller there. The defaults take about 50 s on two cores.
import { mkdtemp, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { measureAuthCost } from "./auth-cost.js";
import { printAuthCost } from "./auth-figures.js";

const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const { values } = parseArgs({
  options: {
    concurrency: { type: "string", default: "16" },
    // Short rounds, many of them: the machine's other load comes and goes in bursts of seconds,
    // and each burst should fall on every kind alike.
    round: { type: "string", default: "0.5" },
    rounds: { type: "string", default: "12" },
    warmup: { type: "string", default: "0.5" },
    "no-heartbeat": { type: "boolean", default: false },
    store: { type: "string" },
    "cpu-prof": { type: "string" },
  },
});
const concurrency = Number(values.concurrency);
const roundMs = Number(values.round) * 1000;
const rounds = Number(values.rounds);
if (!(concurrency > 0) || !(roundMs > 0) || !(rounds > 0)) throw new Error("--concurrency, --round and --rounds must be positive");

const base = await mkdtemp(join(resolve(dist, ".."), ".bench-data-auth-"));
try {
  const result = await measureAuthCost({
    dist,
    dataDir: join(base, "data"),
    concurrency,
    roundMs,
    rounds,
    warmupMs: Number(values.warmup) * 1000,
    heartbeat: !values["no-heartbeat"],
    controllerArgs: values.store ? ["--store", values.store] : [],
    nodeArgs: values["cpu-prof"] ? ["--cpu-prof", "--cpu-prof-dir", resolve(values["cpu-prof"])] : [],
    log: (l) => console.error(l),
  });
  printAuthCost(result);
} finally {
  await rm(base, { recursive: true, force: true });
}

// A/B controller benchmark (npm run bench:ab -- --baseline <rev> [--rounds n] [-- bench options]).
// Run on demand; it prints figures.
//
// This machine's speed moves by ±15 % between consecutive runs of npm run bench, and by several
// times between days, so a change smaller than that cannot be seen by comparing a run today with
// a figure written down yesterday. This runs the build of a baseline revision and the current
// build one after the other, alternating, for --rounds rounds, with the same npm run bench options
// (bench/run.ts), and prints each phase's figures per round side by side and as medians: ops/s and
// the controller's CPU per operation.
//
// The baseline is checked out into a git worktree under the system's temp directory (reused when
// it is already at that revision), with this checkout's node_modules linked in, and built there;
// the current build is this checkout's dist/ (npm run bench:ab builds it first).
import { execFileSync, spawn } from "node:child_process";
import { existsSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const repo = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..");
const { values, positionals } = parseArgs({
  options: {
    baseline: { type: "string" },
    rounds: { type: "string", default: "2" },
  },
  allowPositionals: true,
});
if (!values.baseline) {
  console.error("usage: npm run bench:ab -- --baseline <git revision> [--rounds n] [-- options of npm run bench]");
  process.exit(2);
}
const rounds = Number(values.rounds);
if (!Number.isInteger(rounds) || rounds < 1 || rounds > 20) throw new Error("--rounds must be 1-20");
const git = (...args: string[]): string => execFileSync("git", ["-C", repo, ...args], { encoding: "utf8" }).trim();
const rev = git("rev-parse", "--verify", `${values.baseline}^{commit}`);

/** The baseline's checkout, built. */
function baselineTree(): string {
  const dir = join(tmpdir(), `skipper-bench-baseline-${rev.slice(0, 12)}`);
  if (!existsSync(join(dir, "dist", "bench", "run.js"))) {
    if (!existsSync(dir)) git("worktree", "add", "--detach", dir, rev);
    if (!existsSync(join(dir, "node_modules"))) symlinkSync(join(repo, "node_modules"), join(dir, "node_modules"), "dir");
    console.error(`bench:ab: building ${rev.slice(0, 12)} in ${dir}`);
    execFileSync("npm", ["run", "build", "--silent"], { cwd: dir, stdio: ["ignore", "ignore", "inherit"] });
  }
  return dir;
}

interface Phase {
  name: string;
  ops: number;
  seconds: number;
  rate: number;
  cpu?: number;
}

/** One npm run bench of the build in `root`; its phases, from the JSON line it prints. */
function runOnce(root: string): Promise<Phase[]> {
  return new Promise((resolvePhases, reject) => {
    const child = spawn(process.execPath, [join(root, "dist", "bench", "run.js"), ...positionals], {
      cwd: root,
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (c: Buffer) => {
      out += c.toString("utf8");
    });
    child.on("error", reject);
    child.on("close", (code) => {
      const line = out.split("\n").find((l) => l.startsWith('{"bench":"controller"'));
      if (code !== 0 || !line) return reject(new Error(`npm run bench in ${root} exited with ${code} and no figures`));
      resolvePhases((JSON.parse(line) as { phases: Phase[] }).phases);
    });
  });
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const cpuMs = (p: Phase): number => (p.cpu === undefined ? Number.NaN : (p.cpu * p.seconds * 1000) / p.ops);

const builds = { baseline: baselineTree(), current: repo };
const results: Record<keyof typeof builds, Phase[][]> = { baseline: [], current: [] };
for (let r = 0; r < rounds; r++) {
  // Which goes first alternates, so neither always runs on the warmer (or busier) machine.
  const order: (keyof typeof builds)[] = r % 2 === 0 ? ["baseline", "current"] : ["current", "baseline"];
  for (const which of order) {
    console.error(`bench:ab: round ${r + 1} of ${rounds}, ${which}`);
    results[which].push(await runOnce(builds[which]));
  }
}

const names = [...new Set(results.current.flat().map((p) => p.name))];
const fmt = (n: number, digits: number): string => (Number.isFinite(n) ? n.toFixed(digits) : "-");
console.log(`baseline ${rev.slice(0, 12)} against the current build, ${rounds} rounds, alternating`);
// Each rate also as a share of the same run's bare echo (the machine's ceiling in that run, which
// moves with it): steadier across rounds than the rate alone.
const ECHO = "echo GetResource";
console.log(
  `| phase | build | ops/s per round | median ops/s | median share of the run's ${ECHO} | cpu ms/op per round | median cpu ms/op |`,
);
console.log("| --- | --- | --- | --- | --- | --- | --- |");
const summary: object[] = [];
for (const name of names) {
  for (const which of ["baseline", "current"] as const) {
    const runs = results[which]
      .map((phases) => ({ p: phases.find((x) => x.name === name), echo: phases.find((x) => x.name === ECHO) }))
      .filter((r): r is { p: Phase; echo: Phase | undefined } => r.p !== undefined);
    const rates = runs.map((r) => r.p.rate);
    const shares = runs.map((r) => (r.echo ? r.p.rate / r.echo.rate : Number.NaN));
    const cpus = runs.map((r) => cpuMs(r.p));
    console.log(
      `| ${name} | ${which} | ${rates.map((x) => fmt(x, 0)).join(", ")} | ${fmt(median(rates), 0)} | ${fmt(100 * median(shares), 0)} % | ${cpus.map((x) => fmt(x, 2)).join(", ")} | ${fmt(median(cpus), 2)} |`,
    );
    summary.push({ phase: name, build: which, rates, echo_shares: shares, cpu_ms_per_op: cpus });
  }
}
console.log(JSON.stringify({ bench: "ab", baseline: rev, rounds, results: summary }));

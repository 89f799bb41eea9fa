// The figures of bench:rollout (rollout.ts): what each timed change measured, and how they are
// printed: a table of the runs, the waves of the first B run, the targets of issues 19 and 38
// (the median of the rounds' overheads), and one JSON line.
import { machineBusy } from "./measure.js";

/** What one timed change measured. */
export interface RunFigures {
  name: string;
  version: string;
  /** A change with the four-wave policy (B), or without a policy (A). */
  withWaves: boolean;
  seconds: number;
  lastReportS: number;
  /** When the change's rollout record says it finished (SUCCEEDED), from the change. */
  rolloutDoneS: number;
  orders: number;
  cpuPercent: number;
  peakRssMb: number;
  benchCpuPercent: number;
  /** Time to the answer of the run's reports (retries included), p50 / p99 / max, ms; and the retries of claims and reports. */
  reportMs: [number, number, number];
  retries: number;
  /** CPU every other process on the machine used meanwhile, as % of one core (the machine is shared). */
  otherCpuPercent: number;
  /** Per wave: when it started, when its last order was issued, when it was done (s from the change). */
  waves: { name: string; nodes: number; startS: number; issuedS: number; doneS: number }[];
}

/** How the fleet was set up. */
export interface Setup {
  nodes: number;
  workers: number;
  applyMs: number;
  heartbeatMs: number;
  transport: string;
}

/** Each B run against the mean of the A runs beside it (the A before alone when none follows): overhead %. */
export function overheads(runs: RunFigures[]): { b: RunFigures; baseline: number; percent: number; vsBefore: number }[] {
  const out: { b: RunFigures; baseline: number; percent: number; vsBefore: number }[] = [];
  runs.forEach((b, i) => {
    const before = runs[i - 1];
    if (!b.withWaves || !before || before.withWaves) return;
    const after = runs[i + 1] && !runs[i + 1]!.withWaves ? runs[i + 1] : undefined;
    const baseline = after ? (before.seconds + after.seconds) / 2 : before.seconds;
    out.push({
      b,
      baseline,
      percent: (100 * (b.seconds - baseline)) / baseline,
      vsBefore: (100 * (b.seconds - before.seconds)) / before.seconds,
    });
  });
  return out;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  if (s.length === 0) return Number.NaN;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** Prints the runs as a table, the rounds' overheads and their median against the targets, and one JSON line. */
export function printFigures(runs: RunFigures[], setup: Setup): void {
  const rounds = overheads(runs);
  const overhead = median(rounds.map((r) => r.percent));
  const worstCpu = Math.max(...runs.map((r) => r.cpuPercent));
  const fmt = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : "-");
  console.log(
    `rollout benchmark: ${setup.nodes} simulated nodes on ${setup.transport}, ${setup.workers} agent workers, apply ${setup.applyMs} ms, heartbeats every ${setup.heartbeatMs / 1000} s, node ${process.version}`,
  );
  console.log(
    `| run | change -> done everywhere | last report answered | rollout finished_at | orders | report answered p50 / p99 / max | retried calls | controller CPU | controller peak RSS | bench CPU | other processes (${machineBusy().cores} cores) |`,
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  for (const r of runs)
    console.log(
      `| ${r.name} | ${fmt(r.seconds)} s | ${fmt(r.lastReportS)} s | ${fmt(r.rolloutDoneS)} s | ${r.orders} | ${r.reportMs.map((x) => fmt(x, 0)).join(" / ")} ms | ${r.retries} | ${fmt(r.cpuPercent, 0)}% of a core | ${fmt(r.peakRssMb, 0)} MB | ${fmt(r.benchCpuPercent, 0)}% | ${fmt(r.otherCpuPercent, 0)}% |`,
    );
  console.log("");
  const b = runs.find((r) => r.withWaves);
  if (b)
    console.log(
      `waves of run ${b.name} (s from the change): ${b.waves.map((w) => `${w.name} ${w.nodes} nodes ${fmt(w.startS)}-${fmt(w.doneS)} (last order issued ${fmt(w.issuedS)})`).join("; ")}`,
    );
  for (const r of rounds)
    console.log(
      `${r.b.name}: ${fmt(r.b.seconds)} s against ${fmt(r.baseline)} s without waves (the A runs beside it): ${fmt(r.percent, 1)}%`,
    );
  console.log("");
  console.log("| target | value | met |");
  console.log("|---|---|---|");
  console.log(
    `| waves add < 10 % beyond configured bake (0 s): median over ${rounds.length} rounds of (B - mean(A before, A after)) / mean | ${fmt(overhead, 1)}% | ${overhead < 10 ? "yes" : "NO"} |`,
  );
  console.log(`| controller < 50 % of one core (worst run) | ${fmt(worstCpu, 0)}% | ${worstCpu < 50 ? "yes" : "NO"} |`);
  console.log(
    JSON.stringify({
      bench: "rollout",
      nodes: setup.nodes,
      transport: setup.transport,
      workers: setup.workers,
      apply_ms: setup.applyMs,
      node: process.version,
      overhead_percent: overhead,
      round_overheads_percent: rounds.map((r) => r.percent),
      runs,
    }),
  );
}

// The figures of bench:rollout (rollout.ts): what each timed change measured, and how they are
// printed: a table of the runs, the waves of run B, the targets of issue 19, and one JSON line.
import { machineBusy } from "./measure.js";

/** What one timed change measured. */
export interface RunFigures {
  name: string;
  version: string;
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
}

/** Prints the runs (A, B, then A' when run) as tables, the targets, and one JSON line. */
export function printFigures(runs: RunFigures[], setup: Setup): void {
  const [a, b, control] = runs as [RunFigures, RunFigures, RunFigures | undefined];
  // With A' run, B is set against the mean of the runs before and after it: a baseline that
  // drifts steadily between runs (the store grows; every tenant snapshot holds the tenant's
  // rollout history) then cancels out. Without it, against A alone.
  const baseline = control ? (a.seconds + control.seconds) / 2 : a.seconds;
  const overhead = (100 * (b.seconds - baseline)) / baseline;
  const overheadA = (100 * (b.seconds - a.seconds)) / a.seconds;
  const worstCpu = Math.max(...runs.map((r) => r.cpuPercent));
  const fmt = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : "-");
  console.log(
    `rollout benchmark: ${setup.nodes} simulated nodes, ${setup.workers} agent workers, apply ${setup.applyMs} ms, heartbeats every ${setup.heartbeatMs / 1000} s, node ${process.version}`,
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
  console.log(
    `waves of run B (s from the change): ${b.waves.map((w) => `${w.name} ${w.nodes} nodes ${fmt(w.startS)}-${fmt(w.doneS)} (last order issued ${fmt(w.issuedS)})`).join("; ")}`,
  );
  if (control) console.log(`baseline spread: A' differs from A by ${fmt((100 * (control.seconds - a.seconds)) / a.seconds, 1)}%`);
  console.log("");
  console.log("| target | value | met |");
  console.log("|---|---|---|");
  const against = control ? "(B - mean(A, A')) / mean(A, A')" : "(B - A) / A";
  console.log(`| waves add < 10 % beyond configured bake (0 s): ${against} | ${fmt(overhead, 1)}% | ${overhead < 10 ? "yes" : "NO"} |`);
  if (control) console.log(`| (the same against A alone: (B - A) / A) | ${fmt(overheadA, 1)}% | |`);
  console.log(`| controller < 50 % of one core (worst run) | ${fmt(worstCpu, 0)}% | ${worstCpu < 50 ? "yes" : "NO"} |`);
  console.log(
    JSON.stringify({
      bench: "rollout",
      nodes: setup.nodes,
      workers: setup.workers,
      apply_ms: setup.applyMs,
      node: process.version,
      overhead_percent: overhead,
      overhead_vs_a_percent: overheadA,
      runs,
    }),
  );
}

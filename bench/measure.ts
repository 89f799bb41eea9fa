// What every benchmark measures with: percentiles of sorted samples, and a process's RSS and CPU
// time from /proc (Linux).
import { readFileSync } from "node:fs";

/** The p-th percentile (0-100) of ascending `sorted`; NaN when there are no samples. */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** A process's resident memory (MB) and the CPU seconds (user + system) it has used so far. */
export function procStats(pid: number): { rssMb: number; cpuSeconds: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // utime and stime, in clock ticks (100 Hz).
  return { rssMb: rssKb / 1024, cpuSeconds: (Number(f[11]) + Number(f[12])) / 100 };
}

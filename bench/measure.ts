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

/** CPU seconds the whole machine has spent busy (all cores, from /proc/stat), and its core count. */
export function machineBusy(): { busySeconds: number; cores: number } {
  const lines = readFileSync("/proc/stat", "utf8").split("\n");
  // user nice system idle iowait irq softirq steal, in clock ticks (100 Hz).
  const f = lines[0]!.trim().split(/\s+/).slice(1).map(Number);
  const busy = f[0]! + f[1]! + f[2]! + f[5]! + f[6]! + f[7]!;
  return { busySeconds: busy / 100, cores: lines.filter((l) => /^cpu\d/.test(l)).length };
}

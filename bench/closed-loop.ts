// The closed loop the throughput phases run: N workers, each calling again as soon as its answer
// is back, for a fixed time; calls/s, latency percentiles and the CPU the server and this process
// spent. Shared by npm run bench (run.ts) and its authentication section (auth-cost.ts).
import { percentile, procStats } from "./measure.js";

/** One phase's figures. */
export interface PhaseResult {
  name: string;
  ops: number;
  seconds: number;
  rate: number;
  p50: number;
  p99: number;
  /** The server's CPU use over the phase (1 = one core busy), when its CPU was watched. */
  cpu?: number;
  clientCpu: number;
}

/**
 * Runs `op(worker)` in a closed loop on `workers` workers for `ms` (or until op returns false);
 * each call's latency (ms) is also appended to `samples` when given.
 */
export async function closedLoop(
  name: string,
  workers: number,
  ms: number,
  op: (worker: number) => Promise<boolean | undefined>,
  cpuOf?: () => number,
  samples?: number[],
): Promise<PhaseResult> {
  const latencies: number[] = [];
  const cpu0 = cpuOf?.();
  const client0 = process.cpuUsage();
  const start = performance.now();
  const deadline = start + ms;
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        const more = await op(w);
        if (more === false) return;
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  if (samples) for (const l of latencies) samples.push(l);
  latencies.sort((a, b) => a - b);
  const cpu = cpuOf && cpu0 !== undefined ? (cpuOf() - cpu0) / seconds : undefined;
  const used = process.cpuUsage(client0);
  const clientCpu = (used.user + used.system) / 1e6 / seconds;
  return {
    name,
    ops: latencies.length,
    seconds,
    rate: latencies.length / seconds,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    cpu,
    clientCpu,
  };
}

/** CPU seconds (user + system) a process has used so far, from /proc; NaN once it is gone. */
export function cpuSeconds(pid: number): () => number {
  return () => {
    try {
      return procStats(pid).cpuSeconds;
    } catch {
      return NaN;
    }
  };
}

// The job queue Skipper's order path is compared with: pg-boss on the same PostgreSQL, in the same
// run. Each worker fetches one job and completes it (claim + complete, the equivalent of an agent's
// claim + result), in a closed loop, like bench/run.ts's claim phase; the queue is filled first so
// workers never wait for work.
import PgBoss from "pg-boss";

export interface QueueFigures {
  ops: number;
  seconds: number;
  rate: number;
  p50: number;
  p99: number;
}

/** Fills a fresh queue, then finishes jobs with `workers` workers for `ms`. */
export async function pgBossClaimComplete(url: string, workers: number, ms: number, expectedRate = 5000): Promise<QueueFigures> {
  const boss = new PgBoss({ connectionString: url, max: workers + 4, schema: "pgboss_bench" });
  boss.on("error", () => undefined);
  await boss.start();
  try {
    const queue = `bench-${Date.now()}`;
    await boss.createQueue(queue);
    // Enough jobs for the whole phase at well above the rate expected.
    const jobs = Math.ceil((expectedRate * ms) / 1000);
    for (let i = 0; i < jobs; i += 1000) {
      await boss.insert(Array.from({ length: Math.min(1000, jobs - i) }, (_, k) => ({ name: queue, data: { n: i + k } })));
    }
    const latencies: number[] = [];
    const start = performance.now();
    const deadline = start + ms;
    let drained = false;
    await Promise.all(
      Array.from({ length: workers }, async () => {
        while (performance.now() < deadline) {
          const t0 = performance.now();
          const [job] = await boss.fetch<{ n: number }>(queue, { batchSize: 1 });
          if (!job) {
            drained = true;
            return;
          }
          await boss.complete(queue, job.id);
          latencies.push(performance.now() - t0);
        }
      }),
    );
    const seconds = (performance.now() - start) / 1000;
    if (drained) console.error(`pg-boss: the queue of ${jobs} jobs ran dry before the phase ended; the rate is a floor`);
    latencies.sort((a, b) => a - b);
    const at = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN;
    return { ops: latencies.length, seconds, rate: latencies.length / seconds, p50: at(50), p99: at(99) };
  } finally {
    await boss.stop({ graceful: false, wait: true }).catch(() => undefined);
  }
}

// The job queue Skipper's order path is compared with: pg-boss on the same PostgreSQL, in the same
// run. Each worker fetches one job and completes it (claim + complete, the equivalent of an agent's
// claim + result), in a closed loop, like bench/run.ts's claim phase. A producer keeps a few
// thousand jobs queued, topping up as workers drain them: workers never wait for work, and the
// queue stays the size a busy one has (pg-boss's fetch slows as its table grows: with 50,000 jobs
// queued up front it finished a tenth as many per second here).
import PgBoss from "pg-boss";

export interface QueueFigures {
  ops: number;
  seconds: number;
  rate: number;
  p50: number;
  p99: number;
}

const QUEUED = 2000;

/** Finishes jobs of a fresh queue with `workers` workers for `ms`. */
export async function pgBossClaimComplete(url: string, workers: number, ms: number): Promise<QueueFigures> {
  const boss = new PgBoss({ connectionString: url, max: workers + 4, schema: "pgboss_bench" });
  boss.on("error", () => undefined);
  await boss.start();
  try {
    const queue = `bench-${Date.now()}`;
    await boss.createQueue(queue);
    let sent = 0;
    const fill = async (n: number) => {
      await boss.insert(Array.from({ length: n }, () => ({ name: queue, data: { n: sent++ } })));
    };
    await fill(QUEUED);
    const latencies: number[] = [];
    const start = performance.now();
    const deadline = start + ms;
    let drained = false;
    const producer = (async () => {
      while (performance.now() < deadline) {
        const short = QUEUED - (sent - latencies.length); // jobs queued below QUEUED
        if (short > 0) await fill(Math.min(short, 1000));
        else await new Promise((r) => setTimeout(r, 5));
      }
    })();
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
    await producer;
    if (drained) console.error("pg-boss: the queue ran dry before the phase ended; the rate is a floor");
    latencies.sort((a, b) => a - b);
    const at = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN;
    return { ops: latencies.length, seconds, rate: latencies.length / seconds, p50: at(50), p99: at(99) };
  } finally {
    await boss.stop({ graceful: false, wait: true }).catch(() => undefined);
  }
}

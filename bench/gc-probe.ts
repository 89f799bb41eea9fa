// Preloaded (node --expose-gc --import …/gc-probe.js, gc-memory.ts probeArgs) into a process a bench measures:
// on SIGUSR2 it collects garbage and writes the process's memory, after the collection, as one
// JSON line to the file BENCH_PROBE_FILE names. So a heap figure is what is held, not what is
// waiting for the collector.
import { writeFileSync } from "node:fs";

const file = process.env.BENCH_PROBE_FILE;
const gc = (globalThis as { gc?: () => void }).gc;
if (file && gc) {
  let seq = 0;
  process.on("SIGUSR2", () => {
    gc();
    const m = process.memoryUsage();
    writeFileSync(
      file,
      `${JSON.stringify({ seq: ++seq, rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external })}\n`,
    );
  });
}

// Reads what gc-probe.ts writes: the memory a process holds after a garbage collection. The
// process was started with PROBE_ARGS (node --expose-gc --import …/gc-probe.js) and
// BENCH_PROBE_FILE naming `probeFile`; SIGUSR2 asks it for a collection and a new line.
import type { ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

/** Node options that preload gc-probe.ts from `dist` (dist/bench/gc-probe.js). */
export function probeArgs(dist: string): string[] {
  return ["--expose-gc", "--import", pathToFileURL(join(dist, "bench", "gc-probe.js")).href];
}

/**
 * What the probe wrote, in bytes: RSS, the held heap (V8's used heap plus external memory), and
 * V8's committed heap (its pages, used or not: RSS the process keeps for V8 after a collection).
 */
export interface ProbedMemory {
  rss: number;
  heap: number;
  committed: number;
}

/**
 * Signals `child` and waits for its probe's next line in `probeFile`: its memory after a
 * collection; undefined when none came within `timeoutMs` (a process busy for that long).
 */
export async function probeMemory(child: ChildProcess, probeFile: string, timeoutMs = 5000): Promise<ProbedMemory | undefined> {
  // Missing before the first probe, and half-written while the probe writes it.
  const read = async (): Promise<Record<string, number>> => {
    try {
      return JSON.parse(await readFile(probeFile, "utf8")) as Record<string, number>;
    } catch {
      return {};
    }
  };
  const before = (await read()).seq ?? 0;
  child.kill("SIGUSR2");
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const m = await read();
    if ((m.seq ?? 0) > before) return { rss: m.rss!, heap: m.heapUsed! + m.external!, committed: m.heapTotal ?? Number.NaN };
    await new Promise((r) => setTimeout(r, 20));
  }
  return undefined;
}

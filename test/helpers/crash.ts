// For crash-point tests: a process started with SKIPPER_CRASH_AT kills itself at the named point.
// crashOf() watches it from its start and says how it ended, with the point it reported on stderr.
import type { ChildProcess } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { CRASH_ENV, type CrashPointName } from "../../common/crash-points.js";

export interface Ended {
  signal: NodeJS.Signals | null;
  code: number | null;
  /** The crash point the process named before it died, if any. */
  point?: string;
}

/** The environment that arms `point` for its `n`-th pass. */
export function crashAt(point: CrashPointName, n = 1): Record<string, string> {
  return { [CRASH_ENV]: `${point}:${n}` };
}

/** Resolves once `child` has exited and its stderr is closed. Call right after starting it. */
export function crashOf(child: ChildProcess): Promise<Ended> {
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => {
    child.once("close", (code, signal) => {
      const line = stderr.split("\n").find((l) => l.includes('"action":"crash_point"'));
      resolve({ code, signal, point: line ? (JSON.parse(line) as { point: string }).point : undefined });
    });
  });
}

/** Every file below `dir`, relative to it. */
export async function allFiles(dir: string, rel = ""): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(join(dir, rel), { withFileTypes: true })) {
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...(await allFiles(dir, p)));
    else out.push(p);
  }
  return out;
}

/** Store files that are not whole records: temp files, quarantined files, JSON that does not parse. */
export async function halfWritten(dataDir: string): Promise<string[]> {
  const bad: string[] = [];
  for (const f of await allFiles(dataDir)) {
    if (f.endsWith(".tmp") || f.startsWith("quarantine/")) bad.push(f);
    else if (f.endsWith(".json")) {
      try {
        JSON.parse(await readFile(join(dataDir, f), "utf8"));
      } catch {
        bad.push(f);
      }
    }
  }
  return bad;
}

// Every probe of the trust suite, in the order the table lists them, and how one is run: under a
// deadline (a probe that hangs is a failed figure, not a suite that never ends; kill-rounds once
// hung after 7 of 40 rounds), with whatever processes it started and left running killed.
import { readdirSync, readFileSync } from "node:fs";
import { exactly, type Figure, type Probe, type ProbeOptions } from "./figures.js";
import { crashPointsProbe } from "./crash-points.js";
import { credentialLifecycleProbe } from "./credential-lifecycle.js";
import { hostileInputsProbe } from "./hostile-inputs.js";
import { killRoundsProbe } from "./kill-rounds.js";
import { leaseHoldersProbe } from "./lease-holders.js";
import { scopeConfinementProbe } from "./scope-confinement.js";
import { slowClientsProbe } from "./slow-clients.js";
import { stalledMemoryProbe } from "./stalled-memory.js";
import { withTimeout } from "./stalled-streams.js";

export const PROBES: Probe[] = [
  hostileInputsProbe,
  slowClientsProbe,
  stalledMemoryProbe,
  credentialLifecycleProbe,
  scopeConfinementProbe,
  killRoundsProbe,
  crashPointsProbe,
  leaseHoldersProbe,
];

const MINUTE = 60_000;
// How long a probe may run, full and short, when it has no line here: generous, a hang is what is caught.
const DEFAULT_DEADLINE = { full: 10 * MINUTE, short: 3 * MINUTE };
// The short ones match the CI test's own timeouts (test/trust.test.ts passes its timeout less 10 s).
const DEADLINES: Record<string, { full: number; short: number }> = {
  "hostile-inputs": { full: 10 * MINUTE, short: 5 * MINUTE },
  // The idle-session limit alone is 5 minutes.
  "slow-clients": { full: 12 * MINUTE, short: 2 * MINUTE },
  "stalled-memory": { full: 10 * MINUTE, short: 2 * MINUTE },
  "credential-lifecycle": { full: 2 * MINUTE, short: 1.5 * MINUTE },
  "scope-confinement": { full: 2 * MINUTE, short: 1.5 * MINUTE },
  "kill-rounds": { full: 15 * MINUTE, short: 3 * MINUTE },
  "crash-points": { full: 15 * MINUTE, short: 1 * MINUTE },
};

/** How long `name` may run before it counts as hung. */
export function deadlineOf(name: string, short: boolean): number {
  const d = DEADLINES[name] ?? DEFAULT_DEADLINE;
  return short ? d.short : d.full;
}

/**
 * Runs `probe` under `deadlineMs`: its figures, or a failed figure when it hangs or throws. Any
 * process it started that is still running when it returns (or when its deadline passes) is
 * killed and logged; a probe that hung may still hold timers in this process.
 */
export async function runProbe(probe: Probe, opts: ProbeOptions, deadlineMs = deadlineOf(probe.name, opts.short)): Promise<Figure[]> {
  const before = new Set(descendants());
  const figures = await withTimeout(
    probe.run(opts).catch((e: unknown) => {
      opts.log(`threw: ${(e as Error).stack ?? String(e)}`);
      return [exactly(probe.name, `probe ran to its end (it threw: ${(e as Error).message})`, 1, 0)];
    }),
    deadlineMs,
  );
  const left = descendants().filter((pid) => !before.has(pid));
  for (const pid of left) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone already
    }
  }
  if (left.length) opts.log(`killed ${left.length} process(es) it left running: ${left.join(", ")}`);
  if (figures) return figures;
  opts.log(`no answer within ${deadlineMs / 1000} s: counted as hung`);
  return [exactly(probe.name, `probe finished within its deadline (${deadlineMs / 1000} s)`, 1, 0)];
}

/** Every process below this one (children, theirs, ...), from /proc; none where there is no /proc. */
function descendants(): number[] {
  const children = new Map<number, number[]>();
  let entries: string[];
  try {
    entries = readdirSync("/proc").filter((e) => /^\d+$/.test(e));
  } catch {
    return [];
  }
  for (const e of entries) {
    try {
      const stat = readFileSync(`/proc/${e}/stat`, "utf8");
      // pid (comm) state ppid ...: comm may hold spaces and parentheses.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(e)]);
    } catch {
      // exited meanwhile
    }
  }
  const out: number[] = [];
  const walk = (pid: number) => {
    for (const c of children.get(pid) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(process.pid);
  return out;
}

// npm run trust: the trust suite. Each probe starts its own controller process, attacks or breaks
// it, and reports figures with the bar each must meet; this prints them as one Markdown table
// (the README quotes it) and exits 1 when any bar is missed. `--short` is the version CI runs
// (through test/trust.test.ts): fewer rounds and short limits, the same checks.
//
// Options: --short, --only name,name (probes by name), --dir <path> (default: a temp dir),
// --deadline <minutes> (every probe's, in place of its own in probes.ts: one that has not finished
// by then is a failed figure, what it started is killed, and the next probe runs).
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { table, type Figure } from "./figures.js";
import { deadlineOf, PROBES, runProbe } from "./probes.js";

const { values } = parseArgs({
  options: {
    short: { type: "boolean", default: false },
    only: { type: "string" },
    dir: { type: "string" },
    keep: { type: "boolean", default: false },
    deadline: { type: "string" },
  },
});

async function main(): Promise<void> {
  const only = values.only?.split(",").map((s) => s.trim());
  const probes = PROBES.filter((p) => !only || only.includes(p.name));
  if (probes.length === 0) throw new Error(`no probe named ${values.only}; probes: ${PROBES.map((p) => p.name).join(", ")}`);
  const root = values.dir ?? (await mkdtemp(join(tmpdir(), "skipper-trust-")));
  const figures: Figure[] = [];
  for (const probe of probes) {
    const workDir = join(root, probe.name);
    await mkdir(workDir, { recursive: true });
    const started = performance.now();
    process.stderr.write(`[trust] ${probe.name}...\n`);
    const short = values.short ?? false;
    const deadlineMs = values.deadline ? Number(values.deadline) * 60_000 : deadlineOf(probe.name, short);
    const log = (m: string) => process.stderr.write(`[trust] ${probe.name}: ${m}\n`);
    figures.push(...(await runProbe(probe, { short, workDir, log }, deadlineMs)));
    process.stderr.write(`[trust] ${probe.name} done in ${((performance.now() - started) / 1000).toFixed(1)} s\n`);
  }
  process.stdout.write(`\n${table(figures)}\n`);
  if (!values.keep && !values.dir) await rm(root, { recursive: true, force: true });
  const missed = figures.filter((f) => !f.ok);
  if (missed.length > 0) {
    process.stderr.write(`\n[trust] ${missed.length} bar(s) missed: ${missed.map((f) => `${f.section} / ${f.name}`).join("; ")}\n`);
    process.exitCode = 1;
  }
  // A probe that hung may still hold timers or sockets here: the run ends when its table is out.
  process.exit();
}

main().catch((e: unknown) => {
  process.stderr.write(`trust: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});

// The trust suite's short version (what `npm run trust -- --short` prints), as CI runs it: each
// probe starts the built controller (dist/, which `npm test` builds first) as its own process,
// attacks or breaks it, and every figure must meet its bar. The lease-holders probe has its own
// file (trust-lease.test.ts). No Docker engine is needed.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { Probe } from "../bench/trust/figures.js";

type Probes = typeof import("../bench/trust/probes.js");

const roots: string[] = [];
afterAll(async () => {
  if (!process.env.SKIPPER_KEEP_E2E) for (const r of roots) await rm(r, { recursive: true, force: true });
});

async function probe(name: string): Promise<Probe> {
  const { PROBES } = (await import(new URL("../dist/bench/trust/probes.js", import.meta.url).href)) as Probes;
  const p = PROBES.find((x) => x.name === name);
  if (!p) throw new Error(`no probe ${name}`);
  return p;
}

// Each probe runs under a deadline 10 s short of its test's timeout: a hang is a failed figure
// with the probe's log, and the processes it started are killed, rather than a bare timeout.
async function meetsEveryBar(name: string, timeoutMs: number): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), `skipper-trust-${name}-`));
  roots.push(root);
  const log: string[] = [];
  const { runProbe } = (await import(new URL("../dist/bench/trust/probes.js", import.meta.url).href)) as Probes;
  const figures = await runProbe(await probe(name), { short: true, workDir: root, log: (m) => log.push(m) }, timeoutMs - 10_000);
  expect(figures.length).toBeGreaterThan(0);
  const missed = figures.filter((f) => !f.ok).map((f) => `${f.section} / ${f.name}: ${f.value} (bar ${f.target})`);
  expect(missed, log.join("\n")).toEqual([]);
}

/** A test of probe `name` with its timeout (and so its deadline). */
function probeTest(title: string, name: string, timeoutMs: number): void {
  it(title, () => meetsEveryBar(name, timeoutMs), timeoutMs);
}

describe("trust suite (short)", () => {
  // About 11 s here (2026-11-28), with compressed bodies and Connect GETs in every sample.
  probeTest("hostile input at every door: no 5xx, no hang, no crash, no file outside the data directory", "hostile-inputs", 300_000);
  probeTest("slow and silent clients are cut off within their limits", "slow-clients", 120_000);
  probeTest("stalled streams hold next to no memory, on every open method and protocol", "stalled-memory", 120_000);
  probeTest(
    "a rotated token, revoked certificates and a revoked key are refused, their open streams end at once, a used enrollment token is not replayed",
    "credential-lifecycle",
    90_000,
  );
  probeTest(
    "keys scoped to a tenant cannot place it on another tenant's node, give it host privileges or change its policy",
    "scope-confinement",
    90_000,
  );
  probeTest("kill -9 under load loses no acknowledged write, and restarts", "kill-rounds", 180_000);
});

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

async function meetsEveryBar(name: string): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), `skipper-trust-${name}-`));
  roots.push(root);
  const log: string[] = [];
  const figures = await (await probe(name)).run({ short: true, workDir: root, log: (m) => log.push(m) });
  expect(figures.length).toBeGreaterThan(0);
  const missed = figures.filter((f) => !f.ok).map((f) => `${f.section} / ${f.name}: ${f.value} (bar ${f.target})`);
  expect(missed, log.join("\n")).toEqual([]);
}

describe("trust suite (short)", () => {
  it(
    "hostile input at every door: no 5xx, no hang, no crash, no file outside the data directory",
    () => meetsEveryBar("hostile-inputs"),
    // 55 s on a good day, with compressed bodies and Connect GETs in every sample.
    300_000,
  );
  it("slow and silent clients are cut off within their limits", () => meetsEveryBar("slow-clients"), 120_000);
  it("stalled streams hold next to no memory, on every open method and protocol", () => meetsEveryBar("stalled-memory"), 120_000);
  it(
    "ended credentials are refused everywhere, and keys scoped to a tenant stay inside it",
    () => meetsEveryBar("credential-lifecycle"),
    120_000,
  );
  it("kill -9 under load loses no acknowledged write, and restarts", () => meetsEveryBar("kill-rounds"), 180_000);
});

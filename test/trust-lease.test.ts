// The lease-holders trust probe, short version, with the built controller and agents as
// processes (dist/, which `npm test` builds first; the probe finds the programs beside itself).
// No Docker engine: its orders are execute_command runs of `sh`.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

type LeaseHolders = typeof import("../bench/trust/lease-holders.js");

describe("trust: orders executed by two lease holders", () => {
  let root = "";
  afterAll(async () => {
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  });

  it("a frozen or partitioned holder's late result is refused, and every order ends exactly once", async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-trust-lease-"));
    const { leaseHoldersProbe } = (await import(new URL("../dist/bench/trust/lease-holders.js", import.meta.url).href)) as LeaseHolders;
    const log: string[] = [];
    const figures = await leaseHoldersProbe.run({ short: true, workDir: root, log: (m) => log.push(m) });
    const missed = figures.filter((f) => !f.ok).map((f) => `${f.section} / ${f.name}: ${f.value} (bar ${f.target})`);
    expect(missed, log.join("\n")).toEqual([]);
    // Both runs reported, and each took every order over.
    for (const run of ["SIGSTOP", "partition"]) {
      const takeovers = figures.find((f) => f.section === `lease holders (${run})` && f.name.startsWith("leases lapsed"));
      expect(takeovers?.value, run).toBe("2 of 2");
    }
  }, 180_000);
});

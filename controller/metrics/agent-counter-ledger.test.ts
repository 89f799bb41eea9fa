// What each agent report adds to the fleet's sums (agent-counter-ledger.ts): increases between
// consecutive beats of one boot, a boot's first beat in whole, any other beat nothing; so an
// agent's restart never takes a sum back, and two controllers sharing the beats of one agent add
// each increase once between them.
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { AgentCountersSchema, type AgentCounters } from "../../gen/skipper/v1/resource_pb.js";
import { AgentCounterLedger, FORGET_AFTER_MS, type AgentIncrease } from "./agent-counter-ledger.js";
import { ControllerMetrics } from "./controller-metrics.js";
import { parsePrometheusText, sampleSum } from "../../test/helpers/prometheus-text.js";

const AT = new Date("2026-11-23T10:00:00Z");

/** Counters of boot `boot` after `acked` answered beats, with `deploys` APPLY_OK deploys and `retries` report retries. */
function beat(boot: string, acked: number, deploys: number, retries = 0): AgentCounters {
  return create(AgentCountersSchema, {
    bootId: `boot-${boot}-0000`,
    heartbeatsAcknowledged: BigInt(acked),
    reportRetries: BigInt(retries),
    orders: deploys > 0 ? [{ type: "deploy_service", code: "APPLY_OK", count: BigInt(deploys) }] : [],
  });
}

const deploys = (i: AgentIncrease) => i.orders.find((o) => o.type === "deploy_service" && o.code === "APPLY_OK")?.count ?? 0;

/** Sums what a run of reports adds: [deploys, starts, report retries]. */
function sum(increases: AgentIncrease[]): [number, number, number] {
  return increases.reduce<[number, number, number]>((s, i) => [s[0] + deploys(i), s[1] + i.starts, s[2] + i.reportRetries], [0, 0, 0]);
}

describe("the agent counter ledger", () => {
  it("a boot's first beat adds all it carries and one start; consecutive beats add their difference", () => {
    const l = new AgentCounterLedger();
    expect(sum([l.record("n1", beat("a", 0, 2, 1), AT)])).toEqual([2, 1, 1]);
    expect(sum([l.record("n1", beat("a", 1, 5, 1), AT)])).toEqual([3, 0, 0]);
    expect(sum([l.record("n1", beat("a", 2, 5, 3), AT)])).toEqual([0, 0, 2]);
    expect(l.latest("n1")?.counters.heartbeatsAcknowledged).toBe(2n);
  });

  it("an agent's restart (a new boot id, counts from zero) never takes the sum back", () => {
    const l = new AgentCounterLedger();
    const before = sum([l.record("n1", beat("a", 0, 0), AT), l.record("n1", beat("a", 1, 7), AT)]);
    expect(before).toEqual([7, 1, 0]);
    // Restarted: its first beat carries 1 deploy of the new boot, then 3.
    const after = sum([l.record("n1", beat("b", 0, 1), AT), l.record("n1", beat("b", 1, 3), AT)]);
    expect(after).toEqual([3, 1, 0]);
  });

  it("a beat sent again after its answer was lost counts from the one before it", () => {
    const l = new AgentCounterLedger();
    l.record("n1", beat("a", 0, 1), AT);
    expect(sum([l.record("n1", beat("a", 1, 2), AT)])).toEqual([1, 0, 0]);
    // The answer to that beat was lost: the next carries the same number of answered beats.
    expect(sum([l.record("n1", beat("a", 1, 4), AT)])).toEqual([2, 0, 0]);
    expect(sum([l.record("n1", beat("a", 2, 4), AT)])).toEqual([0, 0, 0]);
  });

  it("the first beat heard of a boot that is not its first is a base only (a controller's restart adds nothing at once)", () => {
    const l = new AgentCounterLedger();
    expect(sum([l.record("n1", beat("a", 40, 9, 2), AT)])).toEqual([0, 0, 0]);
    expect(sum([l.record("n1", beat("a", 41, 10, 2), AT)])).toEqual([1, 0, 0]);
  });

  it("a gap in answered beats (one went elsewhere) adds nothing across it", () => {
    const l = new AgentCounterLedger();
    l.record("n1", beat("a", 0, 0), AT);
    expect(sum([l.record("n1", beat("a", 3, 5), AT)])).toEqual([0, 0, 0]);
    expect(sum([l.record("n1", beat("a", 4, 6), AT)])).toEqual([1, 0, 0]);
  });

  it("two controllers that each receive some of an agent's beats count every increase once between them", () => {
    const c1 = new AgentCounterLedger();
    const c2 = new AgentCounterLedger();
    // Beats 0..9 of one boot, deploys growing by one a beat; they alternate in runs between the two.
    const route = [c1, c1, c1, c2, c2, c1, c1, c2, c2, c2];
    const added = route.map((c, i) => c.record("n1", beat("a", i, i + 1), AT));
    const [total, starts] = sum(added);
    // The first beat's one deploy, and one for each beat whose previous beat reached the same
    // controller (1, 2, 4, 6, 8, 9); none for 3, 5 and 7, whose previous beat went to the other.
    expect(starts).toBe(1);
    expect(total).toBe(1 + 2 + 1 + 1 + 2);
    expect(total).toBeLessThanOrEqual(10);
  });

  it("keeps nodes apart, and clamps a count that went down within a boot at zero", () => {
    const l = new AgentCounterLedger();
    l.record("n1", beat("a", 0, 3), AT);
    l.record("n2", beat("x", 0, 1), AT);
    expect(sum([l.record("n1", beat("a", 1, 2), AT)])).toEqual([0, 0, 0]);
    expect(sum([l.record("n2", beat("x", 1, 4), AT)])).toEqual([3, 0, 0]);
    expect(l.latest("n3")).toBeUndefined();
  });

  it("forgets a node silent for a day, and counts nothing twice when it comes back", () => {
    const l = new AgentCounterLedger();
    const later = (ms: number) => new Date(AT.getTime() + ms);
    l.record("gone", beat("g", 0, 2), AT);
    l.record("kept", beat("k", 0, 1), AT);
    // "kept" beats on; "gone" (deleted, say) is silent.
    for (let h = 1; h <= 25; h++) l.record("kept", beat("k", h, 1), later(h * 3600_000));
    expect(l.latest("gone")).toBeUndefined();
    expect(l.size).toBe(1);
    // It comes back in the same boot with more done: a base only, as after a controller's restart.
    expect(sum([l.record("gone", beat("g", 30, 5), later(FORGET_AFTER_MS + 2 * 3600_000))])).toEqual([0, 0, 0]);
    expect(sum([l.record("gone", beat("g", 31, 6), later(FORGET_AFTER_MS + 3 * 3600_000))])).toEqual([1, 0, 0]);
    expect(l.size).toBe(2);
  });
});

describe("the agents' sums in the controller's exposition", () => {
  it("are counters labelled only by order type and result code from fixed sets, and a restart does not lower them", async () => {
    const m = new ControllerMetrics({ version: "t", backend: "file", leading: () => true });
    const counters = (boot: string, acked: number, n: number) =>
      create(AgentCountersSchema, {
        bootId: `boot-${boot}-0000`,
        heartbeatsAcknowledged: BigInt(acked),
        leasesLost: BigInt(n),
        orders: [
          { type: "deploy_service", code: "APPLY_OK", count: BigInt(n) },
          { type: "inspect", code: "MADE_UP_CODE", count: 1n },
          { type: "from_a_newer_agent", code: "INSPECT_OK", count: 2n },
        ],
      });
    m.agentReported("node-secret-id", counters("a", 0, 4), AT);
    m.agentReported("node-secret-id", counters("b", 0, 1), AT);
    const text = (await m.exposition()).text;
    expect(text).not.toContain("node-secret-id");
    expect(text).not.toContain("MADE_UP_CODE");
    expect(text).not.toContain("from_a_newer_agent");
    const f = parsePrometheusText(text);
    expect(f.get("skipper_agent_orders_total")?.type).toBe("counter");
    expect(sampleSum(f, "skipper_agent_orders_total", { type: "deploy_service", code: "APPLY_OK" })).toBe(5);
    expect(sampleSum(f, "skipper_agent_orders_total", { type: "inspect", code: "OTHER" })).toBe(2);
    expect(sampleSum(f, "skipper_agent_orders_total", { type: "unknown", code: "INSPECT_OK" })).toBe(4);
    expect(sampleSum(f, "skipper_agent_leases_lost_total")).toBe(5);
    expect(sampleSum(f, "skipper_agent_starts_total")).toBe(2);
    expect(sampleSum(f, "skipper_agent_claims_refused_total")).toBe(0);
    expect(m.agentCounters("node-secret-id")?.counters.bootId).toBe("boot-b-0000");
  });

  it("sum the agents' session reconnects and fallbacks, increases between beats of a boot", async () => {
    const m = new ControllerMetrics({ version: "t", backend: "file", leading: () => true });
    const beat = (acked: number, reconnects: number, fallbacks: number) =>
      create(AgentCountersSchema, {
        bootId: "boot-s-0000",
        heartbeatsAcknowledged: BigInt(acked),
        sessionReconnects: BigInt(reconnects),
        sessionFallbacks: BigInt(fallbacks),
      });
    m.agentReported("n1", beat(0, 2, 1), AT);
    m.agentReported("n1", beat(1, 5, 1), AT);
    m.agentReported("n2", beat(0, 1, 0), AT);
    const f = parsePrometheusText((await m.exposition()).text);
    expect(f.get("skipper_agent_session_reconnects_total")?.type).toBe("counter");
    expect(sampleSum(f, "skipper_agent_session_reconnects_total")).toBe(6);
    expect(sampleSum(f, "skipper_agent_session_fallbacks_total")).toBe(1);
  });
});

// The agent reports a change of its updater's state at once (agent/updater/update-report.ts watch,
// agent/heartbeats.ts): an update CONFIRMED shows on the controller within a poll of state.json
// (500 ms), not at the next heartbeat (a poll interval here of a minute; 10 s on a session). On a
// real temp directory, with the updater's own writes of state.json.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { AgentTally } from "../agent/agent-tally.js";
import { USAGE } from "../agent/config.js";
import { Heartbeats } from "../agent/heartbeats.js";
import { writeUpdaterState } from "../agent/updater/update-files.js";
import { UpdaterLink } from "../agent/updater/update-report.js";
import { AgentUpdateState } from "../gen/skipper/v1/agent_update_pb.js";
import type { HeartbeatRequest } from "../gen/skipper/v1/node_service_pb.js";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import { waitFor } from "./helpers/processes.js";

const A = { version: "0.1.0", sha256: "a".repeat(64) };
const B = { version: "0.2.0", sha256: "b".repeat(64) };
const quiet = pino({ level: "silent" });

let dir: string;
beforeEach(async () => {
  dir = join(await mkdtemp(join(tmpdir(), "skippy-updater-report-")), "updater");
  await writeUpdaterState(dir, { state: "STARTING", target: B, previous: A, running: B, message: "", changedAt: new Date().toISOString() });
});
afterEach(async () => {
  await rm(join(dir, ".."), { recursive: true, force: true });
});

const confirm = () =>
  writeUpdaterState(dir, {
    state: "CONFIRMED",
    target: B,
    previous: A,
    running: B,
    message: "0.2.0 confirmed",
    changedAt: new Date().toISOString(),
  });

/** A supervised agent's heartbeats, polling once a minute, with what they send. */
function heartbeatsOf(link: UpdaterLink) {
  const sent: HeartbeatRequest[] = [];
  const beats = new Heartbeats({
    config: { nodeId: "n1", pollIntervalMs: 60_000, allowCommands: [], allowProcessSources: [], labels: {} } as never,
    clients: { nodes: { heartbeat: async (r: HeartbeatRequest) => (sent.push(r), { pendingWorkOrders: 0 }) } } as never,
    host: { refresh: async () => ({ capabilities: create(NodeCapabilitiesSchema, {}) }) } as never,
    tally: new AgentTally(),
    log: quiet,
    observe: async () => [],
    updater: link,
  });
  return { beats, sent };
}

describe("the agent's watch of state.json", () => {
  it("says nothing before the first report, then calls once state.json is not what was reported", async () => {
    const link = new UpdaterLink(dir, B.sha256, undefined);
    let moved = 0;
    const stop = link.watch(() => moved++, 20);
    try {
      await confirm();
      // Nothing reported yet: the first report reads state.json anyway.
      const first = await link.refresh();
      expect(first.state).toBe(AgentUpdateState.CONFIRMED);
      expect(moved).toBe(0);
      await writeUpdaterState(dir, { state: "ROLLED_BACK", target: B, previous: A, running: A, message: "back", changedAt: "" });
      await waitFor("the watch to see the change", async () => (moved > 0 ? true : undefined), 5_000, 10);
      expect((await link.refresh()).state).toBe(AgentUpdateState.ROLLED_BACK);
      const after = moved;
      await writeUpdaterState(dir, { state: "FAILED", target: B, previous: A, running: A, message: "no", changedAt: "" });
      await waitFor("the watch to see the next change", async () => (moved > after ? true : undefined), 5_000, 10);
    } finally {
      stop();
    }
  });

  it("watches nothing for an agent the updater does not run", () => {
    const link = new UpdaterLink(undefined, undefined, undefined);
    let moved = 0;
    link.watch(() => moved++, 1)();
    expect(moved).toBe(0);
  });
});

describe("a change of the updater's state is reported at once", () => {
  it("polling: a heartbeat out of turn carries CONFIRMED, and the loop's full heartbeat is still due on time", async () => {
    const { beats, sent } = heartbeatsOf(new UpdaterLink(dir, B.sha256, undefined));
    await beats.beat();
    expect(sent.map((r) => r.agentUpdate?.state)).toEqual([AgentUpdateState.STARTING]);
    const untilDue = beats.untilDue();
    const changed = Date.now();
    await confirm();
    const r = await waitFor(
      "a heartbeat with CONFIRMED",
      async () => sent.find((h) => h.agentUpdate?.state === AgentUpdateState.CONFIRMED),
      10_000,
    );
    // The watch looks every 500 ms; the poll interval is a minute.
    expect(Date.now() - changed).toBeLessThan(5_000);
    expect(r.agentUpdate).toMatchObject({ targetVersion: "0.2.0", previousVersion: "0.1.0", message: "0.2.0 confirmed" });
    expect(r.projectsReported).toBe(false);
    // Observing nothing, it does not count as the loop's full heartbeat.
    expect(beats.untilDue()).toBeLessThanOrEqual(untilDue);
    expect(beats.due()).toBe(false);
  });

  it("on a session: the session is asked for a beat, and no unary heartbeat goes out", async () => {
    const { beats, sent } = heartbeatsOf(new UpdaterLink(dir, B.sha256, undefined));
    beats.onSession = true;
    let asked = 0;
    const stop = beats.onUpdaterMoved(() => asked++);
    const first = await beats.report({ observe: true, intervalMs: 10_000 });
    expect(first.agentUpdate?.state).toBe(AgentUpdateState.STARTING);
    await confirm();
    await waitFor("the session asked for a beat", async () => (asked > 0 ? true : undefined), 10_000);
    expect((await beats.report({ observe: false, intervalMs: 10_000 })).agentUpdate?.state).toBe(AgentUpdateState.CONFIRMED);
    stop();
    expect(sent).toEqual([]);
  });
});

describe("the agent's --help", () => {
  it("names skippy updater, what the service runs", () => {
    expect(USAGE).toMatch(/^ {7}skippy updater \[options\] {3}what the service runs/m);
  });
});

// Liveness across a controller restart (a new LivenessMonitor on a store that already holds nodes):
// online nodes get a grace of their intervals to beat again; a node that was offline or degraded
// stays so until it beats, and no node_online event is made up for it.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness, NodeStatusSchema, NodeTransport, ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import { createLogger } from "../../common/logging/logger.js";
import { FileStore } from "../store/file/file-store.js";
import { LivenessMonitor } from "./node-liveness.js";

const NOW = new Date("2026-11-23T10:00:00Z");
const ago = (ms: number) => new Date(NOW.getTime() - ms);

describe("liveness after a restart", () => {
  let dir = "";
  let store: FileStore;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-liveness-"));
    store = new FileStore(dir);
    await store.open();
  });
  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  const node = (id: string, liveness: NodeLiveness, lastBeat: Date, transport = NodeTransport.UNARY, intervalMs = 1000n) =>
    store.createResource(
      create(ResourceSchema, {
        id,
        resourceType: "node",
        desiredState: { kind: { case: "node", value: {} } },
        currentState: {
          kind: {
            case: "node",
            value: { liveness, lastHeartbeatAt: timestampFromDate(lastBeat), heartbeatIntervalMs: intervalMs, transport },
          },
        },
      }),
    );
  const livenessOfNode = async (id: string) => {
    const r = await store.getResource("node", id);
    return r?.currentState?.kind.case === "node" ? r.currentState.kind.value.liveness : undefined;
  };

  it("keeps an offline node offline and a live one online, and makes up no event", async () => {
    await node("gone", NodeLiveness.OFFLINE, ago(3_600_000));
    await node("slow", NodeLiveness.DEGRADED, ago(4500));
    // Its stored beat lags (quiet beats are written at most every minute): still online.
    await node("live", NodeLiveness.ONLINE, ago(30_000));
    const { logger } = createLogger({ service: "t", stdout: false, level: "silent" });
    let changes = 0;
    const monitor = new LivenessMonitor({ store, logger, now: () => NOW, onChange: () => changes++ });
    await monitor.check();
    expect(await livenessOfNode("gone")).toBe(NodeLiveness.OFFLINE);
    expect(await livenessOfNode("slow")).toBe(NodeLiveness.DEGRADED);
    expect(await livenessOfNode("live")).toBe(NodeLiveness.ONLINE);
    const events = (await store.listEvents({ pageSize: 100 })).items.map((e) => `${e.type} ${e.resourceId}`);
    expect(events).not.toContain("node_online gone");
    expect(events).not.toContain("node_online slow");
    expect(changes).toBe(0);
  });

  it("gives nodes last seen on a session the reconnect window after a restart, then marks the silent ones together", async () => {
    for (let i = 0; i < 150; i++) await node(`s${i}`, NodeLiveness.ONLINE, ago(5_000), NodeTransport.SESSION, 10_000n);
    let now = NOW;
    const { logger } = createLogger({ service: "t", stdout: false, level: "silent" });
    let changes = 0;
    const monitor = new LivenessMonitor({ store, logger, now: () => now, onChange: () => changes++ });
    await monitor.check();
    // Back within the window: online, nothing written.
    now = new Date(NOW.getTime() + 50_000);
    monitor.session({ nodeId: "s0", controller: "sole", session: "x", open: true, at: now, intervalMs: 10_000 });
    await monitor.check();
    expect(changes).toBe(0);
    now = new Date(NOW.getTime() + 61_000);
    await monitor.check();
    expect(changes).toBe(1);
    expect(await livenessOfNode("s0")).toBe(NodeLiveness.ONLINE);
    expect(await livenessOfNode("s1")).toBe(NodeLiveness.DEGRADED);
    expect(await livenessOfNode("s149")).toBe(NodeLiveness.DEGRADED);
    const events = (await store.listEvents({ pageSize: 500 })).items.filter((e) => e.type === "node_degraded");
    expect(events).toHaveLength(149);
    expect(events[0]?.data?.cause).toBe("controller_restart");
  });

  it("takes a node offline 15 s after its session ended unless another opened", async () => {
    await node("n1", NodeLiveness.ONLINE, NOW, NodeTransport.SESSION, 10_000n);
    await node("n2", NodeLiveness.ONLINE, NOW, NodeTransport.SESSION, 10_000n);
    let now = NOW;
    const { logger } = createLogger({ service: "t", stdout: false, level: "silent" });
    const monitor = new LivenessMonitor({ store, logger, now: () => now, onChange: () => undefined });
    const session = (nodeId: string, id: string, open: boolean) =>
      monitor.session({ nodeId, controller: "sole", session: id, open, at: now, intervalMs: 10_000 });
    session("n1", "a", true);
    session("n2", "b", true);
    await monitor.check();
    now = new Date(NOW.getTime() + 1000);
    session("n1", "a", false);
    session("n2", "b", false);
    session("n2", "c", true); // its agent came back at once
    now = new Date(NOW.getTime() + 16_100);
    await monitor.check();
    expect(await livenessOfNode("n1")).toBe(NodeLiveness.OFFLINE);
    expect(await livenessOfNode("n2")).toBe(NodeLiveness.ONLINE);
    const offline = (await store.listEvents({ pageSize: 100 })).items.find((e) => e.type === "node_offline");
    expect(offline?.resourceId).toBe("n1");
    expect(offline?.data?.cause).toBe("session_ended");
  });

  it("keeps a session that opened before its node's first report stored, and judges its end once the report is", async () => {
    await store.createResource(
      create(ResourceSchema, { id: "fresh", resourceType: "node", desiredState: { kind: { case: "node", value: {} } } }),
    );
    let now = NOW;
    const { logger } = createLogger({ service: "t", stdout: false, level: "silent" });
    const monitor = new LivenessMonitor({ store, logger, now: () => now, onChange: () => undefined });
    const session = (open: boolean) =>
      monitor.session({ nodeId: "fresh", controller: "sole", session: "a", open, at: now, intervalMs: 10_000 });
    session(true);
    await monitor.check();
    expect((await livenessOfNode("fresh")) ?? NodeLiveness.UNSPECIFIED).toBe(NodeLiveness.UNSPECIFIED);
    // Its first report is stored online (heartbeat.ts), as it would be.
    await store.updateResource("node", "fresh", (r) => {
      r.currentState = {
        $typeName: "skipper.v1.ResourceStatus",
        kind: {
          case: "node",
          value: create(NodeStatusSchema, {
            liveness: NodeLiveness.ONLINE,
            lastHeartbeatAt: timestampFromDate(now),
            heartbeatIntervalMs: 10_000n,
            transport: NodeTransport.SESSION,
          }),
        },
      };
      return r;
    });
    monitor.seen("fresh", now, 10_000, true);
    now = new Date(NOW.getTime() + 2000);
    session(false);
    now = new Date(NOW.getTime() + 18_000);
    await monitor.check();
    expect(await livenessOfNode("fresh")).toBe(NodeLiveness.OFFLINE);
  });
});

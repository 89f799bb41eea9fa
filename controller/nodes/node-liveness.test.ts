// Liveness across a controller restart (a new LivenessMonitor on a store that already holds nodes):
// online nodes get a grace of their intervals to beat again; a node that was offline or degraded
// stays so until it beats, and no node_online event is made up for it.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness, ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
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

  const node = (id: string, liveness: NodeLiveness, lastBeat: Date) =>
    store.createResource(
      create(ResourceSchema, {
        id,
        resourceType: "node",
        desiredState: { kind: { case: "node", value: {} } },
        currentState: {
          kind: { case: "node", value: { liveness, lastHeartbeatAt: timestampFromDate(lastBeat), heartbeatIntervalMs: 1000n } },
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
});

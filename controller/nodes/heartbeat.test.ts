// Heartbeats (nodes/heartbeat.ts): through NodeService.Heartbeat over the in-memory transport with
// a fake clock handed to build(), and the HeartbeatRecorder alone for what a beat changed (its
// outcome is for the reconciler's triggers, not in the response).
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { HeartbeatRequestSchema, NodeService, type HeartbeatRequest } from "../../gen/skipper/v1/node_service_pb.js";
import { NodeLiveness, ResourceSchema, type NodeStatus } from "../../gen/skipper/v1/resource_pb.js";
import { FileStore } from "../store/file/file-store.js";
import { HeartbeatRecorder } from "./heartbeat.js";
import { startInMemory, type InMemoryController } from "../../test/helpers/in-memory-controller.js";
import { rpcError } from "../../test/helpers/errors.js";

const MINUTE = 60_000;
const START = new Date("2026-11-23T10:00:00Z");
/** A heartbeat's fields but its node id. */
type BeatInit = Omit<Exclude<MessageInitShape<typeof HeartbeatRequestSchema>, HeartbeatRequest>, "nodeId" | "$typeName">;

describe("NodeService.Heartbeat", () => {
  let c: InMemoryController;
  let clock: number;
  let token = "";
  const beat = (req: BeatInit = {}) =>
    c.asNode(NodeService, token).heartbeat({ nodeId: "n1", agentVersion: "1.0", heartbeatIntervalMs: 5000n, ...req });
  const stored = async () => {
    const node = (await c.ctl.store.getResource("node", "n1"))!;
    const status = node.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
    return { version: node.metadata!.resourceVersion, status: status as NodeStatus | undefined };
  };
  const eventsOf = async (type: string) => (await c.events({ resourceId: "n1" })).filter((e) => e.type === type);

  beforeEach(async () => {
    clock = START.getTime();
    c = await startInMemory({ now: () => new Date(clock) });
    token = (await c.admin(NodeService).registerNode({ nodeId: "n1" })).token;
  });
  afterEach(async () => {
    await c.close();
  });

  it("a node's first beat makes it ONLINE and records node_online once", async () => {
    expect((await stored()).status).toBeUndefined();
    const res = await beat();
    expect(timestampDate(res.serverTime!).getTime()).toBe(START.getTime());
    const { status } = await stored();
    expect(status?.liveness).toBe(NodeLiveness.ONLINE);
    expect(timestampDate(status!.lastHeartbeatAt!).getTime()).toBe(START.getTime());
    expect(timestampDate(status!.livenessChangedAt!).getTime()).toBe(START.getTime());
    clock += 1000;
    await beat();
    expect(await eventsOf("node_online")).toHaveLength(1);
  });

  it("a beat that changes nothing within a minute writes nothing to the node", async () => {
    await beat();
    const first = await stored();
    clock += MINUTE - 1;
    const res = await beat({ uptimeSeconds: 59n });
    expect(timestampDate(res.serverTime!).getTime()).toBe(clock);
    const second = await stored();
    expect(second.version).toBe(first.version);
    expect(timestampDate(second.status!.lastHeartbeatAt!).getTime()).toBe(START.getTime());
  });

  it("a beat that changes nothing is stored once a minute has passed since the stored one", async () => {
    await beat();
    const first = await stored();
    clock += MINUTE;
    await beat({ uptimeSeconds: 60n });
    const second = await stored();
    expect(second.version).not.toBe(first.version);
    expect(timestampDate(second.status!.lastHeartbeatAt!).getTime()).toBe(clock);
    expect(second.status?.uptimeSeconds).toBe(60n);
    // Only the time moved: no heartbeat event beyond the first beat's.
    expect(await eventsOf("node_heartbeat_received")).toHaveLength(1);
  });

  it("a changed report is written at once and records node_heartbeat_received with changed=true", async () => {
    await beat();
    const first = await stored();
    clock += 1000;
    await beat({ agentVersion: "1.1", capabilities: { dockerAvailable: true, composeVersion: "2.29.0" } });
    const second = await stored();
    expect(second.version).not.toBe(first.version);
    expect(second.status?.agentVersion).toBe("1.1");
    expect(timestampDate(second.status!.lastHeartbeatAt!).getTime()).toBe(clock);
    const received = await eventsOf("node_heartbeat_received");
    expect(received).toHaveLength(2);
    expect(received[1]!.data).toMatchObject({ agent_version: "1.1", changed: true, docker_available: true, compose_version: "2.29.0" });
  });

  it("an unchanged beat records node_heartbeat_received at most hourly, with changed=false", async () => {
    await beat();
    clock += 59 * MINUTE;
    await beat();
    expect(await eventsOf("node_heartbeat_received")).toHaveLength(1);
    clock += MINUTE;
    await beat();
    const received = await eventsOf("node_heartbeat_received");
    expect(received).toHaveLength(2);
    expect(received[1]!.data).toMatchObject({ changed: false });
  });

  it("a node cannot heartbeat for another node, and nothing of the other node is written", async () => {
    await c.admin(NodeService).registerNode({ nodeId: "n2" });
    const before = (await c.ctl.store.getResource("node", "n2"))!;
    const e = await rpcError(c.asNode(NodeService, token).heartbeat({ nodeId: "n2", agentVersion: "1.0" }));
    expect(e.code).toBe("FORBIDDEN");
    const after = (await c.ctl.store.getResource("node", "n2"))!;
    expect(after.metadata?.resourceVersion).toBe(before.metadata?.resourceVersion);
    expect(after.currentState?.kind.case).toBeUndefined();
    expect((await c.events({ resourceId: "n2" })).map((ev) => ev.type)).not.toContain("node_online");
  });
});

describe("HeartbeatRecorder", () => {
  let dir: string;
  let store: FileStore;
  let recorder: HeartbeatRecorder;
  const trace = { requestId: "req-1", correlationId: "req-1" };
  const project = (projectName: string, tenantId = "", specHash = "h1") => ({ projectName, tenantId, specHash });
  const record = (req: BeatInit) =>
    recorder.record("n1", create(HeartbeatRequestSchema, { nodeId: "n1", agentVersion: "1.0", ...req }), trace);

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-heartbeat-"));
    store = new FileStore(dir);
    await store.open();
    await store.createResource(
      create(ResourceSchema, { id: "n1", resourceType: "node", desiredState: { kind: { case: "node", value: {} } } }),
    );
    recorder = new HeartbeatRecorder({ store, now: () => START });
  });
  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("says the node came online on its first beat only", async () => {
    expect((await record({})).cameOnline).toBe(true);
    expect((await record({})).cameOnline).toBe(false);
  });

  it("a changed project list touches the tenants of the old and the new list, a project without a tenant by its name", async () => {
    const first = await record({ projectsReported: true, projects: [project("shop", "shop"), project("loose")] });
    expect(first.projectsChanged).toBe(true);
    expect([...first.touchedTenants].sort()).toEqual(["loose", "shop"]);

    const same = await record({ projectsReported: true, projects: [project("shop", "shop"), project("loose")] });
    expect(same.projectsChanged).toBe(false);
    expect(same.touchedTenants.size).toBe(0);

    const changed = await record({ projectsReported: true, projects: [project("shop", "shop"), project("blog", "blog")] });
    expect(changed.projectsChanged).toBe(true);
    expect([...changed.touchedTenants].sort()).toEqual(["blog", "loose", "shop"]);
  });

  it("a changed observation of one project (its spec hash) touches its tenant", async () => {
    await record({ projectsReported: true, projects: [project("shop", "shop", "h1")] });
    const drifted = await record({ projectsReported: true, projects: [project("shop", "shop", "h2")] });
    expect(drifted.projectsChanged).toBe(true);
    expect([...drifted.touchedTenants]).toEqual(["shop"]);
  });

  it("says when a reported label under a trusted key changed, and only then", async () => {
    await store.updateResource("node", "n1", (n) => {
      if (n.desiredState?.kind.case === "node") n.desiredState.kind.value.trustedLabelKeys = ["zone"];
      return n;
    });
    expect((await record({ labels: { zone: "a", tier: "gold" } })).trustedLabelsChanged).toBe(true);
    expect((await record({ labels: { zone: "a", tier: "platinum" } })).trustedLabelsChanged).toBe(false);
    expect((await record({ labels: { tier: "platinum" } })).trustedLabelsChanged).toBe(true);
  });

  it("dates the list of projects a beat reports (an empty one too), keeps the date through beats that cannot tell, stores it at least once a minute", async () => {
    let clock = START.getTime();
    recorder = new HeartbeatRecorder({ store, now: () => new Date(clock) });
    const observedAt = async () => {
      const node = (await store.getResource("node", "n1"))!;
      const at = node.currentState?.kind.case === "node" ? node.currentState.kind.value.projectsObservedAt : undefined;
      return at ? timestampDate(at).getTime() - START.getTime() : undefined;
    };
    await record({ projectsReported: false });
    expect(await observedAt()).toBeUndefined();
    await record({ projectsReported: true, projects: [] });
    expect(await observedAt()).toBe(0);
    clock += 10_000;
    await record({ projectsReported: false });
    expect(await observedAt()).toBe(0);
    clock += 10_000;
    // The same list within a minute: nothing written, the stored date stays (older is safe: it judges less).
    await record({ projectsReported: true, projects: [] });
    expect(await observedAt()).toBe(0);
    clock += MINUTE;
    await record({ projectsReported: true, projects: [] });
    expect(await observedAt()).toBe(20_000 + MINUTE);
    clock += 1000;
    await record({ projectsReported: true, projects: [project("shop", "shop")] });
    expect(await observedAt()).toBe(21_000 + MINUTE);
  });

  it("a beat that does not report projects keeps the observed ones and touches no tenant", async () => {
    await record({ projectsReported: true, projects: [project("shop", "shop")] });
    const silent = await record({ projectsReported: false });
    expect(silent.projectsChanged).toBe(false);
    expect(silent.touchedTenants.size).toBe(0);
    const node = (await store.getResource("node", "n1"))!;
    const status = node.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
    expect(status?.projects.map((p) => p.projectName)).toEqual(["shop"]);
  });
});

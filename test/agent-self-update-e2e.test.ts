// Agent self-update end to end: the built controller and three agents, each run by skippy-updater
// from a real one-file bundle (no Docker engine needed), over HTTP/2 + mutual TLS... as a service
// would run them (`skippy updater`). Three bundles: 0.1.0-a that the agents start on, 0.1.0-b,
// and 0.1.0-broken that exits at once.
//   - the versions are uploaded (the CLI for one, a raw PUT for another); downloads need a credential;
//   - an agent_update to 0.1.0-b is rolled out one node at a time: every agent reaches the
//     controller on the new version, the rollout SUCCEEDED, each updater process still the same;
//   - an agent_update to 0.1.0-broken with a failure budget of 0: the first node's updater goes
//     back to 0.1.0-b by itself when the new agent never reaches the controller, the rollout
//     pauses on its budget, and the other two nodes get no order.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentUpdateState } from "../gen/skipper/v1/agent_update_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import type { Resource } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { RolloutNodeState, RolloutStatus } from "../gen/skipper/v1/rollout_pb.js";
import { RolloutService } from "../gen/skipper/v1/rollout_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { rawRequest } from "./helpers/https.js";
import { E2E_ADMIN_TOKEN, RUN_ID, startControllerProcess, stopProcess, waitFor, type ControllerProcess } from "./helpers/processes.js";
import { res } from "./helpers/resources.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const BUNDLER = fileURLToPath(new URL("../scripts/bundle-agent.mjs", import.meta.url));
const NODES = ["au-1", "au-2", "au-3"].map((n) => `${n}-${RUN_ID}`);
const UPDATE = `fleet-${RUN_ID}`;

describe("agent self-update (built controller, three agents under skippy-updater)", () => {
  let root: string;
  let ctl: ControllerProcess;
  const bundles: Record<string, string> = {};
  const updaters = new Map<string, ChildProcess>();
  const api = () => ctl.admin(ResourceService);

  const node = async (id: string) => {
    const r = (await api().getResource({ resourceType: "node", id })).resource;
    return r?.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
  };
  const update = async (): Promise<Resource | undefined> =>
    (await api().getResource({ resourceType: "agent_update", id: UPDATE })).resource;
  const statusOf = (r: Resource | undefined) => (r?.currentState?.kind.case === "agentUpdate" ? r.currentState.kind.value : undefined);
  const rollout = async (id: string) => (await ctl.admin(RolloutService).getRollout({ id })).rollout;

  const startUpdater = async (nodeId: string, token: string) => {
    const state = join(root, nodeId, "state");
    const child = spawn(
      process.execPath,
      [
        bundles.a!,
        "updater",
        "--controller",
        ctl.url,
        "--node-id",
        nodeId,
        "--ca-file",
        ctl.caFile,
        "--state-dir",
        state,
        "--work-dir",
        join(root, nodeId, "work"),
        "--poll-interval",
        "300ms",
      ],
      {
        env: {
          ...process.env,
          SKIPPY_NODE_TOKEN: token,
          DOCKER_HOST: `unix://${join(root, "no-engine.sock")}`,
          SKIPPY_TRANSPORT: "session",
        },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const out = createWriteStream(join(root, `${nodeId}.log`), { flags: "a" });
    child.stdout!.pipe(out);
    child.stderr!.pipe(out);
    updaters.set(nodeId, child);
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-au-"));
    for (const v of ["a", "b"]) {
      bundles[v] = join(root, `skippy-${v}.mjs`);
      await execa(process.execPath, [BUNDLER, bundles[v]!], { env: { ...process.env, SKIPPY_BUNDLE_VERSION: `0.1.0-${v}` } });
    }
    // A version that cannot start: it states its version, then exits.
    bundles.broken = join(root, "skippy-broken.mjs");
    await writeFile(bundles.broken, "// skippy-bundle-version: 0.1.0-broken\nprocess.exit(3);\n");
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--process-interval", "300ms"] });
    for (const id of NODES) await startUpdater(id, (await ctl.admin(NodeService).registerNode({ nodeId: id })).token);
    for (const id of NODES)
      await waitFor(`${id} on 0.1.0-a under skippy-updater`, async () => {
        const st = await node(id);
        return st?.agentVersion === "0.1.0-a" && st.agentUpdate?.supervised && st.capabilities?.capabilities.includes("agent.update")
          ? st
          : undefined;
      });
  }, 120_000);

  afterAll(async () => {
    await Promise.all([...updaters.values()].map((c) => stopProcess(c)));
    await ctl?.stop();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("holds uploaded versions: the CLI adds one, the same bytes again change nothing, downloads need a credential", async () => {
    const env = { ...process.env, SKIPPER_SERVER: ctl.url, SKIPPER_CA_FILE: ctl.caFile, SKIPPER_TOKEN: E2E_ADMIN_TOKEN };
    const added = await execa(process.execPath, [CLI, "agent-version", "add", bundles.b!, "--notes", "the new one"], { env });
    expect(added.stdout).toMatch(/agent version 0\.1\.0-b added/);
    const again = await execa(process.execPath, [CLI, "agent-version", "add", bundles.b!], { env });
    expect(again.stdout).toMatch(/already held with these bytes/);
    const put = await rawRequest(
      ctl,
      "PUT",
      "/v1/agent-versions/0.1.0-broken/skippy.mjs",
      { authorization: `Bearer ${E2E_ADMIN_TOKEN}` },
      "// skippy-bundle-version: 0.1.0-broken\nprocess.exit(3);\n",
    );
    expect(put.status).toBe(201);
    // A bundle stating another version than its path is refused, and nothing is written.
    const wrong = await rawRequest(
      ctl,
      "PUT",
      "/v1/agent-versions/9.9.9/skippy.mjs",
      { authorization: `Bearer ${E2E_ADMIN_TOKEN}` },
      "// skippy-bundle-version: 1.0.0\n",
    );
    expect(wrong.status).toBe(400);
    expect(JSON.parse(wrong.body).error.message).toMatch(/states version 1\.0\.0, not 9\.9\.9/);
    expect((await rawRequest(ctl, "GET", "/v1/agent-versions/0.1.0-b/skippy.mjs")).status).toBe(401);
    // A path that does not decode is refused, and the controller goes on answering.
    expect((await rawRequest(ctl, "GET", "/v1/agent-versions/%ZZ/skippy.mjs")).status).toBe(400);
    // A version an agent could not install is refused at the upload.
    const long = `9.${"9".repeat(70)}`;
    const tooLong = await rawRequest(
      ctl,
      "PUT",
      `/v1/agent-versions/${long}/skippy.mjs`,
      { authorization: `Bearer ${E2E_ADMIN_TOKEN}` },
      `// skippy-bundle-version: ${long}\n`,
    );
    expect(tooLong.status).toBe(400);
    const v = (await api().getResource({ resourceType: "agent_version", id: "0.1.0-b" })).resource;
    expect(v?.desiredState?.kind.case === "agentVersion" && v.desiredState.kind.value.notes).toBe("the new one");
    const got = await rawRequest(ctl, "GET", "/v1/agent-versions/0.1.0-b/skippy.mjs", { authorization: `Bearer ${E2E_ADMIN_TOKEN}` });
    expect(got.status).toBe(200);
    expect(got.headers["x-skipper-agent-sha256"]).toBe(
      v?.desiredState?.kind.case === "agentVersion" ? v.desiredState.kind.value.sha256 : "",
    );
  }, 60_000);

  it("hears an agent one version ahead: fields it does not know are read as absent where agents call, refused where people do", async () => {
    // A node of its own (its report would replace a running agent's), removed afterwards.
    const probe = `au-probe-${RUN_ID}`;
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: probe })).token;
    const json = { "content-type": "application/json" };
    const beat = await rawRequest(
      ctl,
      "POST",
      "/skipper.v1.NodeService/Heartbeat",
      { ...json, authorization: `Bearer ${token}` },
      JSON.stringify({ node_id: probe, agent_version: "0.2.0", heartbeat_interval_ms: 1000, a_field_from_next_version: { x: 1 } }),
    );
    expect(beat.status).toBe(200);
    expect((await node(probe))?.agentVersion).toBe("0.2.0");
    const typo = await rawRequest(
      ctl,
      "POST",
      "/skipper.v1.ResourceService/GetResource",
      { ...json, authorization: `Bearer ${E2E_ADMIN_TOKEN}` },
      JSON.stringify({ resource_type: "node", id: probe, idd: "typo" }),
    );
    expect(typo.status).toBe(400);
    expect(typo.body).toMatch(/idd/);
    await api().deleteResource({ resourceType: "node", id: probe });
  });

  it("rolls 0.1.0-b out one node at a time; every agent reaches the controller on it", async () => {
    const pids = new Map([...updaters].map(([id, c]) => [id, c.pid]));
    await api().createResource({
      resourceType: "agent_update",
      resource: res("agent_update", UPDATE, {
        case: "agentUpdate",
        value: { version: "0.1.0-b", policy: { maxParallel: 1 }, deadline: { seconds: 60n } },
      }),
    });
    const done = await waitFor(
      "every node on 0.1.0-b",
      async () => {
        const s = statusOf(await update());
        return s && s.nodesCurrent === 3 && s.nodesSelected === 3 ? s : undefined;
      },
      180_000,
    );
    const r = await waitFor("the rollout to succeed", async () => {
      const x = await rollout(done.rolloutId);
      return x?.status === RolloutStatus.SUCCEEDED ? x : undefined;
    });
    expect(r.agentUpdateId).toBe(UPDATE);
    expect(r.tenantId).toBe("");
    expect(r.toSpecHash).toMatch(/^agent:0\.1\.0-b@[0-9a-f]{12}$/);
    expect(r.waves.flatMap((w) => w.nodes.map((n) => n.state))).toEqual([
      RolloutNodeState.DONE,
      RolloutNodeState.DONE,
      RolloutNodeState.DONE,
    ]);
    for (const id of NODES) {
      // The updater confirms once the new agent's first report was accepted; the report after
      // that says so.
      const st = await waitFor(`${id} CONFIRMED`, async () => {
        const x = await node(id);
        return x?.agentUpdate?.state === AgentUpdateState.CONFIRMED ? x : undefined;
      });
      expect(st?.agentVersion).toBe("0.1.0-b");
      expect(st?.agentUpdate?.previousVersion).toBe("0.1.0-a");
      // The updater stayed; only its child, the agent, was replaced.
      expect(updaters.get(id)!.pid).toBe(pids.get(id));
      expect(updaters.get(id)!.exitCode).toBeNull();
    }
    const orders = (await ctl.admin(WorkOrderService).listWorkOrders({ pageSize: 100 })).workOrders.filter(
      (o) => o.type === WorkOrderType.UPDATE_AGENT,
    );
    expect(orders.map((o) => o.status)).toEqual([WorkOrderStatus.SUCCESS, WorkOrderStatus.SUCCESS, WorkOrderStatus.SUCCESS]);
  }, 240_000);

  it("a version that cannot start goes back by itself on its node, and the rollout pauses on the budget", async () => {
    const cur = await update();
    await api().updateResource({
      resourceType: "agent_update",
      id: UPDATE,
      desiredState: {
        kind: {
          case: "agentUpdate",
          value: {
            version: "0.1.0-broken",
            policy: { maxParallel: 1, failureBudget: { limit: { case: "count", value: 0 } } },
            deadline: { seconds: 10n },
          },
        },
      },
      resourceVersion: cur?.metadata?.resourceVersion ?? "",
    });
    const paused = await waitFor(
      "the rollout to pause on its budget",
      async () => {
        const s = statusOf(await update());
        const x = s?.rolloutId ? await rollout(s.rolloutId) : undefined;
        return x?.toSpecHash.startsWith("agent:0.1.0-broken@") && x.status === RolloutStatus.PAUSED ? x : undefined;
      },
      180_000,
    );
    expect(paused.message).toMatch(/failure budget exhausted: 1 node\(s\) failed, 0 allowed/);
    const nodes = paused.waves.flatMap((w) => w.nodes);
    const failed = nodes.filter((n) => n.state === RolloutNodeState.FAILED);
    expect(failed).toHaveLength(1);
    expect(failed[0]!.reason).toMatch(/updater went back to 0\.1\.0-b/);
    expect(nodes.filter((n) => n.state === RolloutNodeState.WAITING)).toHaveLength(2);
    // The failed node runs 0.1.0-b again, online, its updater saying why.
    const st = await waitFor("the failed node back on 0.1.0-b", async () => {
      const s = await node(failed[0]!.nodeId);
      return s?.agentVersion === "0.1.0-b" && s.agentUpdate?.state === AgentUpdateState.ROLLED_BACK ? s : undefined;
    });
    expect(st.agentUpdate?.targetVersion).toBe("0.1.0-broken");
    expect(st.agentUpdate?.message).not.toBe("");
    // The other two never got an order for it.
    const brokenOrders = (await ctl.admin(WorkOrderService).listWorkOrders({ pageSize: 100 })).workOrders.filter(
      (o) =>
        o.type === WorkOrderType.UPDATE_AGENT && o.action?.kind.case === "updateAgent" && o.action.kind.value.version === "0.1.0-broken",
    );
    expect(brokenOrders.map((o) => o.target?.nodeId)).toEqual([failed[0]!.nodeId]);
  }, 240_000);
});

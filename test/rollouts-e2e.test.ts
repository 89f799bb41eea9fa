// Progressive rollouts end to end: the built controller and four skippy agents as processes, each
// node on its own Docker engine (a tenant's Compose project has the same name on every node, so
// nodes cannot share one: test/helpers/engines.ts adds two engines to the global setup's two).
// Each test has its own tenant, running release v1 on the four nodes (beforeAll), changes it to
// v2 under the rollout policy it exercises and follows the rollout through RolloutService, the
// work orders the real agents ran and the containers on the engines. Nothing waits a fixed time:
// every wait is for state the controller or an engine reports.
import { readFileSync } from "node:fs";
import { request } from "node:https";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus, ResourceSchema, type TargetStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import {
  OverdueNodeAction,
  type Rollout,
  RolloutNodeState as S,
  type RolloutPolicySchema,
  RolloutStatus,
} from "../gen/skipper/v1/rollout_pb.js";
import { RolloutService } from "../gen/skipper/v1/rollout_service_pb.js";
import { type WorkOrder, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { dockerEngines } from "./helpers/engines.js";
import { killNow, killWhenOrderStored } from "./helpers/kill-at.js";
import {
  type AgentProcess,
  type ControllerProcess,
  E2E_ADMIN_TOKEN,
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
} from "./helpers/processes.js";

const NODES = ["ro-n1", "ro-n2", "ro-n3", "ro-n4"];
const CANARY = "ro-n1";
const hosts = process.env.SKIPPER_TEST_DOCKER_HOST_B ? await dockerEngines(NODES.length) : [];
const ready = hosts.length === NODES.length;
if (!ready) console.warn(`!!! rollouts-e2e.test.ts SKIPPED: needs ${NODES.length} Docker engines, got ${hosts.length}`);
const hostOf = (nodeId: string) => hosts[NODES.indexOf(nodeId)]!;

// RELEASE names the release. A healthy release's container runs until stopped; an unhealthy one
// carries a healthcheck that never passes, so it fails the tenant's health gate (its containers
// must run, and be healthy where a healthcheck is defined, within the gate's deadline) and the
// node's agent restores the spec it ran before. No probe on a published port: the four engines
// share one host's 127.0.0.1, where one port can be published once.
function composeFile(healthy: boolean): string {
  const check = healthy ? "" : `    healthcheck:\n      test: ["CMD", "false"]\n      interval: 1s\n      retries: 1\n`;
  return `services:
  web:
    image: skipper-busybox:local
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $$!; done"]
    environment:
      RELEASE: \${RELEASE}
${check}    stop_grace_period: 1s
`;
}

type Policy = MessageInitShape<typeof RolloutPolicySchema>;
const IN_FLIGHT = new Set([S.DEPLOYING, S.BAKING]);

// One tenant per test, each with the rollout policy its test exercises (set from the start: a
// policy applies to the next change of the tenant's spec).
const POLICIES = {
  waves: {
    waves: [
      { name: "canary", nodeSelector: { ring: "canary" } },
      { name: "third", size: { case: "percent", value: 30 } },
    ],
    maxParallel: 1,
    minHealthyTime: durationFromMs(2000),
  },
  canary: {
    waves: [{ name: "canary", nodeSelector: { ring: "canary" } }],
    failureBudget: { limit: { case: "count", value: 0 } },
  },
  abort: {
    waves: [
      { name: "first", size: { case: "count", value: 2 } },
      { name: "final", requirePromote: true },
    ],
  },
  offline: {
    waves: [
      { name: "canary", nodeSelector: { ring: "canary" } },
      { name: "fleet", requirePromote: true },
    ],
    // Long enough for a live node's deploy on a loaded machine, short enough to wait out.
    progressDeadline: durationFromMs(10_000),
    onOverdue: OverdueNodeAction.SKIP,
    // A skipped node does not count against the budget: none may fail, yet the rollout succeeds.
    failureBudget: { limit: { case: "count", value: 0 } },
  },
  restart: {
    waves: [
      { name: "canary", nodeSelector: { ring: "canary" } },
      { name: "third", size: { case: "percent", value: 30 } },
    ],
    maxParallel: 1,
  },
} satisfies Record<string, Policy>;
type TenantName = keyof typeof POLICIES;
const tenantId = (name: TenantName) => `ro-${name}-${RUN_ID}`;

function tenantState(release: string, policy: Policy, healthy = true) {
  return create(ResourceSchema, {
    desiredState: {
      kind: {
        case: "tenant",
        value: {
          deploymentPolicy: { nodeSelector: { fleet: "ro" } },
          compose: { composeFile: composeFile(healthy), env: { RELEASE: release } },
          safety: { healthGate: { deadline: durationFromMs(4000) } },
          rollout: policy,
        },
      },
    },
  }).desiredState!;
}

const nodesOf = (r: Rollout) => r.waves.flatMap((w) => w.nodes);
const nodeOf = (r: Rollout, nodeId: string) => nodesOf(r).find((n) => n.nodeId === nodeId)!;
const stateName = (s: S) => S[s] ?? String(s);

/** Env RELEASE of the tenant's running container on the node's engine ("" when none runs, "n containers" when several). */
async function releaseOn(nodeId: string, tenantId: string): Promise<string> {
  const env = { DOCKER_HOST: hostOf(nodeId) };
  const ids = (await execa("docker", ["ps", "-q", "--filter", `label=com.docker.compose.project=${tenantId}`], { env })).stdout
    .split("\n")
    .filter(Boolean);
  if (ids.length !== 1) return ids.length === 0 ? "" : `${ids.length} containers`;
  const inspect = await execa("docker", ["inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", ids[0]!], { env });
  return /^RELEASE=(.*)$/m.exec(inspect.stdout)?.[1] ?? "";
}

/** Id of the tenant's running container on the node's engine. */
async function containerOn(nodeId: string, tenantId: string): Promise<string> {
  const env = { DOCKER_HOST: hostOf(nodeId) };
  return (
    await execa("docker", ["ps", "-q", "--no-trunc", "--filter", `label=com.docker.compose.project=${tenantId}`], { env })
  ).stdout.trim();
}

/** A tenant's target record for a node as its file store holds it (read while the controller is down). */
function storedTarget(dataDir: string, tenantId: string, nodeId: string): { last_work_order_id?: string } | undefined {
  const t = JSON.parse(readFileSync(join(dataDir, "resources", "tenants", `${tenantId}.json`), "utf8")) as {
    current_state?: { tenant?: { targets?: { node_id: string; last_work_order_id?: string }[] } };
  };
  return t.current_state?.tenant?.targets?.find((x) => x.node_id === nodeId);
}

describe.skipIf(!ready)("progressive rollouts (controller and four agents as processes, one engine per node)", () => {
  let ctl: ControllerProcess;
  let root: string;
  const agents = new Map<string, AgentProcess>();
  const tokens = new Map<string, string>();
  const tenants: string[] = [];

  const api = () => ctl.admin(ResourceService);
  const rollouts = () => ctl.admin(RolloutService);

  function startAgent(nodeId: string): void {
    agents.set(
      nodeId,
      startAgentProcess({
        controller: ctl,
        nodeId,
        token: tokens.get(nodeId)!,
        stateDir: join(root, nodeId, "state"),
        workDir: join(root, nodeId, "work"),
        dockerHost: hostOf(nodeId),
        extraArgs: ["--ready-timeout", "20s"],
      }),
    );
  }

  async function targets(tenantId: string): Promise<TargetStatus[]> {
    const t = (await api().getResource({ resourceType: "tenant", id: tenantId })).resource!;
    return t.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets : [];
  }

  /** One call of the controller's REST routes (HTTPS, admin token): its status and JSON body. */
  function rest(method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
    return new Promise((resolve, reject) => {
      const req = request(
        `${ctl.url}${path}`,
        { method, ca: ctl.ca, headers: { "x-admin-token": E2E_ADMIN_TOKEN, "content-type": "application/json" } },
        (res) => {
          let text = "";
          res.on("data", (c) => (text += c));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as Record<string, unknown> }));
        },
      );
      req.on("error", reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }

  /** The test's tenant, checked to run v1 on every node (beforeAll put it there) with no rollout yet. */
  async function onV1(name: TenantName): Promise<string> {
    const id = tenantId(name);
    for (const n of NODES) expect(await releaseOn(n, id), n).toBe("v1");
    // A first deploy is not a rollout: nothing ran yet to break.
    expect((await rollouts().listRollouts({ tenantId: id })).rollouts).toEqual([]);
    return id;
  }

  /** Changes the test's tenant to `version` (its policy unchanged). */
  async function release(name: TenantName, version: string, healthy = true): Promise<void> {
    await api().updateResource({ resourceType: "tenant", id: tenantId(name), desiredState: tenantState(version, POLICIES[name], healthy) });
  }

  /**
   * Polls the tenant's rollout (each test makes one release, so it has one) until `done` holds,
   * recording every node's states in the order they were seen and the most nodes seen deploying
   * or baking at once. A second rollout of the tenant fails the wait at once: one change of the
   * rendered spec is one rollout.
   */
  async function follow(id: string, what: string, done: (r: Rollout) => boolean, timeoutMs = 60_000) {
    const seen = new Map<string, S[]>();
    let maxInFlight = 0;
    const outcome = await waitFor(
      what,
      async () => {
        const all = (await rollouts().listRollouts({ tenantId: id })).rollouts;
        if (all.length > 1) return { all };
        const r = all[0];
        if (!r) return undefined;
        for (const n of nodesOf(r)) {
          const states = seen.get(n.nodeId) ?? [];
          if (states.at(-1) !== n.state) states.push(n.state);
          seen.set(n.nodeId, states);
        }
        maxInFlight = Math.max(maxInFlight, nodesOf(r).filter((n) => IN_FLIGHT.has(n.state)).length);
        return done(r) ? { rollout: r } : undefined;
      },
      timeoutMs,
      50,
    );
    if (!outcome.rollout) {
      const list = outcome.all!.map((r) => `${r.id} ${RolloutStatus[r.status]} (${nodesOf(r).length} nodes)`).join(", ");
      throw new Error(`waiting for ${what}: tenant ${id} has ${outcome.all!.length} rollouts for one change, newest first: ${list}`);
    }
    return { rollout: outcome.rollout, seen, maxInFlight };
  }

  /** The tenant's work orders, oldest first. */
  async function ordersOf(id: string): Promise<WorkOrder[]> {
    const list = (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: id, pageSize: 1000 })).workOrders;
    return [...list].sort((a, b) => timestampMs(a.createdAt!) - timestampMs(b.createdAt!));
  }

  /** Deploy orders that bring `specHash` to each node, by node. */
  async function deploysOf(id: string, specHash: string): Promise<Map<string, WorkOrder[]>> {
    const out = new Map<string, WorkOrder[]>(NODES.map((n) => [n, []]));
    for (const o of await ordersOf(id))
      if (o.type === WorkOrderType.DEPLOY_SERVICE && o.desiredState?.specHash === specHash) out.get(o.target!.nodeId)!.push(o);
    return out;
  }

  /**
   * The rollout's events, oldest first, as "type" or "type:node", once `last` is among them: a
   * rollout's events are written right after the record they describe, so a reader that saw the
   * record may be a moment early for its events.
   */
  async function rolloutEvents(rolloutId: string, last: string): Promise<string[]> {
    return waitFor(`the rollout's ${last} event`, async () => {
      const events = (await ctl.admin(EventService).listEvents({ resourceId: rolloutId, pageSize: 1000 })).events;
      const out = events.filter((e) => e.type.startsWith("rollout_")).map((e) => e.type + (e.nodeId ? `:${e.nodeId}` : ""));
      return out.includes(last) ? out : undefined;
    });
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-rollouts-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", "2s"] });
    for (const nodeId of NODES) {
      const labels = { fleet: "ro", ring: nodeId === CANARY ? "canary" : "main" };
      tokens.set(nodeId, (await ctl.admin(NodeService).registerNode({ nodeId, labels })).token);
      startAgent(nodeId);
    }
    // Every test's tenant runs v1 on the four nodes before the tests start: the first deploys of
    // all five go out at once (a first deploy is not a rollout).
    for (const [name, policy] of Object.entries(POLICIES)) {
      const id = tenantId(name as TenantName);
      tenants.push(id);
      await api().createResource({
        resourceType: "tenant",
        resource: { id, resourceType: "tenant", desiredState: tenantState("v1", policy) },
      });
    }
    await waitFor(
      "every tenant to run v1 on every node",
      async () => {
        for (const id of tenants) {
          const t = await targets(id);
          const done =
            t.length === NODES.length &&
            t.every(
              (x) => x.appliedHash !== "" && x.appliedHash === x.desiredHash && x.convergence?.status === ConvergenceStatus.CONVERGED,
            );
          if (!done) return undefined;
        }
        return true;
      },
      120_000,
      200,
    );
  }, 180_000);

  afterAll(async () => {
    for (const a of agents.values()) await a.stop();
    await ctl?.stop();
    for (const t of tenants) for (const n of NODES) await removeComposeProject(hostOf(n), t);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("three waves (canary by label, a percentage, the rest) deploy in order, max_parallel at a time, each node baking before done", async () => {
    const id = await onV1("waves");
    await release("waves", "v2");
    const { rollout: r, seen, maxInFlight } = await follow(id, "the rollout to succeed", (x) => x.status === RolloutStatus.SUCCEEDED);

    expect(r.waves.map((w) => [w.name, w.nodes.map((n) => n.nodeId)])).toEqual([
      ["canary", ["ro-n1"]],
      ["third", ["ro-n2"]],
      ["rest", ["ro-n3", "ro-n4"]],
    ]);
    expect(r.fromSpecHash).not.toBe(r.toSpecHash);
    // Every node went through BAKING to DONE, states only ever moving forward.
    const order = [S.WAITING, S.DEPLOYING, S.BAKING, S.DONE];
    for (const n of NODES) {
      const states = seen.get(n)!;
      expect(states.map(stateName), n).toContain("BAKING");
      expect(states.at(-1)).toBe(S.DONE);
      const ranks = states.map((s) => order.indexOf(s));
      expect(
        ranks.every((k, i) => k >= 0 && (i === 0 || k > ranks[i - 1]!)),
        `${n}: ${states.map(stateName)}`,
      ).toBe(true);
      // The record agrees: healthy at least min_healthy_time before it was done.
      const node = nodeOf(r, n);
      expect(timestampMs(node.finishedAt!) - timestampMs(node.healthySince!)).toBeGreaterThanOrEqual(2000);
    }
    expect(maxInFlight).toBe(1);

    // The rollout's own account: waves in order, and never two nodes under way at once.
    const events = await rolloutEvents(r.id, "rollout_succeeded");
    expect(events.filter((e) => !e.startsWith("rollout_node_"))).toEqual([
      "rollout_started",
      "rollout_wave_started",
      "rollout_wave_completed",
      "rollout_wave_started",
      "rollout_wave_completed",
      "rollout_wave_started",
      "rollout_wave_completed",
      "rollout_succeeded",
    ]);
    expect(events.filter((e) => e.startsWith("rollout_node_started:"))).toEqual(NODES.map((n) => `rollout_node_started:${n}`));
    let busy = 0;
    for (const e of events) {
      if (e.startsWith("rollout_node_started:")) busy++;
      if (e.startsWith("rollout_node_done:")) busy--;
      expect(busy).toBeLessThanOrEqual(1);
    }

    // What the agents ran: one v2 deploy per node, each created after the node before it was done.
    const deploys = await deploysOf(id, r.toSpecHash);
    let previousDone = 0;
    for (const n of NODES) {
      const mine = deploys.get(n)!;
      expect(
        mine.map((o) => [o.status, o.result?.code]),
        n,
      ).toEqual([[WorkOrderStatus.SUCCESS, "APPLY_OK"]]);
      expect(nodeOf(r, n).workOrderId).toBe(mine[0]!.id);
      expect(timestampMs(mine[0]!.createdAt!)).toBeGreaterThanOrEqual(previousDone);
      previousDone = timestampMs(nodeOf(r, n).finishedAt!);
    }
    for (const n of NODES) expect(await releaseOn(n, id), n).toBe("v2");
  }, 120_000);

  it("a canary that fails its health gate pauses the rollout (budget 0); the rest of the fleet keeps v1", async () => {
    const id = await onV1("canary");
    const before = new Map<string, string>();
    for (const n of NODES) before.set(n, await containerOn(n, id));
    await release("canary", "v2", false);
    const { rollout: r } = await follow(id, "the rollout to pause", (x) => x.status === RolloutStatus.PAUSED);

    expect(r.message).toContain("failure budget exhausted: 1 node(s) failed, 0 allowed");
    expect(r.paused?.actor).toBe("controller");
    expect(nodeOf(r, CANARY).state).toBe(S.FAILED);
    expect(nodeOf(r, CANARY).reason).not.toBe("");
    for (const n of NODES.slice(1)) expect(nodeOf(r, n).state, n).toBe(S.WAITING);
    // The canary's agent ran v2, saw it fail its gate and restored v1 on its own.
    const deploys = await deploysOf(id, r.toSpecHash);
    expect(deploys.get(CANARY)!.map((o) => o.result?.code)).toEqual(["ROLLED_BACK"]);
    expect(deploys.get(CANARY)![0]!.result?.details?.rollback?.restoredSpecHash).toBe(r.fromSpecHash);
    // The rest of the fleet was sent nothing and still runs v1, in the very same containers.
    for (const n of NODES.slice(1)) {
      expect(deploys.get(n), n).toEqual([]);
      expect(await containerOn(n, id), n).toBe(before.get(n));
    }
    for (const n of NODES) expect(await releaseOn(n, id), n).toBe("v1");
    const t = await targets(id);
    for (const x of t) expect(x.appliedHash, x.nodeId).toBe(r.fromSpecHash);
    for (const x of t.filter((y) => y.nodeId !== CANARY)) expect(x.convergence?.message, x.nodeId).toContain("is paused by controller");
    expect(await rolloutEvents(r.id, "rollout_budget_exhausted")).toEqual(
      expect.arrayContaining([`rollout_node_failed:${CANARY}`, "rollout_budget_exhausted"]),
    );
  }, 120_000);

  it("abort returns every node the rollout updated to v1 through rollback orders the agents run; it ends ROLLED_BACK", async () => {
    const id = await onV1("abort");
    await release("abort", "v2");
    const { rollout: waiting } = await follow(
      id,
      "the first wave done, the final one waiting for its promote",
      (x) => x.waves[0]?.completedAt !== undefined && x.status === RolloutStatus.PROGRESSING,
    );
    expect(nodeOf(waiting, "ro-n1").state).toBe(S.DONE);
    expect(nodeOf(waiting, "ro-n2").state).toBe(S.DONE);
    expect(await releaseOn("ro-n1", id)).toBe("v2");
    expect(await releaseOn("ro-n2", id)).toBe("v2");

    // Through the REST route, as an operator's script would.
    const aborted = await rest("POST", `/v1/rollouts/${waiting.id}/abort`, { reason: "bad release" });
    expect(aborted.status).toBe(200);
    expect((aborted.json.data as { rollout: { status: string } }).rollout.status).toBe("ROLLOUT_STATUS_ROLLING_BACK");
    const { rollout: r } = await follow(id, "the rollout to be rolled back", (x) => x.status === RolloutStatus.ROLLED_BACK);

    expect(r.aborted?.reason).toBe("bad release");
    for (const n of ["ro-n1", "ro-n2"]) {
      const node = nodeOf(r, n);
      expect(node.state, n).toBe(S.ROLLED_BACK);
      const back = (await ctl.admin(WorkOrderService).getWorkOrder({ id: node.rollbackWorkOrderId })).workOrder!;
      expect(back.type).toBe(WorkOrderType.ROLLBACK);
      expect(back.target?.nodeId).toBe(n);
      expect([back.status, back.result?.code]).toEqual([WorkOrderStatus.SUCCESS, "ROLLBACK_OK"]);
      expect(back.desiredState?.specHash).toBe(r.fromSpecHash);
    }
    for (const n of ["ro-n3", "ro-n4"]) expect(nodeOf(r, n).state, n).toBe(S.WAITING);
    const deploys = await deploysOf(id, r.toSpecHash);
    expect(deploys.get("ro-n3")).toEqual([]);
    expect(deploys.get("ro-n4")).toEqual([]);
    for (const n of NODES) expect(await releaseOn(n, id), n).toBe("v1");
    // A pass after the end holds the nodes it never reached, and starts nothing again.
    await waitFor("every target record back on v1, the untouched nodes held by the ended rollout", async () => {
      const t = await targets(id);
      const held = t.filter((x) => x.convergence?.message.includes("ended rolled_back before reaching this node")).map((x) => x.nodeId);
      return t.every((x) => x.appliedHash === r.fromSpecHash) && held.join() === "ro-n3,ro-n4" ? t : undefined;
    });
    expect((await rollouts().listRollouts({ tenantId: id })).rollouts.map((x) => x.id)).toEqual([r.id]);
    expect((await deploysOf(id, r.toSpecHash)).get("ro-n3")).toEqual([]);
    const events = await rolloutEvents(r.id, "rollout_rolled_back");
    expect(events).toEqual(expect.arrayContaining(["rollout_aborted", "rollout_node_rolled_back:ro-n1", "rollout_node_rolled_back:ro-n2"]));
    expect(events.at(-1)).toBe("rollout_rolled_back");
  }, 120_000);

  it("a node whose agent is killed mid-rollout is skipped at its progress_deadline, and converges to v2 when its agent returns", async () => {
    const silent = "ro-n4";
    const id = await onV1("offline");
    await release("offline", "v2");
    const { rollout: gated } = await follow(id, "the canary done", (x) => x.waves[0]?.completedAt !== undefined);
    await agents.get(silent)!.kill();
    let r: Rollout;
    let seen: Map<string, S[]>;
    try {
      await rollouts().promoteRollout({ id: gated.id, wave: "fleet" });
      ({ rollout: r, seen } = await follow(
        id,
        "the rollout to succeed without the silent node",
        (x) => x.status === RolloutStatus.SUCCEEDED,
      ));
      // Meanwhile the silent node's engine still runs v1, in the containers its agent left.
      expect(await releaseOn(silent, id)).toBe("v1");
    } finally {
      // Back whatever happened above: the tests after this one need all four agents.
      startAgent(silent);
    }

    const skipped = nodeOf(r, silent);
    expect(skipped.state).toBe(S.SKIPPED_OFFLINE);
    expect(skipped.reason).toContain("progress_deadline");
    expect(seen.get(silent)!.map(stateName)).toContain("DEPLOYING");
    for (const n of ["ro-n1", "ro-n2", "ro-n3"]) expect(nodeOf(r, n).state, n).toBe(S.DONE);
    expect(await rolloutEvents(r.id, "rollout_succeeded")).toContain(`rollout_node_skipped:${silent}`);

    await waitFor(
      `${silent} to converge on v2`,
      async () => {
        const t = (await targets(id)).find((x) => x.nodeId === silent);
        return t?.appliedHash === r.toSpecHash && t.convergence?.status === ConvergenceStatus.CONVERGED ? t : undefined;
      },
      60_000,
      100,
    );
    expect(await releaseOn(silent, id)).toBe("v2");
    // The ended rollout stays as it was recorded.
    expect(nodeOf((await rollouts().getRollout({ id: r.id })).rollout!, silent).state).toBe(S.SKIPPED_OFFLINE);
  }, 120_000);

  it("a controller killed (SIGKILL) twice mid-rollout and restarted on its data continues the rollout: no node deployed twice, none skipped", async () => {
    const id = await onV1("restart");
    const port = Number(new URL(ctl.url).port);
    const restart = async () => {
      ctl = await startControllerProcess({ dataDir: ctl.dataDir, port, extraArgs: ["--reconcile-interval", "2s"] });
    };
    await release("restart", "v2");
    const { rollout: started } = await follow(id, "the rollout to start", () => true);
    const to = started.toSpecHash;

    // Kill 1: the instant the order that brings ro-n2 the new spec is stored, while the pass that
    // issued it may still be writing the rollout and the tenant's records.
    const armed = killWhenOrderStored(
      ctl.child,
      ctl.dataDir,
      (o) => o.target?.tenant_id === id && o.target.node_id === "ro-n2" && o.desired_state?.spec_hash === to,
    );
    const first = await armed.killed.finally(armed.cancel);
    const pointed = storedTarget(ctl.dataDir, id, "ro-n2")?.last_work_order_id;
    await restart();

    // Kill 2: while ro-n3's order runs on its agent, which finishes it with no controller to report to.
    const running = await waitFor(
      "ro-n3's order to run on its agent",
      async () =>
        (await ordersOf(id)).find(
          (o) => o.target?.nodeId === "ro-n3" && o.desiredState?.specHash === to && o.status === WorkOrderStatus.RUNNING,
        ),
      60_000,
      50,
    );
    expect(await killNow(ctl.child)).toBe("SIGKILL");
    await restart();

    const { rollout: r } = await follow(id, "the rollout to succeed after the restarts", (x) => x.status === RolloutStatus.SUCCEEDED);
    expect(r.id).toBe(started.id);
    for (const n of NODES) expect(nodeOf(r, n).state, n).toBe(S.DONE);
    const deploys = await deploysOf(id, to);
    const why = {
      "ro-n2": `killed with order ${first.id} stored; the tenant's record of ro-n2 then pointed at ${pointed ?? "nothing"}`,
      "ro-n3": `killed while order ${running.id} ran`,
    } as Record<string, string>;
    for (const n of NODES) {
      const mine = deploys.get(n)!;
      expect(
        mine.map((o) => `${o.id} ${o.result?.code} (${o.result?.message})`),
        `${n}: one deploy of the rollout's spec; ${why[n] ?? ""}`,
      ).toHaveLength(1);
      expect(mine[0]!.result?.code, n).toBe("APPLY_OK");
      expect(nodeOf(r, n).workOrderId, n).toBe(mine[0]!.id);
    }
    expect(deploys.get("ro-n2")![0]!.id).toBe(first.id);
    expect(deploys.get("ro-n3")![0]!.id).toBe(running.id);
    for (const n of NODES) expect(await releaseOn(n, id), n).toBe("v2");
  }, 150_000);
});

// skippy on its Session stream killed by its own crash points (issue 38), on the file store and on
// PostgreSQL: after a pushed order is journaled and before its ack is sent (agent.after-push),
// and after the ack was answered accepted and before the order runs (agent.after-ack). A real
// controller process, a real skippy process on a real Docker engine; the order is a tenant's
// deploy. Between the kill and the restart the test looks at what the controller did with the
// claim: an unacknowledged push is released at once (long before its lease would lapse), an
// acknowledged one is kept for the agent. skippy is started again on the same state directory
// (its journal) and the order must end once: one end event, the deployment and the project on the
// engine as the order said, nothing left in the journal, and no result taken under a stale token.
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterEach, describe, expect, it } from "vitest";
import type { CrashPointName } from "../common/crash-points.js";
import { DeploymentPhase, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { crashAt, crashOf } from "./helpers/crash.js";
import { rpcError } from "./helpers/errors.js";
import { rawRequest } from "./helpers/https.js";
import { pgUrl } from "./helpers/postgres.js";
import { E2E_ADMIN_TOKEN, RUN_ID, removeComposeProject, startAgentProcess, waitFor, type AgentProcess } from "./helpers/processes.js";
import { CrashRig, leftToken } from "./helpers/session-crash.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! crash-points-agent-session.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");
if (dockerHost && !pgUrl()) console.warn("!!! crash-points-agent-session.test.ts: the PostgreSQL cases are SKIPPED");

/** Far longer than a test waits: "released at once" is well inside it, and a kept claim must not lapse. */
const LEASE_MS = 120_000;
const ROUND = "7";
const COMPOSE = `services:
  web:
    image: skipper-busybox:local
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    environment:
      ROUND: \${ROUND}
    stop_grace_period: 1s
`;

let rig: CrashRig | undefined;
let skippy: AgentProcess | undefined;
let project: string | undefined;

afterEach(async () => {
  await skippy?.stop();
  skippy = undefined;
  await rig?.dispose();
  rig = undefined;
  if (project && dockerHost) await removeComposeProject(dockerHost, project);
  project = undefined;
}, 60_000);

/** A node, skippy on its session (armed at `point`, if given), and a tenant deploying to it. */
interface Setup {
  r: CrashRig;
  nodeId: string;
  token: string;
  tenantId: string;
  /** The node's WorkOrderService, with its token. */
  orders: Awaited<ReturnType<CrashRig["node"]>>["orders"];
}

/** A result that would end the order otherwise, were it taken. */
const FAILED = { success: false, code: "APPLY_FAILED", message: "a late result" };

function startSkippy(s: Setup, point?: CrashPointName): AgentProcess {
  skippy = startAgentProcess({
    controller: s.r.ctl!,
    nodeId: s.nodeId,
    token: s.token,
    stateDir: join(s.r.root, "state"),
    workDir: join(s.r.root, "work"),
    dockerHost: dockerHost!,
    transport: "session",
    env: point ? crashAt(point) : {},
  });
  return skippy;
}

/** How many sessions the controller holds open now (its gauge). */
async function openSessions(r: CrashRig): Promise<number> {
  const m = await rawRequest(r.ctl!, "GET", "/metrics", { "x-admin-token": E2E_ADMIN_TOKEN });
  const line = /^skipper_agent_sessions (\d+)$/m.exec(m.body);
  if (!line) throw new Error(`no skipper_agent_sessions in /metrics (${m.status})`);
  return Number(line[1]);
}

/** The agent's log lines of `action` (both runs write to one file). */
async function agentLines(a: AgentProcess, action: string): Promise<string[]> {
  return (await readFile(a.logFile, "utf8")).split("\n").filter((l) => l.includes(`"action":"${action}"`));
}

/** The project's containers on the engine: service, state and its ROUND. */
async function projectOnEngine(name: string): Promise<{ service: string; state: string; round: string | undefined }[]> {
  const env = { ...process.env, DOCKER_HOST: dockerHost! };
  const ids = (await execa("docker", ["ps", "-aq", "--filter", `label=com.docker.compose.project=${name}`], { env })).stdout
    .split("\n")
    .filter(Boolean);
  if (ids.length === 0) return [];
  const out = (await execa("docker", ["inspect", ...ids], { env })).stdout;
  const all = JSON.parse(out) as { Config: { Labels: Record<string, string>; Env: string[] }; State: { Status: string } }[];
  return all.map((c) => ({
    service: c.Config.Labels["com.docker.compose.service"] ?? "",
    state: c.State.Status,
    round: c.Config.Env.find((e) => e.startsWith("ROUND="))?.slice("ROUND=".length),
  }));
}

/** Starts the controller and an armed skippy, creates the tenant, and waits for skippy to die at `point`. */
async function killedAt(store: "file" | "postgres", point: CrashPointName, tag: string): Promise<Setup & { o: WorkOrder }> {
  const r = await CrashRig.create(store);
  rig = r;
  await r.start({ leaseMs: LEASE_MS });
  const nodeId = `acs-${tag}`;
  const { token, orders } = await r.node(nodeId);
  const tenantId = `acs-${tag}-${RUN_ID}`;
  project = tenantId;
  const s = { r, nodeId, token, tenantId, orders };
  const ended = crashOf(startSkippy(s, point).child);
  await r.admin().resources.createResource({
    resourceType: "tenant",
    resource: create(ResourceSchema, {
      id: tenantId,
      resourceType: "tenant",
      desiredState: {
        kind: {
          case: "tenant",
          value: { deploymentPolicy: { targetNodeId: nodeId }, compose: { composeFile: COMPOSE, env: { ROUND } } },
        },
      },
    }),
  });
  expect(await ended).toMatchObject({ signal: "SIGKILL", point });
  const o = await waitFor("the tenant's order", async () => (await r.admin().orders.listWorkOrders({ tenantId })).workOrders[0]);
  return { ...s, o };
}

/** skippy started again on the same state directory; the order, once ended, checked to have ended once. */
async function endsOnce(s: Setup, o: WorkOrder, attempts: [bigint, string][]): Promise<WorkOrder> {
  const { r } = s;
  startSkippy(s);
  const f = await r.orderWhen(o.id, `order ${o.id} to end`, (x) => x.finishedAt !== undefined);
  expect([f.status, f.result?.code], f.result?.message).toEqual([WorkOrderStatus.SUCCESS, "APPLY_OK"]);
  expect(f.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual(attempts);
  expect(await r.count(o.id, "work_order_succeeded")).toBe(1);
  expect(await r.count(o.id, "work_order_failed")).toBe(0);
  expect(await r.count(o.id, "work_order_cancelled")).toBe(0);
  const deps = await r.deployments(s.tenantId);
  expect(deps).toHaveLength(1);
  const phase = deps[0]!.currentState?.kind.case === "deployment" ? deps[0]!.currentState.kind.value : undefined;
  expect([phase?.workOrderId, phase?.phase]).toEqual([o.id, DeploymentPhase.SUCCEEDED]);
  expect((await r.admin().orders.listWorkOrders({ tenantId: s.tenantId })).workOrders.map((x) => x.id)).toEqual([o.id]);
  // On the engine: the project the order described, up once.
  expect(await projectOnEngine(s.tenantId)).toEqual([{ service: "web", state: "running", round: ROUND }]);
  // Nothing left in the journal once the controller has the result.
  await waitFor("the journal to empty", async () =>
    (await readdir(join(r.root, "state", "orders"))).some((n) => n.endsWith(".json")) ? undefined : true,
  );
  return f;
}

for (const store of ["file", "postgres"] as const) {
  const T = store === "file" ? "f" : "p";
  describe.skipIf(!dockerHost || (store === "postgres" && !pgUrl()))(`skippy's session crash points, ${store} store`, () => {
    it("agent.after-push: the unacknowledged push is released at once; after the restart the order runs under the next token and ends once", async () => {
      const s = await killedAt(store, "agent.after-push", `${T}1`);
      const first = skippy!;
      // In between: the dead session's push went back to pending at once, not at its lease's end.
      const back = await s.r.orderWhen(s.o.id, "the unacknowledged push released", leftToken(1n));
      expect(back.status).toBe(WorkOrderStatus.PENDING);
      const released = back.attempts.find((a) => a.fencingToken === 1n)!;
      expect(released.outcome).toBe("released");
      const heldMs = timestampDate(released.endedAt!).getTime() - timestampDate(released.claimedAt!).getTime();
      expect(heldMs).toBeLessThan(LEASE_MS / 4);
      expect(await s.r.count(s.o.id, "work_order_claim_released")).toBe(1);
      expect(await s.r.count(s.o.id, "work_order_lease_expired")).toBe(0);

      await endsOnce(s, s.o, [
        [1n, "released"],
        [2n, "finished"],
      ]);
      // The journal's entry (pushed, never acked) was claimed again by the restarted skippy.
      expect((await agentLines(first, "recover")).some((l) => l.includes('"result":"claim"'))).toBe(true);
      // The first token's result is refused, and the order stays as it ended.
      const stale = await rpcError(s.orders.reportWorkOrderResult({ id: s.o.id, fencingToken: 1n, result: FAILED }));
      expect(stale.code).toBe("WORK_ORDER_NOT_CLAIMABLE");
      const after = await s.r.order(s.o.id);
      expect([after.status, after.result?.code]).toEqual([WorkOrderStatus.SUCCESS, "APPLY_OK"]);
      expect(await s.r.count(s.o.id, "work_order_succeeded")).toBe(1);
    }, 180_000);

    it("agent.after-ack: the acknowledged claim is kept for the agent; after the restart it is taken up under the same token and ends once", async () => {
      const s = await killedAt(store, "agent.after-ack", `${T}2`);
      const first = skippy!;
      // In between: the controller saw the session end and kept the claim (no release, no new token).
      await waitFor("the controller to see the session end", async () => ((await openSessions(s.r)) === 0 ? true : undefined));
      const held = await s.r.order(s.o.id);
      expect([held.status, held.claim?.fencingToken, held.claim?.nodeId]).toEqual([WorkOrderStatus.RUNNING, 1n, s.nodeId]);
      expect(await s.r.count(s.o.id, "work_order_claim_released")).toBe(0);
      expect(await projectOnEngine(s.tenantId)).toEqual([]);

      const f = await endsOnce(s, s.o, [[1n, "finished"]]);
      expect(timestampDate(f.finishedAt!).getTime()).toBeLessThan(timestampDate(held.claim!.leaseExpiresAt!).getTime());
      expect(await s.r.count(s.o.id, "work_order_claim_released")).toBe(0);
      expect(await s.r.count(s.o.id, "work_order_lease_expired")).toBe(0);
      // The journal's entry (acked) was taken up under its claim, not claimed again.
      const recovered = await agentLines(first, "recover");
      expect(recovered.some((l) => l.includes('"result":"adopt"'))).toBe(true);
      expect(recovered.some((l) => l.includes('"result":"claim"'))).toBe(false);
      // A result sent again under the token is answered with the stored end, and changes nothing.
      const again = await s.orders.reportWorkOrderResult({ id: s.o.id, fencingToken: 1n, result: FAILED });
      expect(again.duplicate).toBe(true);
      const after = await s.r.order(s.o.id);
      expect([after.status, after.result?.code]).toEqual([WorkOrderStatus.SUCCESS, "APPLY_OK"]);
      expect(await s.r.count(s.o.id, "work_order_succeeded")).toBe(1);
      expect(await s.r.count(s.o.id, "work_order_failed")).toBe(0);
    }, 180_000);
  });
}

// skippy on its Session stream killed by its own crash points (issue 38), on the file store and on
// PostgreSQL: after a pushed order is journaled and before its ack is sent (agent.after-push),
// and after the ack was answered accepted and before the order runs (agent.after-ack). A real
// controller process, a real skippy process on a real Docker engine; the order is a tenant's
// deploy. Between the kill and the restart the test looks at what the controller did with the
// claim: an unacknowledged push is released at once (long before its lease would lapse), an
// acknowledged one is kept for the agent. skippy is started again on the same state directory
// (its journal) and the order must end once: one end event, the deployment and the project on the
// engine as the order said, nothing left in the journal, and no result taken under a stale token.
// Last, the dead process's connection held half-open (helpers/lingering-proxy.ts), so its session
// outlives the restart: the restarted skippy must not take up the unacknowledged push (the
// session's end releases it later, and a command would run twice); it leaves it to the controller.
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterEach, describe, expect, it } from "vitest";
import type { CrashPointName } from "../common/crash-points.js";
import { DeploymentPhase, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { crashAt, crashOf } from "./helpers/crash.js";
import { rpcError } from "./helpers/errors.js";
import { rawRequest } from "./helpers/https.js";
import { startLingeringProxy, type LingeringProxy } from "./helpers/lingering-proxy.js";
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
let proxy: LingeringProxy | undefined;

afterEach(async () => {
  await skippy?.stop();
  skippy = undefined;
  await proxy?.close();
  proxy = undefined;
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

/** skippy for the node (armed at `point`; through the proxy on `viaPort`), allowed to run sh. */
function startSkippy(s: Setup, opts: { point?: CrashPointName; viaPort?: number } = {}): AgentProcess {
  const ctl = s.r.ctl!;
  skippy = startAgentProcess({
    controller: opts.viaPort ? { ...ctl, url: `https://127.0.0.1:${opts.viaPort}` } : ctl,
    nodeId: s.nodeId,
    token: s.token,
    stateDir: join(s.r.root, "state"),
    workDir: join(s.r.root, "work"),
    dockerHost: dockerHost!,
    transport: "session",
    extraArgs: ["--allow-command", "sh"],
    env: opts.point ? crashAt(opts.point) : {},
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
  const ended = crashOf(startSkippy(s, { point }).child);
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

/** Queues an execute_command that counts its runs in `runs` and then waits for the file `go`. */
async function blockingCommand(s: Setup, runs: string, go: string): Promise<WorkOrder> {
  await waitFor("the node's report to allow sh", async () => {
    const n = (await s.r.admin().resources.getResource({ resourceType: "node", id: s.nodeId })).resource;
    const caps = n?.currentState?.kind.case === "node" ? n.currentState.kind.value.capabilities : undefined;
    return caps?.allowedCommands.includes("sh") ? true : undefined;
  });
  await mkdir(join(s.r.root, "work"), { recursive: true });
  const argv = ["sh", "-c", `echo ran >> ${runs}; while [ ! -f ${go} ]; do sleep 0.1; done`];
  const action = { kind: { case: "executeCommand" as const, value: { command: { argv } } } };
  return (await s.r.admin().orders.createWorkOrder({ type: WorkOrderType.EXECUTE_COMMAND, target: { nodeId: s.nodeId }, action }))
    .workOrder!;
}

const runCount = async (file: string) => (await readFile(file, "utf8").catch(() => "")).split("\n").filter(Boolean).length;

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
      // The journal's entry (pushed, never acked) was left to the controller, which pushed it again.
      const recovered = await agentLines(first, "recover");
      expect(recovered.map((l) => (JSON.parse(l) as { result: string }).result)).toEqual(["leave_push"]);
      expect(await agentLines(first, "claim")).toEqual([]);
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
    it("agent.after-push, the dead process's session left half-open: the restarted skippy leaves the push to the controller and the command runs once", async () => {
      const r = await CrashRig.create(store);
      rig = r;
      await r.start({ leaseMs: LEASE_MS });
      const nodeId = `acs-${T}3`;
      const { token, orders } = await r.node(nodeId);
      const s: Setup = { r, nodeId, token, tenantId: "", orders };
      proxy = await startLingeringProxy({ host: "127.0.0.1", port: Number(new URL(r.ctl!.url).port) });
      const ended = crashOf(startSkippy(s, { point: "agent.after-push", viaPort: proxy.port }).child);
      const [runs, go] = [join(r.root, "runs"), join(r.root, "go")];
      const o = await blockingCommand(s, runs, go);
      expect(await ended).toMatchObject({ signal: "SIGKILL", point: "agent.after-push" });
      // The controller has not heard of the death: the session is open, the push unacknowledged.
      expect(proxy.lingering).toBe(1);
      expect(await openSessions(r)).toBe(1);
      const held = await r.order(o.id);
      expect([held.status, held.claim?.fencingToken]).toEqual([WorkOrderStatus.RUNNING, 1n]);

      const first = startSkippy(s);
      await waitFor("the command to start", async () => ((await runCount(runs)) > 0 ? true : undefined));
      // The dead process's connection goes at last; whatever that session still held unacknowledged
      // is released. Then the command may finish.
      proxy.release();
      await r.orderWhen(o.id, "the first token to be gone", leftToken(1n));
      await writeFile(go, "");
      const f = await r.orderWhen(o.id, `order ${o.id} to end`, (x) => x.finishedAt !== undefined);
      expect([f.status, f.result?.code], f.result?.message).toEqual([WorkOrderStatus.SUCCESS, "COMMAND_OK"]);
      expect(await runCount(runs)).toBe(1);
      expect(f.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([
        [1n, "released"],
        [2n, "finished"],
      ]);
      expect(await r.count(o.id, "work_order_succeeded")).toBe(1);
      expect(await r.count(o.id, "work_order_failed")).toBe(0);
      const recovered = await agentLines(first, "recover");
      expect(recovered.map((l) => (JSON.parse(l) as { result: string }).result)).toEqual(["leave_push"]);
    }, 180_000);
  });
}

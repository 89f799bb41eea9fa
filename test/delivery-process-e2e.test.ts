// Process archives through environments end to end (issue 34): the built controller and two skippy
// agents as processes, no Docker engine anywhere (each agent's DOCKER_HOST points at a socket that
// does not exist). One process_archive artifact (edge-<run id>): a tar.gz per version under a directory both
// agents allow (--allow-process-source), bin/server answering its version over HTTP on $PORT.
// Two environments of one delivery: test (takes what arrives; an HTTP check of its process) and
// prod (after test ran a release verified for a 2 s bake; an HTTP check of its own process). Each
// environment's tenant declares only a process naming the artifact, placed on its own node.
// What is asserted is what answers on the ports, what the orders carried, and what the
// environments say; every wait is for observed state, nothing waits a fixed time.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type EnvironmentStatus, ReleaseOutcome } from "../gen/skipper/v1/delivery_pb.js";
import { DeliveryService } from "../gen/skipper/v1/delivery_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { type WorkOrder, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { knownModules, readRunState } from "../agent/process/run-state.js";
import { isSameProcess } from "../agent/process/supervisor.js";
import {
  type AgentProcess,
  type ControllerProcess,
  freePort,
  RUN_ID,
  startAgentProcess,
  startControllerProcess,
  waitFor,
} from "./helpers/processes.js";
import { res } from "./helpers/resources.js";

const ARTIFACT = `edge-${RUN_ID}`;
type Stage = "test" | "prod";
const STAGES: Stage[] = ["test", "prod"];
const TENANT: Record<Stage, string> = { test: `pe-test-${RUN_ID}`, prod: `pe-prod-${RUN_ID}` };
const NODE: Record<Stage, string> = { test: "pe-test", prod: "pe-prod" };
// Module names are per node; each tenant names its own, so two agents on one host never share one.
const MODULE: Record<Stage, string> = { test: `edge-${RUN_ID}-test`, prod: `edge-${RUN_ID}-prod` };
const port: Record<Stage, number> = { test: 0, prod: 0 };

let ctl: ControllerProcess;
let root: string;
let archives: string;
const agents: AgentProcess[] = [];
/** version -> hex sha256 of its archive. */
const sums = new Map<string, string>();
const api = () => ctl.admin(ResourceService);
const delivery = () => ctl.admin(DeliveryService);
const workDir = (s: Stage) => join(root, NODE[s], "work");
const archive = (version: string) => join(archives, `edge-${version}.tar.gz`);

/** Packs version `version` of the module: bin/server execs node on server.cjs, which answers the version. */
async function pack(version: string): Promise<void> {
  const src = join(root, "src", version);
  await mkdir(join(src, "bin"), { recursive: true });
  await writeFile(
    join(src, "server.cjs"),
    `require("node:http").createServer((q, s) => s.end(${JSON.stringify(version)})).listen(Number(process.env.PORT), "127.0.0.1");\n`,
  );
  await writeFile(join(src, "bin", "server"), `#!/bin/sh\nexec node "$(dirname "$0")/../server.cjs"\n`);
  await chmod(join(src, "bin", "server"), 0o755);
  await execa("tar", ["-czf", archive(version), "-C", src, "."]);
  sums.set(
    version,
    createHash("sha256")
      .update(await readFile(archive(version)))
      .digest("hex"),
  );
}

/** What answers on stage `s`'s port: the version its process serves, "" when nothing listens. */
async function answer(s: Stage): Promise<string> {
  return fetch(`http://127.0.0.1:${port[s]}/`, { signal: AbortSignal.timeout(2000) }).then(
    (r) => r.text(),
    () => "",
  );
}

/** Waits until stage `s`'s port answers `version`. */
function answers(s: Stage, version: string, timeoutMs = 120_000): Promise<true> {
  return waitFor(`${s}'s process to answer ${version}`, async () => ((await answer(s)) === version ? true : undefined), timeoutMs);
}

async function envStatus(s: Stage): Promise<EnvironmentStatus> {
  const r = (await api().getResource({ resourceType: "environment", id: s })).resource;
  if (r?.currentState?.kind.case !== "environment") throw new Error(`environment ${s} has no status`);
  return r.currentState.kind.value;
}
const versionOf = (st: EnvironmentStatus | undefined) => st?.current?.versions.find((v) => v.artifactId === ARTIFACT)?.version;

/** Waits until environment `s` runs `version` verified (nothing in flight). */
function verified(s: Stage, version: string, timeoutMs = 120_000): Promise<EnvironmentStatus> {
  return waitFor(
    `${s} to run ${ARTIFACT} ${version} verified`,
    async () => {
      const st = await envStatus(s);
      return versionOf(st) === version && !st.inFlight && st.history[0]?.outcome === ReleaseOutcome.VERIFIED ? st : undefined;
    },
    timeoutMs,
  );
}

/** The tenant's deploy orders (deploy_service and rollback), newest first. */
async function deployOrders(s: Stage): Promise<WorkOrder[]> {
  const all = (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: TENANT[s], pageSize: 500, newestFirst: true })).workOrders;
  return all.filter((o) => o.type === WorkOrderType.DEPLOY_SERVICE || o.type === WorkOrderType.ROLLBACK);
}
/** The (one) process module an order's desired state carries. */
const processOf = (o: WorkOrder) => o.desiredState?.processes[0];

/** Waits until the tenant is CONVERGED and its newest successful deploy order ran `version`; returns that order. */
function deployed(s: Stage, version: string): Promise<WorkOrder> {
  return waitFor(`${TENANT[s]} to converge on ${version}`, async () => {
    const t = (await api().getResource({ resourceType: "tenant", id: TENANT[s] })).resource;
    if (t?.convergence?.status !== ConvergenceStatus.CONVERGED) return undefined;
    const done = (await deployOrders(s)).find((o) => o.status === WorkOrderStatus.SUCCESS);
    return done && processOf(done)?.version === version ? done : undefined;
  });
}

/** Stage `s`'s tenant: placed on its node, running the artifact's release as its own module. */
function tenantSpec(s: Stage) {
  const edge = { artifactId: ARTIFACT, spec: { module: MODULE[s], argv: ["bin/server"], env: { PORT: String(port[s]) } } };
  return { deploymentPolicy: { targetNodeId: NODE[s] }, processes: [edge] };
}

/** Kills what the agents' supervisors started, by the pid (and start time) each module's run state records. */
async function killModules(): Promise<number> {
  let killed = 0;
  for (const s of STAGES) {
    if (!existsSync(workDir(s))) continue;
    for (const m of await knownModules(workDir(s))) {
      const st = await readRunState(workDir(s), m).catch(() => undefined);
      if (st && st.pid > 0 && (await isSameProcess(st.pid, st.startTicks))) {
        process.kill(-st.pid, "SIGKILL"); // started detached: its own process group
        killed++;
      }
    }
  }
  return killed;
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "skipper-e2e-proc-delivery-"));
  archives = join(root, "archives");
  await mkdir(archives);
  for (const v of ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]) await pack(v);
  for (const s of STAGES) port[s] = await freePort();
  ctl = await startControllerProcess({
    dataDir: join(root, "data"),
    extraArgs: ["--reconcile-interval", "2s", "--promotion-interval", "1s"],
  });
  for (const s of STAGES) {
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE[s], labels: { tier: s } })).token;
    agents.push(
      startAgentProcess({
        controller: ctl,
        nodeId: NODE[s],
        token,
        stateDir: join(root, NODE[s], "state"),
        workDir: workDir(s),
        // No engine: whatever asks Docker for a tenant of processes alone fails.
        dockerHost: `unix://${join(root, "no-engine.sock")}`,
        extraArgs: ["--allow-process-source", archives],
        env: { HOME: join(root, NODE[s], "home") },
      }),
    );
  }
  const create = (type: string, id: string, value: object) =>
    api().createResource({ resourceType: type, resource: res(type, id, { case: type, value }) });
  // An artifact belongs to one tenant (test's); prod's tenant runs it through its environment.
  for (const s of STAGES) await create("tenant", TENANT[s], tenantSpec(s));
  await create("artifact", ARTIFACT, {
    tenantId: TENANT.test,
    source: { case: "processArchive", value: { module: "edge", urlTemplate: join(archives, "edge-{version}.tar.gz") } },
  });
  await create("delivery", "edge", { displayName: "Edge" });
  const check = (s: Stage) => ({
    name: "answers",
    kind: { case: "probe", value: { kind: { case: "http", value: { url: `http://127.0.0.1:${port[s]}/` } } } },
    interval: durationFromMs(1000),
  });
  await create("environment", "test", {
    deliveryId: "edge",
    tenantIds: [TENANT.test],
    artifactIds: [ARTIFACT],
    verifications: [check("test")],
  });
  await create("environment", "prod", {
    deliveryId: "edge",
    tenantIds: [TENANT.prod],
    artifactIds: [ARTIFACT],
    dependsOn: [{ environmentId: "test", bakeTime: durationFromMs(2000) }],
    verifications: [check("prod")],
  });
}, 120_000);

afterAll(async () => {
  for (const a of agents) await a.stop();
  await ctl?.stop();
  // The agents' own supervisor starts modules detached, so they outlive their agent (by design:
  // a restarted agent adopts them); nothing else stops them here.
  if (root) await killModules();
  if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
}, 60_000);

it("before any version, each tenant waits PROMOTION_PENDING and names its environment", async () => {
  for (const s of STAGES) {
    const t = await waitFor(`${TENANT[s]} to wait for a promotion`, async () => {
      const r = (await api().getResource({ resourceType: "tenant", id: TENANT[s] })).resource;
      return r?.convergence?.status === ConvergenceStatus.PROMOTION_PENDING &&
        r.convergence.message.includes(`environment ${s} has promoted no release`)
        ? r
        : undefined;
    });
    expect(t.convergence?.message).toContain(`artifact ${ARTIFACT}`);
  }
  expect(await deployOrders("test")).toEqual([]);
  expect([await answer("test"), await answer("prod")]).toEqual(["", ""]);
});

it("1.0.0 posted: test runs it, prod takes it only after test ran it verified for the bake", async () => {
  const posted = await delivery().createArtifactVersion({ artifactId: ARTIFACT, version: "1.0.0", digest: `sha256:${sums.get("1.0.0")}` });
  expect(posted.created).toBe(true);
  await answers("test", "1.0.0");
  const test = await verified("test", "1.0.0");
  const prod = await verified("prod", "1.0.0");
  await answers("prod", "1.0.0");
  const since = timestampMs(test.history[0]!.runningSince!);
  expect(timestampMs(prod.history[0]!.promotedAt!) - since).toBeGreaterThanOrEqual(2000);
  // What the orders and the deployment records carried: the version, its archive and its sha256.
  for (const s of STAGES) {
    const order = await deployed(s, "1.0.0");
    expect(order.target?.nodeId).toBe(NODE[s]);
    expect(order.desiredState?.composeProject?.composeFile).toBe("");
    expect(order.desiredState?.processes).toHaveLength(1);
    expect(processOf(order)).toMatchObject({
      module: MODULE[s],
      version: "1.0.0",
      sha256: sums.get("1.0.0"),
      source: { kind: { case: "path", value: archive("1.0.0") } },
      argv: ["bin/server"],
      env: { PORT: String(port[s]) },
    });
    expect(order.result?.message).toMatch(new RegExp(`${MODULE[s]} 1\\.0\\.0 running \\(pid \\d+\\)`));
    const deployments = (await api().listResources({ resourceType: "deployment", tenantId: TENANT[s], pageSize: 100 })).resources;
    const dep = deployments.find((d) => d.desiredState?.kind.case === "deployment" && d.desiredState.kind.value.workOrderId === order.id);
    const spec = dep?.desiredState?.kind.case === "deployment" ? dep.desiredState.kind.value : undefined;
    expect(spec?.processes.map((p) => [p.module, p.version, p.sha256])).toEqual([[MODULE[s], "1.0.0", sums.get("1.0.0")]]);
  }
  // The process runs from the agent's work dir, under its supervisor's record.
  expect(await readRunState(workDir("test"), MODULE.test)).toMatchObject({ version: "1.0.0", desired: "running" });
}, 180_000);

it("1.1.0 posted: both environments move to it", async () => {
  await delivery().createArtifactVersion({ artifactId: ARTIFACT, version: "1.1.0", digest: `sha256:${sums.get("1.1.0")}` });
  await verified("test", "1.1.0");
  await answers("test", "1.1.0");
  await verified("prod", "1.1.0");
  await answers("prod", "1.1.0");
  for (const s of STAGES) expect(processOf(await deployed(s, "1.1.0"))?.sha256).toBe(sums.get("1.1.0"));
}, 180_000);

it("1.1.0 marked bad with 1.0.0's archive gone: both go back to 1.0.0, the version still installed", async () => {
  await rm(archive("1.0.0"));
  await delivery().markVersionBad({ artifactId: ARTIFACT, version: "1.1.0", reason: "drops connections" });
  for (const s of STAGES) {
    await answers(s, "1.0.0");
    const st = await waitFor(`${s} to be back on 1.0.0`, async () => {
      const x = await envStatus(s);
      return versionOf(x) === "1.0.0" && !x.inFlight ? x : undefined;
    });
    expect(st.history.some((h) => h.outcome === ReleaseOutcome.DEMOTED)).toBe(true);
    // The order that went back named the archive that is gone; it succeeded all the same.
    const back = await deployed(s, "1.0.0");
    expect(processOf(back)?.source?.kind).toEqual({ case: "path", value: archive("1.0.0") });
    expect(existsSync(archive("1.0.0"))).toBe(false);
    expect(await readRunState(workDir(s), MODULE[s])).toMatchObject({ version: "1.0.0", desired: "running" });
  }
}, 180_000);

it("a version whose archive does not match its digest fails on test, never reaches prod, and test keeps answering", async () => {
  // 1.2.0's archive is on disk, but the digest posted is not its sha256.
  const wrong = createHash("sha256").update("not the archive").digest("hex");
  expect(wrong).not.toBe(sums.get("1.2.0"));
  await delivery().createArtifactVersion({ artifactId: ARTIFACT, version: "1.2.0", digest: `sha256:${wrong}` });
  const failed = await waitFor("test's deploy of 1.2.0 to fail", async () =>
    (await deployOrders("test")).find((o) => processOf(o)?.version === "1.2.0" && o.status === WorkOrderStatus.FAILED),
  );
  expect(failed.result?.code, failed.result?.message).toBe("CHECKSUM_MISMATCH");
  expect(failed.result?.message).toBe(`process module ${MODULE.test}: artifact sha256 is ${sums.get("1.2.0")}, the order says ${wrong}`);
  expect(await answer("test")).toBe("1.0.0");
  // The same archive fails the same way every time: no retries, the node gives up at once
  // (ORDER_FAILED) and keeps what it ran; the environment's promotion ends FAILED, so it is not
  // left DEPLOYING a release that will never converge.
  const t = await waitFor(
    `${TENANT.test} to give up on 1.2.0's spec`,
    async () => {
      const r = (await api().getResource({ resourceType: "tenant", id: TENANT.test })).resource;
      return r?.convergence?.status === ConvergenceStatus.ORDER_FAILED ? r : undefined;
    },
    120_000,
    500,
  );
  expect(t.convergence?.message).toMatch(/CHECKSUM_MISMATCH.*fails every time/);
  const ended = await waitFor("test's promotion of 1.2.0 to end", async () => {
    const s = await envStatus("test");
    return s.inFlight ? undefined : s;
  });
  expect(ended.history.find((h) => h.release?.versions[0]?.version === "1.2.0")?.reason).toMatch(
    new RegExp(`^${TENANT.test} could not deploy it: node pe-test: .*CHECKSUM_MISMATCH`),
  );
  const tries = (await deployOrders("test")).filter((o) => processOf(o)?.version === "1.2.0");
  expect(tries.map((o) => o.result?.code)).toEqual(["CHECKSUM_MISMATCH"]);
  expect(await readRunState(workDir("test"), MODULE.test)).toMatchObject({ version: "1.0.0", desired: "running" });
  expect(await answer("test")).toBe("1.0.0");
  // Test never ran 1.2.0 verified, so prod never had it as a candidate: it stays on 1.0.0.
  const prod = await envStatus("prod");
  expect(versionOf(prod)).toBe("1.0.0");
  expect(prod.inFlight).toBeUndefined();
  expect(prod.candidates.map((c) => c.release?.versions[0]?.version)).not.toContain("1.2.0");
  expect((await deployOrders("prod")).filter((o) => processOf(o)?.version === "1.2.0")).toEqual([]);
  expect(await answer("prod")).toBe("1.0.0");
}, 180_000);

it("after the failed version, the next good one moves through (nobody had to mark the failed one bad)", async () => {
  await delivery().createArtifactVersion({ artifactId: ARTIFACT, version: "1.3.0", digest: `sha256:${sums.get("1.3.0")}` });
  await verified("test", "1.3.0");
  await answers("test", "1.3.0");
  await verified("prod", "1.3.0");
  await answers("prod", "1.3.0");
  for (const s of STAGES) expect(processOf(await deployed(s, "1.3.0"))?.sha256).toBe(sums.get("1.3.0"));
}, 180_000);

it("the modules outlive their agents (started detached); killed by their run state's pid, nothing answers", async () => {
  for (const a of agents) await a.stop();
  expect([await answer("test"), await answer("prod")]).toEqual(["1.3.0", "1.3.0"]);
  expect(await killModules()).toBe(2);
  for (const s of STAGES) await waitFor(`${s}'s port to fall silent`, async () => ((await answer(s)) === "" ? true : undefined));
}, 60_000);

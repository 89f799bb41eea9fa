// `skipper container deploy|rollback` end to end: the built CLI, controller and agent as processes
// on a real engine. The agent is started with the crash point agent.container-after-stop armed, so
// it SIGKILLs itself during the update, after the old container stopped and was renamed
// <name>-previous and before the new one was created (the first deploy has no old container and
// does not pass the point). Started again, it runs the interrupted order again from its journal and
// the update finishes: the CLI that waited the whole time gets its answer and a container named
// <name> runs the new image. Then a rollback by renaming, and a bad spec refused at the boundary.
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { crashAt, crashOf } from "./helpers/crash.js";
import {
  E2E_ADMIN_TOKEN,
  RUN_ID,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { versionImage } from "./helpers/registry.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! container-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const NODE = "ctr-node";
const NAME = `ctr-e2e-${RUN_ID}`;
const REPO = `localhost:9/skipper-ctr-e2e-${RUN_ID}/web`;
const SECRET = `tok-${RUN_ID}-e2e-secret`;

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe.skipIf(!dockerHost)("skipper container (built CLI, controller and agent, real engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let token: string;
  let root: string;
  let cliEnv: NodeJS.ProcessEnv;
  const ids: Record<string, string> = {};
  const denv = { DOCKER_HOST: dockerHost! };
  const docker = async (...args: string[]) => (await execa("docker", args, { env: denv })).stdout.trim();
  const state = async (name: string) => {
    const r = await execa("docker", ["container", "inspect", "--format", "{{.Id}} {{.Image}} {{.State.Running}}", name], {
      env: denv,
      reject: false,
    });
    if (r.exitCode !== 0) return undefined;
    const [id, image, running] = r.stdout.trim().split(" ");
    return { id: id!, image: image!, running: running === "true" };
  };
  const startAgent = (env: Record<string, string> = {}) =>
    startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      env,
    });

  function cli(args: string[]): Promise<CliRun> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, ...args], { env: cliEnv, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stdout, stderr }));
    });
  }
  const deployArgs = (version: "v1" | "v2", ...more: string[]) => [
    ...["container", "deploy", NODE, "--name", NAME, "--image", `${REPO}:${version}`, "--digest", ids[version]!],
    ...["--settle", "300ms", "--stop-timeout", "2", "-e", "API_TOKEN", "-e", `VERSION=${version}`, ...more],
    ...["--", "sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
  ];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-ctr-"));
    for (const v of ["v1", "v2"] as const) {
      await versionImage(dockerHost!, `${REPO}:${v}`, v);
      ids[v] = await docker("image", "inspect", "--format", "{{.Id}}", `${REPO}:${v}`);
    }
    // Leases far longer than the test: the restarted agent finishes the order under its first claim.
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--lease-duration", "300s"] });
    token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    cliEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(SKIPPER_|SKIPPY_)/.test(k)));
    Object.assign(cliEnv, {
      XDG_CONFIG_HOME: join(root, "config"),
      SKIPPER_SERVER: ctl.url,
      SKIPPER_CA_FILE: ctl.caFile,
      SKIPPER_TOKEN: E2E_ADMIN_TOKEN,
      API_TOKEN: SECRET,
    });
  }, 120_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    for (const n of [NAME, `${NAME}-previous`, `${NAME}-replaced`]) await execa("docker", ["rm", "-f", n], { env: denv, reject: false });
    await execa("docker", ["rmi", `${REPO}:v1`, `${REPO}:v2`], { env: denv, reject: false });
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("deploys, and an update the agent is killed in between the old container's stop and the new one's start finishes after its restart", async () => {
    agent = startAgent(crashAt("agent.container-after-stop"));
    const ended = crashOf(agent.child);
    await waitFor("the agent's first heartbeat", async () => {
      const n = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource;
      return n?.currentState?.kind.case === "node" && n.currentState.kind.value.capabilities?.dockerAvailable ? true : undefined;
    });
    const first = await cli(deployArgs("v1"));
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain(`${NAME} runs ${REPO}:v1 at ${ids.v1}`);
    const v1 = (await state(NAME))!;
    expect(v1).toMatchObject({ image: ids.v1, running: true });
    expect(await docker("exec", NAME, "sh", "-c", "echo $API_TOKEN")).toBe(SECRET);

    const update = cli(deployArgs("v2", "--keep-previous"));
    expect(await ended).toMatchObject({ signal: "SIGKILL", point: "agent.container-after-stop" });
    // Exactly between the two: no <name>, the old one stopped as <name>-previous.
    expect(await state(NAME)).toBeUndefined();
    expect(await state(`${NAME}-previous`)).toEqual({ ...v1, running: false });

    agent = startAgent();
    const done = await update;
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toContain("finishing an update an earlier run left unfinished");
    expect(await state(NAME)).toMatchObject({ image: ids.v2, running: true });
    expect(await state(`${NAME}-previous`)).toEqual({ ...v1, running: false });
    const order = (await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: NODE, pageSize: 100 })).workOrders.find(
      (o) => o.type === WorkOrderType.DEPLOY_CONTAINER && o.result?.details?.container?.digest === ids.v2,
    )!;
    // One claim: the restarted agent took up its own, nothing waited for a lease to lapse.
    expect(order.attempts.map((a) => a.fencingToken)).toEqual([1n]);
    expect(order.result?.details?.container).toMatchObject({ resumed: true, previousKept: true, previousContainerId: v1.id });
    // The secret reached the container through an env file: never the agent's log or the order's events.
    expect(await readFile(agent.logFile, "utf8")).not.toContain(SECRET);
  }, 180_000);

  it("rollback runs the kept container again, and a second one rolls forward", async () => {
    const v2 = (await state(NAME))!;
    const v1 = (await state(`${NAME}-previous`))!;
    const back = await cli(["container", "rollback", NODE, NAME]);
    expect(back.code, back.stderr).toBe(0);
    expect(await state(NAME)).toEqual({ ...v1, running: true });
    expect(await state(`${NAME}-previous`)).toEqual({ ...v2, running: false });
    const forward = await cli(["container", "rollback", NODE, NAME]);
    expect(forward.code, forward.stderr).toBe(0);
    expect(await state(NAME)).toEqual({ ...v2, running: true });
  }, 90_000);

  it("a bad spec is refused by the controller, naming the field, and nothing is queued", async () => {
    const before = (await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: NODE, pageSize: 100 })).workOrders.length;
    const r = await cli(["container", "deploy", NODE, "--name", "web-previous", "--image", `${REPO}:v1`]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("action.deploy_container.spec.name");
    const bad = await cli(["container", "deploy", NODE, "--name", "web", "--image", `${REPO}:v1`, "--label", "skipper.role=x"]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("reserved");
    expect((await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: NODE, pageSize: 100 })).workOrders.length).toBe(before);
  }, 60_000);
});

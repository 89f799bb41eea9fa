// The deploy_container and control_container executors on a real Docker engine: two images of
// their own (committed from the busybox test image, so each has its own id) pinned by that id, a
// container deployed, updated, a failing update rolled back by renaming, a rollback by swapping
// names and back, a digest the registry does not serve refused before the old container stops
// (a private registry on loopback), and a run that finds the state an interrupted update leaves
// (no <name>, a stopped <name>-previous) finishing the update. The kill itself, at the crash
// point between the old container's stop and the new one's start, is in container-e2e.test.ts.
import { mkdir, mkdtemp, readdir, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toJsonString, type MessageInitShape } from "@bufbuild/protobuf";
import { execa } from "execa";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContainerOperation, type ContainerSpecSchema } from "../gen/skipper/v1/order_action_pb.js";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderResultSchema, WorkOrderSchema, WorkOrderType, type WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import type { AgentConfig } from "../agent/config.js";
import { controlContainer } from "../agent/executors/control-container.js";
import { deployContainer } from "../agent/executors/deploy-container.js";
import type { ExecContext } from "../agent/executors/executor.js";
import { ENV_DIR, sweepEnvFiles } from "../agent/engine/container-engine.js";
import { RUN_ID } from "./helpers/processes.js";
import { registryInstalled, startRegistry, versionImage, type TestRegistry } from "./helpers/registry.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const haveRegistry = await registryInstalled();
if (!dockerHost) console.warn("!!! container-executor.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const NAME = `ctr-${RUN_ID}`;
// Not a registry anyone serves: these tags exist on the engine only.
const REPO = `localhost:9/skipper-ctr-${RUN_ID}/web`;
// Stops at once on SIGTERM (sh as PID 1 ignores it otherwise), runs until then.
const RUNS = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"];

describe.skipIf(!dockerHost)("the container executor on a real engine", () => {
  let workDir: string;
  const ids: Record<string, string> = {};
  const saved = { host: process.env.DOCKER_HOST, config: process.env.DOCKER_CONFIG };
  const env = { DOCKER_HOST: dockerHost! };
  const docker = async (...args: string[]) => (await execa("docker", args, { env })).stdout.trim();
  const inspect = async (name: string) => {
    const r = await execa(
      "docker",
      ["container", "inspect", "--format", "{{.Id}} {{.Image}} {{.State.Running}} {{.State.StartedAt}}", name],
      {
        env,
        reject: false,
      },
    );
    if (r.exitCode !== 0) return undefined;
    const [id, image, running, startedAt] = r.stdout.trim().split(" ");
    return { id: id!, image: image!, running: running === "true", startedAt: startedAt! };
  };
  const ctx = (): ExecContext => ({
    config: { nodeId: "n1", workDir } as unknown as AgentConfig,
    host: { capabilities: create(NodeCapabilitiesSchema, { dockerAvailable: true }) },
    log: pino({ level: "silent" }),
    signal: new AbortController().signal,
  });
  const spec = (version: "v1" | "v2", more: Partial<MessageInitShape<typeof ContainerSpecSchema>> = {}) =>
    ({
      name: NAME,
      image: `${REPO}:${version}`,
      digest: ids[version],
      args: RUNS,
      env: { GREETING: "hello", API_TOKEN: "tok-7f3a9c-secret" },
      labels: { team: "web" },
      settle: { nanos: 300_000_000 },
      readyTimeout: { seconds: 20n },
      stopTimeoutSeconds: 2,
      ...more,
    }) as MessageInitShape<typeof ContainerSpecSchema>;
  const deploy = async (s: MessageInitShape<typeof ContainerSpecSchema>): Promise<WorkOrderResult> =>
    (
      await deployContainer(
        create(WorkOrderSchema, {
          id: `o-${Math.random().toString(36).slice(2, 8)}`,
          type: WorkOrderType.DEPLOY_CONTAINER,
          target: { nodeId: "n1" },
          action: { kind: { case: "deployContainer", value: { spec: s } } },
        }),
        ctx(),
      )
    ).result;
  const control = async (operation: ContainerOperation): Promise<WorkOrderResult> =>
    (
      await controlContainer(
        create(WorkOrderSchema, {
          id: "o-control",
          type: WorkOrderType.CONTROL_CONTAINER,
          target: { nodeId: "n1" },
          action: { kind: { case: "controlContainer", value: { name: NAME, operation } } },
        }),
        ctx(),
      )
    ).result;

  beforeAll(async () => {
    process.env.DOCKER_HOST = dockerHost!;
    workDir = await mkdtemp(join(tmpdir(), "skippy-ctr-"));
    for (const v of ["v1", "v2"] as const) {
      await versionImage(dockerHost!, `${REPO}:${v}`, v);
      ids[v] = await docker("image", "inspect", "--format", "{{.Id}}", `${REPO}:${v}`);
    }
  }, 60_000);

  afterAll(async () => {
    for (const n of [NAME, `${NAME}-previous`, `${NAME}-replaced`]) await execa("docker", ["rm", "-f", n], { env, reject: false });
    await execa("docker", ["rmi", `${REPO}:v1`, `${REPO}:v2`], { env, reject: false });
    process.env.DOCKER_HOST = saved.host;
    if (saved.config === undefined) delete process.env.DOCKER_CONFIG;
    else process.env.DOCKER_CONFIG = saved.config;
    await rm(workDir, { recursive: true, force: true });
  });

  it("a first deploy runs the pinned image under the name, labelled, pulling nothing", async () => {
    const r = await deploy(spec("v1"));
    expect(r.code, r.message).toBe("CONTAINER_OK");
    const c = r.details!.container!;
    expect(c).toMatchObject({ name: NAME, digest: ids.v1, pulled: false, previousContainerId: "" });
    expect(c.steps).toEqual(["image-local", "verify", "create", "start", "wait-up"]);
    const seen = await inspect(NAME);
    expect(seen).toMatchObject({ id: c.containerId, image: ids.v1, running: true });
    const labels = JSON.parse(await docker("container", "inspect", "--format", "{{json .Config.Labels}}", NAME));
    expect(labels).toMatchObject({ "skipper.container": NAME, "skipper.digest": ids.v1, "skipper.image": `${REPO}:v1`, team: "web" });
    // Env values reach the container, never the result.
    expect(await docker("exec", NAME, "sh", "-c", "echo $API_TOKEN")).toBe("tok-7f3a9c-secret");
    expect(toJsonString(WorkOrderResultSchema, r)).not.toContain("tok-7f3a9c-secret");
    // The env file lived in the work directory's private folder (0700) and is gone.
    expect(await readdir(join(workDir, ENV_DIR))).toEqual([]);
    expect((await stat(join(workDir, ENV_DIR))).mode & 0o777).toBe(0o700);
  }, 60_000);

  it("env files an interrupted create left in the work directory are swept at agent start", async () => {
    const left = join(workDir, ENV_DIR, "create-left");
    await mkdir(left, { recursive: true });
    await writeFile(join(left, "env"), "API_TOKEN=tok-left-behind\n");
    expect(await sweepEnvFiles(workDir)).toBe(1);
    expect(await readdir(join(workDir, ENV_DIR))).toEqual([]);
    expect(await sweepEnvFiles(join(workDir, "never-made"))).toBe(0);
  });

  it("an update stops the old container, starts the new image and removes the old one; the same order again changes nothing", async () => {
    const old = (await inspect(NAME))!;
    const r = await deploy(spec("v2"));
    expect(r.code, r.message).toBe("CONTAINER_OK");
    const c = r.details!.container!;
    expect(c.steps).toEqual(["image-local", "verify", "stop-old", "rename-old", "create", "start", "wait-up", "remove-previous"]);
    expect(c).toMatchObject({ digest: ids.v2, previousContainerId: old.id, previousDigest: ids.v1, previousKept: false });
    expect(await inspect(NAME)).toMatchObject({ id: c.containerId, image: ids.v2, running: true });
    expect(await inspect(old.id)).toBeUndefined();
    expect(await inspect(`${NAME}-previous`)).toBeUndefined();

    const again = await deploy(spec("v2"));
    expect(again.code, again.message).toBe("CONTAINER_OK");
    expect(again.details!.container!.steps).toEqual(["image-local", "verify", "wait-up"]);
    expect((await inspect(NAME))!.id).toBe(c.containerId);
  }, 60_000);

  it("a new version that exits is removed and the old container is renamed back and runs again (ROLLED_BACK)", async () => {
    const old = (await inspect(NAME))!;
    const r = await deploy(spec("v1", { args: ["sh", "-c", "echo boom; exit 3"] }));
    expect(r.code, r.message).toBe("ROLLED_BACK");
    expect(r.success).toBe(false);
    // Why, in its words: it exited (restarted by its policy, or not), and its last output.
    expect(r.message).toMatch(/did not come up: it exited/);
    expect(r.message).toContain("its last output: boom");
    expect(r.details!.container!.steps).toEqual([
      ...["image-local", "verify", "stop-old", "rename-old", "create", "start", "wait-up"],
      ...["remove-new", "rename-previous-back", "start-previous"],
    ]);
    expect(await inspect(NAME)).toMatchObject({ id: old.id, image: ids.v2, running: true });
    expect(await inspect(`${NAME}-previous`)).toBeUndefined();
  }, 60_000);

  it("a new version whose healthcheck fails is rolled back too", async () => {
    const old = (await inspect(NAME))!;
    const r = await deploy(spec("v1", { healthCommand: "test -f /nonexistent" }));
    expect(r.code, r.message).toBe("ROLLED_BACK");
    expect(r.message).toContain("unhealthy");
    expect(await inspect(NAME)).toMatchObject({ id: old.id, image: ids.v2, running: true });
  }, 60_000);

  it("a new version the engine refuses to start (a directory mounted over a file) is rolled back too", async () => {
    const old = (await inspect(NAME))!;
    // /www/version is a file in the image: the engine creates the container and fails its start.
    const r = await deploy(spec("v1", { mounts: [{ source: "./www", target: "/www/version" }] }));
    expect(r.code, r.message).toBe("ROLLED_BACK");
    expect(r.message).toContain("the engine refused it");
    expect(r.details!.container!.steps).toContain("create");
    expect(r.details!.container!.steps).not.toContain("start");
    expect(await inspect(NAME)).toMatchObject({ id: old.id, image: ids.v2, running: true });
    expect(await inspect(`${NAME}-previous`)).toBeUndefined();
  }, 60_000);

  it("with keep_previous the old one stays stopped; rollback swaps the two and a second rollback swaps them back", async () => {
    const v2 = (await inspect(NAME))!;
    const up = await deploy(spec("v1", { keepPrevious: true }));
    expect(up.code, up.message).toBe("CONTAINER_OK");
    const v1 = (await inspect(NAME))!;
    expect(await inspect(`${NAME}-previous`)).toMatchObject({ id: v2.id, running: false });

    const back = await control(ContainerOperation.ROLLBACK);
    expect(back.code, back.message).toBe("ROLLBACK_OK");
    expect(await inspect(NAME)).toMatchObject({ id: v2.id, image: ids.v2, running: true });
    expect(await inspect(`${NAME}-previous`)).toMatchObject({ id: v1.id, running: false });
    expect(await inspect(`${NAME}-replaced`)).toBeUndefined();

    const forward = await control(ContainerOperation.ROLLBACK);
    expect(forward.code, forward.message).toBe("ROLLBACK_OK");
    expect(await inspect(NAME)).toMatchObject({ id: v1.id, image: ids.v1, running: true });
    expect(await inspect(`${NAME}-previous`)).toMatchObject({ id: v2.id, running: false });
  }, 60_000);

  it("a run that finds the old container stopped as <name>-previous and no <name> finishes the update", async () => {
    // What an update interrupted between the old container's stop and the new one's start leaves.
    const old = (await inspect(NAME))!;
    await docker("rm", "-f", `${NAME}-previous`);
    await docker("stop", "-t", "2", NAME);
    await docker("rename", NAME, `${NAME}-previous`);
    const r = await deploy(spec("v2"));
    expect(r.code, r.message).toBe("CONTAINER_OK");
    expect(r.details!.container).toMatchObject({ resumed: true, previousContainerId: old.id });
    expect(r.details!.container!.steps).toEqual(["image-local", "verify", "create", "start", "wait-up", "remove-previous"]);
    expect(await inspect(NAME)).toMatchObject({ image: ids.v2, running: true });
    expect(await inspect(`${NAME}-previous`)).toBeUndefined();
  }, 60_000);

  it("a container of that name skippy did not make is left alone", async () => {
    const other = `ctr-other-${RUN_ID}`;
    await docker("run", "-d", "--name", other, "skipper-busybox:local", ...RUNS);
    try {
      const r = await deploy({ ...spec("v1"), name: other });
      expect(r.code, r.message).toBe("CONTAINER_NOT_OURS");
      expect((await inspect(other))!.running).toBe(true);
    } finally {
      await docker("rm", "-f", other);
    }
  }, 60_000);

  it("a name that is another container's id prefix is a free slot, not that container", async () => {
    // The engine resolves an unknown name as an id prefix: `inspect <prefix>` finds the other one.
    const other = `ctr-idpre-${RUN_ID}`;
    await docker("run", "-d", "--name", other, "skipper-busybox:local", ...RUNS);
    const otherId = await docker("container", "inspect", "--format", "{{.Id}}", other);
    const name = otherId.slice(0, 12);
    try {
      const r = await deploy({ ...spec("v1"), name });
      expect(r.code, r.message).toBe("CONTAINER_OK");
      expect(r.details!.container!.previousContainerId).toBe("");
      // Both run: the new one under its own name, the other one untouched.
      expect((await inspect(other))!).toMatchObject({ id: otherId, running: true });
      expect(await docker("container", "inspect", "--format", "{{.Name}}", r.details!.container!.containerId)).toBe(`/${name}`);
    } finally {
      await execa("docker", ["rm", "-f", name, other], { env, reject: false });
    }
  }, 60_000);

  it("a mount source through a symbolic link the container left is refused before anything changes", async () => {
    // What a container could leave in its own directory: ./data/esc -> a directory outside it.
    const outside = await mkdtemp(join(tmpdir(), "skippy-ctr-outside-"));
    const name = `ctr-link-${RUN_ID}`;
    try {
      await mkdir(join(workDir, "containers", name, "data"), { recursive: true });
      await symlink(outside, join(workDir, "containers", name, "data", "esc"));
      const r = await deploy(spec("v1", { name, mounts: [{ source: "./data/esc/etc", target: "/x" }] }));
      expect(r.code, r.message).toBe("CONTAINER_INVALID");
      expect(r.message).toMatch(/mounts\[0\]\.source passes through a symbolic link/);
      expect(await readdir(outside)).toEqual([]);
      expect(await inspect(name)).toBeUndefined();
    } finally {
      await rm(outside, { recursive: true, force: true });
    }
  });

  describe.skipIf(!haveRegistry)("with a registry", () => {
    let registry: TestRegistry;
    beforeAll(async () => {
      registry = await startRegistry(dockerHost!, "puller", `pull-${RUN_ID}`);
      // The executor's docker CLI logs in through its own config, as an operator's host would.
      process.env.DOCKER_CONFIG = join(workDir, "docker-config");
      await execa("docker", ["login", "--username", "puller", "--password-stdin", registry.host], {
        env: { ...env, DOCKER_CONFIG: process.env.DOCKER_CONFIG },
        input: registry.password,
      });
    }, 60_000);
    afterAll(async () => registry?.stop());

    it("a digest the registry does not serve is refused before the old container stops (DIGEST_MISMATCH)", async () => {
      const ref = await registry.push(`${REPO}:v2`, `ctr-${RUN_ID}/web:stable`);
      const served = await registry.digest(`ctr-${RUN_ID}/web`, "stable");
      const old = (await inspect(NAME))!;
      const r = await deploy(spec("v2", { image: ref, digest: `sha256:${"0".repeat(64)}` }));
      expect(r.code, r.message).toBe("DIGEST_MISMATCH");
      expect(r.retriable).toBe(false);
      expect(r.message).toContain(served);
      expect(r.details!.container!.steps).toEqual([]);
      // Not stopped, not restarted: the same container, started at the same time.
      expect(await inspect(NAME)).toEqual(old);

      // Pinned to what the registry serves, the same reference runs: the refused order's pull
      // left it on the engine by that digest, so nothing is pulled again.
      const ok = await deploy(spec("v2", { image: ref, digest: served }));
      expect(ok.code, ok.message).toBe("CONTAINER_OK");
      expect(ok.details!.container).toMatchObject({ digest: served, pulled: false });
    }, 90_000);
  });
});

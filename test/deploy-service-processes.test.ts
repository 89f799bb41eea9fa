// deploy_service and remove_service with process modules (issue 34), on real files and processes:
// versioned tarballs (bin/server serves its version over HTTP with busybox httpd, or just sleeps)
// taken from a directory the node allows, a tenant whose desired state declares modules with or
// without a compose file. Without one nothing may ask Docker (DOCKER_HOST points nowhere): what
// is asserted is which version answers on the port, which processes live, and what is recorded.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { execa } from "execa";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WorkOrderActionSchema } from "../gen/skipper/v1/order_action_pb.js";
import type { ProcessSpecSchema } from "../gen/skipper/v1/process_pb.js";
import type { HeartbeatRequest } from "../gen/skipper/v1/node_service_pb.js";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import type { DeploySafetySchema } from "../gen/skipper/v1/safety_pb.js";
import { WorkOrderSchema, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { AgentTally } from "../agent/agent-tally.js";
import type { AgentConfig } from "../agent/config.js";
import type { ControllerClients } from "../agent/controller-client.js";
import { Heartbeats } from "../agent/heartbeats.js";
import { HostProbe } from "../agent/host-probe.js";
import { readAppliedSpec } from "../agent/engine/applied-spec.js";
import { probeDockerHost, type DockerHost } from "../agent/engine/docker-host.js";
import { observeForHeartbeat, readProjectState } from "../agent/engine/project-state.js";
import type { DeployContext } from "../agent/executors/deploy-context.js";
import { deployService } from "../agent/executors/deploy-service.js";
import { rollbackProject } from "../agent/executors/project-orders.js";
import { removeService } from "../agent/executors/remove-service.js";
import { livePid } from "../agent/process/module-control.js";
import { readRunState } from "../agent/process/run-state.js";
import { isSameProcess } from "../agent/process/supervisor.js";
import { activeVersion, installedVersions } from "../agent/process/versions.js";
import { freePort, removeComposeProject, RUN_ID } from "./helpers/processes.js";

const OPTS = { useSystemd: false, settleMs: 400, graceMs: 2000 };
const SERVER = `#!/bin/sh
exec busybox httpd -f -p "127.0.0.1:$PORT" -h www
`;
const SLEEPER = "#!/bin/sh\nexec sleep 1000\n";
const CRASH = '#!/bin/sh\necho "boom: no config file" >&2\nexit 3\n';
const MODULES = ["web", "worker", "extra", "other"];

let root: string;
let workDir: string;
let artifacts: string;
let outside: string;
let port: number;
const sums: Record<string, string> = {};
const savedDockerHost = process.env.DOCKER_HOST;
const noDocker: DockerHost = { capabilities: create(NodeCapabilitiesSchema, { dockerAvailable: false, message: "no engine here" }) };

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "skipper-deploy-proc-"));
  workDir = join(root, "work");
  artifacts = join(root, "artifacts");
  outside = join(root, "outside");
  await mkdir(artifacts);
  await mkdir(outside);
  for (const v of ["1.0.0", "1.1.0"]) await tarball(artifacts, `web-${v}.tar.gz`, v, SERVER);
  await tarball(artifacts, "web-1.2.0.tar.gz", "1.2.0", SLEEPER);
  await tarball(artifacts, "web-1.3.0.tar.gz", "1.3.0", CRASH);
  for (const m of ["worker", "extra"]) await tarball(artifacts, `${m}-1.0.0.tar.gz`, "1.0.0", SLEEPER);
  await tarball(outside, "other-1.0.0.tar.gz", "1.0.0", SLEEPER);
  port = await freePort();
  // Whatever asks Docker in a deploy of process modules alone fails.
  process.env.DOCKER_HOST = `unix://${join(root, "no-engine.sock")}`;
});

afterAll(async () => {
  if (savedDockerHost === undefined) delete process.env.DOCKER_HOST;
  else process.env.DOCKER_HOST = savedDockerHost;
  for (const m of MODULES) {
    const s = await readRunState(workDir, m).catch(() => undefined);
    if (s && (await isSameProcess(s.pid, s.startTicks))) process.kill(-s.pid, "SIGKILL");
  }
  await rm(root, { recursive: true, force: true });
});

async function tarball(dir: string, name: string, version: string, script: string): Promise<void> {
  const src = join(root, `src-${name}`);
  await mkdir(join(src, "bin"), { recursive: true });
  await mkdir(join(src, "www"));
  await writeFile(join(src, "www", "version.txt"), version);
  await writeFile(join(src, "bin", "server"), script);
  await chmod(join(src, "bin", "server"), 0o755);
  await execa("tar", ["-czf", join(dir, name), "-C", src, "."]);
  sums[name] = createHash("sha256")
    .update(await readFile(join(dir, name)))
    .digest("hex");
}

type Spec = MessageInitShape<typeof ProcessSpecSchema>;
/** The spec of `module` at `version`, from the allowed directory unless `dir` says otherwise. */
function spec(module: string, version: string, extra: { sha256?: string; dir?: string } = {}): Spec {
  const name = `${module}-${version}.tar.gz`;
  return {
    module,
    version,
    source: { kind: { case: "path", value: join(extra.dir ?? artifacts, name) } },
    sha256: extra.sha256 ?? sums[name] ?? "0".repeat(64),
    argv: ["bin/server"],
    env: { PORT: String(port) },
  };
}

let orders = 0;
function order(
  specHash: string,
  processes: Spec[],
  opts: { composeFile?: string; tenant?: string; safety?: MessageInitShape<typeof DeploySafetySchema> } = {},
): WorkOrder {
  const tenant = opts.tenant ?? "shop";
  return create(WorkOrderSchema, {
    id: `wo-${++orders}`,
    type: WorkOrderType.DEPLOY_SERVICE,
    target: { tenantId: tenant, nodeId: "n1" },
    desiredState: {
      tenantId: tenant,
      deploymentId: `dep-${orders}`,
      specHash,
      composeProject: { projectName: tenant, composeFile: opts.composeFile ?? "" },
      processes,
      safety: opts.safety,
    },
  });
}

function ctx(docker: DockerHost = noDocker): DeployContext {
  return {
    workDir,
    docker,
    composeTimeoutMs: 60_000,
    readyTimeoutMs: 10_000,
    log: pino({ level: "silent" }),
    signal: new AbortController().signal,
    allowProcessSources: [artifacts],
    process: OPTS,
  };
}

/** What the web module answers on its port, or "" when nothing listens. */
async function answer(): Promise<string> {
  return fetch(`http://127.0.0.1:${port}/version.txt`).then(
    (r) => r.text(),
    () => "",
  );
}

function removal(tenant: string): WorkOrder {
  return create(WorkOrderSchema, {
    id: `wo-rm-${tenant}`,
    type: WorkOrderType.REMOVE_SERVICE,
    target: { tenantId: tenant, nodeId: "n1" },
    desiredState: { tenantId: tenant, composeProject: { projectName: tenant } },
  });
}

/** The full report a heartbeat sends from this host (no engine), its projects as main.ts observes them. */
function heartbeat(): Promise<HeartbeatRequest> {
  const config = { nodeId: "n1", workDir, pollIntervalMs: 1000, allowCommands: [], allowProcessSources: [artifacts], labels: {} };
  const beats = new Heartbeats({
    config: config as unknown as AgentConfig,
    clients: {} as ControllerClients,
    host: new HostProbe(async () => noDocker, pino({ level: "silent" })),
    tally: new AgentTally(),
    log: pino({ level: "silent" }),
    observe: (engine) => observeForHeartbeat(workDir, engine),
  });
  return beats.report({ observe: true, intervalMs: 1000 });
}

async function pidOf(module: string): Promise<number> {
  return livePid(workDir, await readRunState(workDir, module));
}

describe("deploy_service with process modules and no compose file (no Docker)", () => {
  it("runs the modules, records the spec and the project, and says which version runs with which pid", async () => {
    const out = await deployService(order("h1", [spec("web", "1.0.0"), spec("worker", "1.0.0")]), ctx());
    expect(out.result.code, out.result.message).toBe("APPLY_OK");
    const web = await pidOf("web");
    const worker = await pidOf("worker");
    expect(web).toBeGreaterThan(0);
    expect(worker).toBeGreaterThan(0);
    expect(out.result.message).toBe(`processes: web 1.0.0 running (pid ${web}), worker 1.0.0 running (pid ${worker})`);
    expect(out.result.details?.extra?.processes).toMatchObject([
      { module: "web", activeVersion: "1.0.0", state: "running", pid: web },
      { module: "worker", activeVersion: "1.0.0", state: "running", pid: worker },
    ]);
    expect(await answer()).toBe("1.0.0");
    expect(await activeVersion(workDir, "web")).toBe("1.0.0");
    const applied = await readAppliedSpec(workDir, "shop");
    expect(applied).toMatchObject({ spec_hash: "h1", compose_file: "", work_order_id: `wo-${orders}` });
    expect(applied?.processes?.map((p) => [p.module, p.version, p.sha256])).toEqual([
      ["web", "1.0.0", sums["web-1.0.0.tar.gz"]],
      ["worker", "1.0.0", sums["worker-1.0.0.tar.gz"]],
    ]);
    expect(await readProjectState(workDir, "shop")).toMatchObject({ spec_hash: "h1", services: [] });
    // A heartbeat on this host without an engine reports it, with the spec hash and no services to drift.
    const beat = await heartbeat();
    expect(beat.projectsReported).toBe(true);
    expect(beat.projects.map((p) => [p.tenantId, p.specHash, p.services.length])).toEqual([["shop", "h1", 0]]);
    expect(out.result.details?.sticker).toMatchObject({ releaseId: "h1", tenantId: "shop", imageDigests: {} });
  }, 30_000);

  it("a second order switches a module to its new version; the same order again changes nothing", async () => {
    const first = await deployService(order("h2", [spec("web", "1.1.0"), spec("worker", "1.0.0")]), ctx());
    expect(first.result.code, first.result.message).toBe("APPLY_OK");
    expect(await answer()).toBe("1.1.0");
    expect(await readRunState(workDir, "web")).toMatchObject({ version: "1.1.0", previousVersion: "1.0.0", desired: "running" });
    const web = await pidOf("web");
    const worker = await pidOf("worker");
    const again = await deployService(order("h2", [spec("web", "1.1.0"), spec("worker", "1.0.0")]), ctx());
    expect(again.result.code, again.result.message).toBe("APPLY_OK");
    expect([await pidOf("web"), await pidOf("worker")]).toEqual([web, worker]);
  }, 30_000);

  it("refuses a bad sha256 naming the module, and the running version keeps running", async () => {
    const web = await pidOf("web");
    const out = await deployService(order("h3", [spec("web", "1.2.0", { sha256: "ab".repeat(32) }), spec("worker", "1.0.0")]), ctx());
    expect(out.result).toMatchObject({ success: false, code: "CHECKSUM_MISMATCH", retriable: false });
    expect(out.result.message).toMatch(/^process module web: /);
    expect(await pidOf("web")).toBe(web);
    expect(await answer()).toBe("1.1.0");
    expect(await installedVersions(workDir, "web")).toEqual(["1.0.0", "1.1.0"]);
    expect((await readAppliedSpec(workDir, "shop"))?.spec_hash).toBe("h2");
  }, 30_000);

  it("a module whose new version dies within the settle time ends the deploy with PROCESS_EXITED; the previous version runs again", async () => {
    const out = await deployService(order("h3", [spec("web", "1.3.0"), spec("worker", "1.0.0")]), ctx());
    expect(out.result).toMatchObject({ success: false, code: "PROCESS_EXITED" });
    expect(out.result.message).toMatch(/^process module web: web 1\.3\.0 exited within 400 ms; restored 1\.1\.0, which runs again/);
    expect(out.result.message).toContain("boom: no config file");
    expect(await answer()).toBe("1.1.0");
    expect(await activeVersion(workDir, "web")).toBe("1.1.0");
    expect((await readAppliedSpec(workDir, "shop"))?.spec_hash).toBe("h2");
  }, 30_000);

  it("refuses, before anything is written or run, a source outside the allow list, a bad spec, a module twice, and an order with nothing", async () => {
    const cases: [WorkOrder, string, RegExp][] = [
      [
        order("h4", [spec("web", "1.1.0"), spec("other", "1.0.0", { dir: outside })]),
        "PROCESS_SOURCE_NOT_ALLOWED",
        /^process module other: path \S+ is not under this node's --allow-process-source/,
      ],
      [order("h4", [spec("web", "1.1.0", { sha256: "nope" })]), "PROCESS_INVALID", /^process module "web": sha256 must be 64 hex digits/],
      [order("h4", [spec("web", "1.1.0"), spec("web", "1.0.0")]), "PROCESS_INVALID", /web is declared twice/],
      [order("h4", []), "COMPOSE_INVALID", /no compose file and no process modules/],
    ];
    const web = await pidOf("web");
    for (const [o, code, message] of cases) {
      const out = await deployService(o, ctx());
      expect(out.result.code, out.result.message).toBe(code);
      expect(out.result.message).toMatch(message);
      expect(out.result.retriable).toBe(false);
    }
    expect(existsSync(join(workDir, "versions", "other"))).toBe(false);
    expect(await pidOf("web")).toBe(web);
    expect((await readAppliedSpec(workDir, "shop"))?.spec_hash).toBe("h2");
  }, 30_000);

  it("stops a module the new spec no longer declares, and says so; its versions stay installed", async () => {
    const worker = await pidOf("worker");
    const out = await deployService(order("h5", [spec("web", "1.1.0")]), ctx());
    expect(out.result.code, out.result.message).toBe("APPLY_OK");
    expect(out.result.message).toMatch(/^processes: web 1\.1\.0 running \(pid \d+\); stopped worker \(no longer declared\)$/);
    expect(await isSameProcess(worker, (await readRunState(workDir, "worker")).startTicks)).toBe(false);
    expect(await readRunState(workDir, "worker")).toMatchObject({ desired: "stopped", pid: 0 });
    expect(await installedVersions(workDir, "worker")).toEqual(["1.0.0"]);
    expect((await readAppliedSpec(workDir, "shop"))?.processes?.map((p) => p.module)).toEqual(["web"]);
  }, 30_000);

  it("a failed health gate switches back to the versions that ran (installed: nothing downloaded) and stops the modules the failed spec added", async () => {
    // 1.1.0's artifact is gone: a restore that downloaded would fail.
    await rename(join(artifacts, "web-1.1.0.tar.gz"), join(root, "web-1.1.0.away"));
    const safety = {
      healthGate: {
        probes: [{ kind: { case: "http" as const, value: { url: `http://127.0.0.1:${port}/version.txt` } } }],
        deadline: { seconds: 2n },
      },
    };
    const out = await deployService(order("h6", [spec("web", "1.2.0"), spec("extra", "1.0.0")], { safety }), ctx());
    await rename(join(root, "web-1.1.0.away"), join(artifacts, "web-1.1.0.tar.gz"));
    expect(out.result.code, out.result.message).toBe("ROLLED_BACK");
    expect(out.result.details?.rollback).toMatchObject({ failedSpecHash: "h6", restoredSpecHash: "h5" });
    expect(await answer()).toBe("1.1.0");
    expect(await readRunState(workDir, "web")).toMatchObject({ version: "1.1.0", desired: "running" });
    expect(await readRunState(workDir, "extra")).toMatchObject({ desired: "stopped", pid: 0 });
    expect((await readAppliedSpec(workDir, "shop"))?.spec_hash).toBe("h5");
    expect((await readProjectState(workDir, "shop"))?.spec_hash).toBe("h5");
  }, 30_000);

  it("a rollback order (the earlier spec as its desired state) switches back to that spec's versions", async () => {
    const o = order("h1", [spec("web", "1.0.0"), spec("worker", "1.0.0")]);
    o.type = WorkOrderType.ROLLBACK;
    o.action = create(WorkOrderActionSchema, {
      kind: { case: "rollback", value: { replacesSpecHash: "h5", resolvedFrom: "work_order/wo-1" } },
    });
    const config = {
      workDir,
      composeTimeoutMs: 60_000,
      readyTimeoutMs: 10_000,
      allowCommands: [],
      allowProcessSources: [artifacts],
    } as unknown as AgentConfig;
    const out = await rollbackProject(o, { config, host: noDocker, log: pino({ level: "silent" }), signal: new AbortController().signal });
    expect(out.result.code, out.result.message).toBe("ROLLBACK_OK");
    expect(out.result.message).toMatch(/processes: web 1\.0\.0 running \(pid \d+\), worker 1\.0\.0 running \(pid \d+\)/);
    expect(await answer()).toBe("1.0.0");
    expect(await pidOf("worker")).toBeGreaterThan(0);
    expect((await readAppliedSpec(workDir, "shop"))?.spec_hash).toBe("h1");
  }, 30_000);

  it("remove_service stops the tenant's modules, not one another tenant took over, and removes its files without Docker", async () => {
    // The worker moves to tenant blog: its deploy finds it running as declared and keeps it.
    const worker = await pidOf("worker");
    const moved = await deployService(order("b1", [spec("worker", "1.0.0")], { tenant: "blog" }), ctx());
    expect(moved.result.code, moved.result.message).toBe("APPLY_OK");
    expect(await pidOf("worker")).toBe(worker);
    const shop = await removeService(removal("shop"), { workDir, docker: noDocker, composeTimeoutMs: 60_000, process: OPTS });
    expect(shop.result.code, shop.result.message).toBe("REMOVE_OK");
    expect(shop.result.message).toBe("project shop removed; stopped process modules web");
    expect([await pidOf("web"), await pidOf("worker")]).toEqual([0, worker]);
    expect(await answer()).toBe("");
    expect(existsSync(join(workDir, "tenants", "shop"))).toBe(false);
    expect(await installedVersions(workDir, "web")).toEqual(["1.0.0", "1.1.0", "1.2.0", "1.3.0"]);
    const blog = await removeService(removal("blog"), { workDir, docker: noDocker, composeTimeoutMs: 60_000, process: OPTS });
    expect(blog.result.message).toBe("project blog removed; stopped process modules worker");
    expect(await pidOf("worker")).toBe(0);
    expect((await heartbeat()).projects).toEqual([]);
  }, 30_000);
});

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! deploy-service-processes.test.ts: compose and processes together SKIPPED: no Docker engine");

describe.skipIf(!dockerHost)("deploy_service with a compose file and process modules (real engine)", () => {
  const tenant = `mix-${RUN_ID}`;
  const composeFile = `services:
  idle:
    image: skipper-busybox:local
    command: ["sh", "-c", "while true; do sleep 1; done"]
    stop_grace_period: 1s
`;
  let host: DockerHost;
  const running = async () =>
    (
      await execa("docker", ["ps", "-q", "--filter", `label=com.docker.compose.project=${tenant}`], { env: { DOCKER_HOST: dockerHost! } })
    ).stdout
      .split("\n")
      .filter(Boolean).length;

  beforeAll(async () => {
    process.env.DOCKER_HOST = dockerHost!;
    host = await probeDockerHost();
  }, 60_000);
  afterAll(async () => {
    await removeComposeProject(dockerHost!, tenant).catch(() => undefined);
    process.env.DOCKER_HOST = `unix://${join(root, "no-engine.sock")}`;
  });

  it("runs both; a later spec without the compose file takes the containers down; remove_service stops the modules", async () => {
    const both = await deployService(order("m1", [spec("worker", "1.0.0")], { tenant, composeFile }), ctx(host));
    expect(both.result.code, both.result.message).toBe("APPLY_OK");
    const worker = await pidOf("worker");
    expect(worker).toBeGreaterThan(0);
    expect(both.result.message).toMatch(
      new RegExp(`^1 service\\(s\\) running; changed: idle; processes: worker 1\\.0\\.0 running \\(pid ${worker}\\)$`),
    );
    expect(await running()).toBe(1);
    expect((await readProjectState(workDir, tenant))?.services).toEqual(["idle"]);

    const alone = await deployService(order("m2", [spec("worker", "1.0.0")], { tenant }), ctx(host));
    expect(alone.result.code, alone.result.message).toBe("APPLY_OK");
    expect(await running()).toBe(0);
    expect(existsSync(join(workDir, "tenants", tenant, "docker-compose.yml"))).toBe(false);
    expect(await pidOf("worker")).toBe(worker);
    expect((await readProjectState(workDir, tenant))?.services).toEqual([]);

    const again = await deployService(order("m3", [spec("worker", "1.0.0")], { tenant, composeFile }), ctx(host));
    expect(again.result.code, again.result.message).toBe("APPLY_OK");
    expect(await running()).toBe(1);
    const out = await removeService(removal(tenant), { workDir, docker: host, composeTimeoutMs: 60_000, process: OPTS });
    expect(out.result.code, out.result.message).toBe("REMOVE_OK");
    expect(out.result.message).toMatch(/; stopped process modules worker$/);
    expect(await running()).toBe(0);
    expect(await pidOf("worker")).toBe(0);
  }, 120_000);
});

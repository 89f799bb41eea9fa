// Updates nobody notices (issue 35), on a real engine behind a real HAProxy that skippy drives
// (master-worker, reloaded through its master CLI): a busybox web service routed by Host, four
// keep-alive clients requesting it through the proxy in a loop while deploy_service orders update
// it. Start-first: 20 updates lose no request, each update's old container is gone once drained,
// and the answers move to each new version. Stop-first, the same load loses requests: the first
// result is the update order's doing. A new version that never gets ready is removed and the old
// container keeps serving, the deploy failing with why.
import type { ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { execa } from "execa";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UpdateOrder } from "../gen/skipper/v1/proxy_pb.js";
import { WorkOrderSchema, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { probeDockerHost } from "../agent/engine/docker-host.js";
import type { DeployContext } from "../agent/executors/deploy-context.js";
import { deployService } from "../agent/executors/deploy-service.js";
import { removeService } from "../agent/executors/remove-service.js";
import { hostProxyFor } from "../agent/proxy/proxy-settings.js";
import { haproxyBinary, startHaproxyMaster } from "./helpers/haproxy.js";
import { httpLoad } from "./helpers/http-load.js";
import { freePort, removeComposeProject, RUN_ID, stopProcess, waitFor } from "./helpers/processes.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const bin = haproxyBinary();
const ready = !!dockerHost && !!bin;
if (!ready) console.warn("!!! start-first-deploy.test.ts SKIPPED: needs a Docker engine and haproxy");

const TENANT = `sf-${RUN_ID}`;
const HOST = "web.test";

/** The project for version `v`: busybox httpd answering v on 8080, start-first unless told otherwise. */
function composeFile(v: string, opts: { startFirst?: boolean; broken?: boolean } = {}): string {
  const serve = opts.broken ? "exit 3" : "mkdir -p /www && echo $$V > /www/index.html && exec httpd -f -p 8080 -h /www";
  return [
    "services:",
    "  web:",
    "    image: skipper-busybox:local",
    `    command: ["sh", "-c", "${serve}"]`,
    `    environment: {V: "${v}"}`,
    // httpd as PID 1 ignores SIGTERM: a stop would wait out Compose's default 10 s for nothing.
    "    stop_grace_period: 1s",
    ...(opts.startFirst === false ? [] : ["    deploy: {update_config: {order: start-first}}"]),
    "",
  ].join("\n");
}

let orders = 0;
function order(v: string, opts: { startFirst?: boolean; broken?: boolean } = {}): WorkOrder {
  const n = ++orders;
  return create(WorkOrderSchema, {
    id: `wo-sf-${n}`,
    type: WorkOrderType.DEPLOY_SERVICE,
    target: { tenantId: TENANT, nodeId: "n1" },
    desiredState: {
      tenantId: TENANT,
      deploymentId: `dep-sf-${n}`,
      specHash: `hash-${v}-${n}`,
      composeProject: { projectName: TENANT, composeFile: composeFile(v, opts) },
      routes: [{ host: HOST, service: "web", port: 8080, drainSeconds: 10 }],
    },
  });
}

describe.skipIf(!ready)("start-first updates behind the host's HAProxy (real engine, real haproxy)", () => {
  let dir: string;
  let haproxy: ChildProcess;
  let front: number;
  let ctx: DeployContext;
  const savedDockerHost = process.env.DOCKER_HOST;

  const containers = async () =>
    (await execa("docker", ["ps", "--filter", `label=com.docker.compose.project=${TENANT}`, "--format", "{{.Names}}"])).stdout
      .split("\n")
      .filter(Boolean)
      .sort();

  beforeAll(async () => {
    process.env.DOCKER_HOST = dockerHost;
    dir = await mkdtemp(join(tmpdir(), "skipper-sf-"));
    front = await freePort();
    const hx = await startHaproxyMaster(bin!, dir);
    haproxy = hx.child;
    const proxy = hostProxyFor({ runtime: hx.runtime, configPath: hx.configPath, listen: `127.0.0.1:${front}`, master: hx.master });
    ctx = {
      workDir: join(dir, "work"),
      docker: await probeDockerHost(),
      composeTimeoutMs: 120_000,
      readyTimeoutMs: 20_000,
      log: pino({ level: "silent" }),
      proxy,
    };
  });
  afterAll(async () => {
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (haproxy) await stopProcess(haproxy);
    if (dir) await rm(dir, { recursive: true, force: true });
    if (savedDockerHost === undefined) delete process.env.DOCKER_HOST;
    else process.env.DOCKER_HOST = savedDockerHost;
  });

  // The timeouts below only catch a hang: an update takes ~9 s on a quiet machine, and ~35 s under
  // a load of 14 on two cores (seen), which this machine can be on a slow day.
  it("20 start-first updates lose no request; each old container is gone after its drain", async () => {
    const first = await deployService(order("v0"), ctx);
    expect(first.result.code, first.result.message).toBe("APPLY_OK");
    const traffic = httpLoad(front, 4, HOST);
    await waitFor("answers from v0", async () => (traffic.tally.last === "v0" ? true : undefined));
    for (let i = 1; i <= 20; i++) {
      const before = await containers();
      const r = await deployService(order(`v${i}`), ctx);
      expect(r.result.code, r.result.message).toBe("APPLY_OK");
      const u = r.result.details?.updates[0];
      expect(u?.order, u?.reason).toBe(UpdateOrder.START_FIRST);
      expect(u?.oldContainers).toEqual(before);
      expect(u?.connectionsCut).toBe(0);
      const after = await containers();
      expect(after).toEqual(u?.newContainers);
      expect(after.some((c) => before.includes(c))).toBe(false);
      await waitFor(`answers from v${i}`, async () => (traffic.tally.last === `v${i}` ? true : undefined));
    }
    await traffic.stop();
    expect(traffic.tally.failed, traffic.tally.errors.slice(0, 5).join("; ")).toBe(0);
    expect(traffic.tally.ok).toBeGreaterThan(40);
  }, 900_000);

  it("a new version that never gets ready is removed; the old container keeps serving", async () => {
    const traffic = httpLoad(front, 4, HOST);
    const before = await containers();
    const r = await deployService(order("v-broken", { broken: true }), ctx);
    expect(r.result.code).toBe("SERVICES_NOT_RUNNING");
    expect(r.result.message).toMatch(new RegExp(`start-first: the new container .* is exited.*${before[0]} keeps serving`));
    expect(await containers()).toEqual(before);
    const served = traffic.tally.ok;
    await waitFor("more answers", async () => (traffic.tally.ok > served + 10 ? true : undefined));
    await traffic.stop();
    expect(traffic.tally.failed, traffic.tally.errors.slice(0, 5).join("; ")).toBe(0);
    expect(traffic.tally.last).toBe("v20");
  }, 300_000);

  it("stop-first, the same load loses requests (Compose's own recreate)", async () => {
    const traffic = httpLoad(front, 4, HOST);
    for (let i = 1; i <= 5; i++) {
      const r = await deployService(order(`s${i}`, { startFirst: false }), ctx);
      expect(r.result.code, r.result.message).toBe("APPLY_OK");
      expect(r.result.details?.updates[0]?.order).toBe(UpdateOrder.STOP_FIRST);
      await waitFor(`answers from s${i}`, async () => (traffic.tally.last === `s${i}` ? true : undefined));
    }
    await traffic.stop();
    expect(traffic.tally.failed).toBeGreaterThan(0);
  }, 450_000);

  it("remove_service takes the tenant's routes out of the proxy before its containers go", async () => {
    const gone = create(WorkOrderSchema, {
      id: "wo-sf-remove",
      type: WorkOrderType.REMOVE_SERVICE,
      target: { tenantId: TENANT, nodeId: "n1" },
      desiredState: { tenantId: TENANT, composeProject: { projectName: TENANT } },
    });
    const r = await removeService(gone, { workDir: ctx.workDir, docker: ctx.docker, composeTimeoutMs: 120_000, proxy: ctx.proxy });
    expect(r.result.code, r.result.message).toBe("REMOVE_OK");
    expect(await containers()).toEqual([]);
    expect(await readFile(join(dir, "skipper.cfg"), "utf8")).not.toContain(`skp_${TENANT}`);
    const t = httpLoad(front, 1, HOST);
    await waitFor("an answer", async () => (t.tally.ok + t.tally.failed > 0 ? true : undefined));
    await t.stop();
    expect(t.tally.errors[0]).toBe("HTTP 503");
  }, 300_000);
});

// A tenant of process modules alone, end to end: the built controller and agent as processes over
// HTTP/2 + TLS, and no Docker engine at all (the agent's DOCKER_HOST points nowhere). The tenant's
// processes are rendered into its deploy orders; the agent installs the version from a directory
// it allows, runs it, and reports the project (its spec hash, no services) with its heartbeats:
// the tenant converges and stays so (no drift) across reconcile passes. A new version rolls out
// the same way; deleting the tenant stops the module.
import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { TenantProcessSchema } from "../gen/skipper/v1/process_pb.js";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { readRunState } from "../agent/process/run-state.js";
import { isSameProcess } from "../agent/process/supervisor.js";
import { rawRequest } from "./helpers/https.js";
import { parsePrometheusText, sampleSum } from "./helpers/prometheus-text.js";
import {
  E2E_ADMIN_TOKEN,
  RUN_ID,
  freePort,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res, tenantConverged } from "./helpers/resources.js";

const TENANT = `pt-${RUN_ID}`;
const NODE = "pt-node";
const MODULE = `pt-web-${RUN_ID}`;
const SERVER = '#!/bin/sh\nexec busybox httpd -f -p "127.0.0.1:$PORT" -h www\n';

describe("a tenant of process modules alone (built controller and agent, no Docker engine)", () => {
  let root: string;
  let artifacts: string;
  let workDir: string;
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let port: number;
  const sums: Record<string, string> = {};
  const api = () => ctl.admin(ResourceService);
  const answer = () =>
    fetch(`http://127.0.0.1:${port}/version.txt`).then(
      (r) => r.text(),
      () => "",
    );
  const deployOrders = async () =>
    (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: TENANT, pageSize: 100 })).workOrders.filter(
      (o) => o.type === WorkOrderType.DEPLOY_SERVICE,
    );
  const reconcilePasses = async () => {
    const r = await rawRequest(ctl, "GET", "/metrics", { "x-admin-token": E2E_ADMIN_TOKEN });
    return sampleSum(parsePrometheusText(r.body), "skipper_reconcile_pass_duration_seconds_count");
  };
  const processes = (version: string) => [
    {
      spec: {
        module: MODULE,
        version,
        source: { kind: { case: "path" as const, value: join(artifacts, `web-${version}.tar.gz`) } },
        sha256: sums[version]!,
        argv: ["bin/server"],
        env: { PORT: String(port) },
      },
    },
  ];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-proc-"));
    artifacts = join(root, "artifacts");
    workDir = join(root, "work");
    await mkdir(artifacts);
    for (const v of ["1.0.0", "1.1.0"]) {
      const src = join(root, `src-${v}`);
      await mkdir(join(src, "bin"), { recursive: true });
      await mkdir(join(src, "www"));
      await writeFile(join(src, "www", "version.txt"), v);
      await writeFile(join(src, "bin", "server"), SERVER);
      await chmod(join(src, "bin", "server"), 0o755);
      await execa("tar", ["-czf", join(artifacts, `web-${v}.tar.gz`), "-C", src, "."]);
      sums[v] = createHash("sha256")
        .update(await readFile(join(artifacts, `web-${v}.tar.gz`)))
        .digest("hex");
    }
    port = await freePort();
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", "1s"] });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir,
      dockerHost: `unix://${join(root, "no-engine.sock")}`,
      extraArgs: ["--allow-process-source", artifacts],
    });
  }, 60_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    const s = await readRunState(workDir, MODULE).catch(() => undefined);
    if (s && (await isSameProcess(s.pid, s.startTicks))) process.kill(-s.pid, "SIGKILL");
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 30_000);

  it("converges, is reported by the node with its spec hash and stays converged; a new version rolls out; deletion stops it", async () => {
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, {
        case: "tenant",
        value: { deploymentPolicy: { targetNodeId: NODE }, processes: processes("1.0.0") },
      }),
    });
    await tenantConverged(api(), TENANT, 60_000);
    expect(await answer()).toBe("1.0.0");
    const [first] = await deployOrders();
    expect(first?.status).toBe(WorkOrderStatus.SUCCESS);
    expect(first?.desiredState?.composeProject?.composeFile ?? "").toBe("");
    expect(first?.result?.message).toMatch(new RegExp(`^processes: ${MODULE} 1\\.0\\.0 running \\(pid \\d+\\)$`));

    // The node reports the project (no engine needed): its spec hash, no services, observed after the order ended.
    const finished = timestampDate(first!.finishedAt!);
    await waitFor("the node to report the project after the order", async () => {
      const n = (await api().getResource({ resourceType: "node", id: NODE })).resource!;
      const st = n.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
      const p = st?.projects.find((x) => x.tenantId === TENANT);
      const seen = st?.projectsObservedAt ? timestampDate(st.projectsObservedAt) : undefined;
      return p && seen && seen > finished ? p : undefined;
    }).then((p) => expect([p.specHash, p.services.length]).toEqual([first!.desiredState!.specHash, 0]));
    // Two reconcile passes after that observation: still converged, no repair, no second order.
    const passes = await reconcilePasses();
    await waitFor("two more reconcile passes", async () => ((await reconcilePasses()) >= passes + 2 ? true : undefined), 30_000);
    const t = (await api().getResource({ resourceType: "tenant", id: TENANT })).resource!;
    expect(t.convergence?.status, t.convergence?.message).toBe(ConvergenceStatus.CONVERGED);
    expect(await deployOrders()).toHaveLength(1);

    // A new version.
    const current = (await api().getResource({ resourceType: "tenant", id: TENANT })).resource!;
    if (current.desiredState?.kind.case === "tenant")
      current.desiredState.kind.value.processes = processes("1.1.0").map((p) => create(TenantProcessSchema, p));
    await api().updateResource({ resourceType: "tenant", id: TENANT, desiredState: current.desiredState });
    await waitFor("1.1.0 to answer", async () => ((await answer()) === "1.1.0" ? true : undefined), 60_000);
    await tenantConverged(api(), TENANT, 60_000);
    expect(await deployOrders()).toHaveLength(2);
    const drift = (await ctl.admin(EventService).listEvents({ type: "drift_detected", tenantId: TENANT })).events;
    expect(drift).toEqual([]);

    // Deleted: the removal stops the module, without an engine.
    await api().deleteResource({ resourceType: "tenant", id: TENANT });
    await waitFor("the module to stop", async () => ((await answer()) === "" ? true : undefined), 60_000);
    expect(await readRunState(workDir, MODULE)).toMatchObject({ desired: "stopped", pid: 0 });
  }, 180_000);
});

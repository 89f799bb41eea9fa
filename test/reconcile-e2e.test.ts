// The reconciler end to end: a controller and two agents as processes, each agent with its own
// Docker engine (two hosts on one machine), services rendered from resources and placed by
// labels (admin-set, or agent-reported under a trusted key). Drift made behind Skipper's back is repaired; limits changes recreate only the
// services that use them; deleted services leave the engine and stay readable as tombstones.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { equals } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus, ResourceSpecSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { SnapshotService } from "../gen/skipper/v1/snapshot_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  RUN_ID,
  removeComposeProject,
  freePort,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res } from "./helpers/resources.js";

const hostA = process.env.SKIPPER_TEST_DOCKER_HOST;
const hostB = process.env.SKIPPER_TEST_DOCKER_HOST_B;
if (!hostA || !hostB) console.warn("!!! reconcile-e2e.test.ts SKIPPED: needs two Docker engines (see test/global-setup.ts)");

const IMAGE = "skipper-busybox:local";
const TENANT = `rc-shop-${RUN_ID}`;
const SWEEP_MS = 3000;
const MiB = 1024n * 1024n;

/** A resource with the given desired-state member, e.g. { case: "tenant", value: {...} }. */
/** Containers of the tenant's project on one engine: service id -> {id, state}. */
async function containers(dockerHost: string): Promise<Record<string, { id: string; state: string }>> {
  const r = await execa(
    "docker",
    [
      "ps",
      "-a",
      "--no-trunc",
      "--filter",
      `label=dev.skipper.tenant-id=${TENANT}`,
      "--format",
      '{{.ID}} {{.State}} {{.Label "dev.skipper.service-id"}}',
    ],
    {
      env: { DOCKER_HOST: dockerHost },
    },
  );
  const out: Record<string, { id: string; state: string }> = {};
  for (const line of r.stdout.split("\n").filter(Boolean)) {
    const [id, state, svc] = line.split(" ");
    out[svc!] = { id: id!, state: state! };
  }
  return out;
}

/** The tenant project's named volumes on one engine, by compose volume key. */
async function volumes(dockerHost: string): Promise<string[]> {
  const r = await execa(
    "docker",
    ["volume", "ls", "--filter", `label=com.docker.compose.project=${TENANT}`, "--format", '{{.Label "com.docker.compose.volume"}}'],
    { env: { DOCKER_HOST: dockerHost } },
  );
  return r.stdout.split("\n").filter(Boolean).sort();
}

describe.skipIf(!hostA || !hostB)("reconciler end to end (two hosts, real engines)", () => {
  let ctl: ControllerProcess;
  const agents: AgentProcess[] = [];
  let root: string;
  let webPort: number;
  const api = () => ctl.admin(ResourceService);

  async function convergence(type: string, id: string): Promise<ConvergenceStatus | undefined> {
    return (await api().getResource({ resourceType: type, id })).resource?.convergence?.status;
  }
  const converged = (type: string, id: string, timeoutMs = 60_000) =>
    waitFor(
      `${type} ${id} to converge`,
      async () => ((await convergence(type, id)) === ConvergenceStatus.CONVERGED ? true : undefined),
      timeoutMs,
    );

  /** Removes the project's volumes (left by an earlier run, or by this one). */
  async function dropVolumes(): Promise<void> {
    for (const h of [hostA, hostB]) {
      if (!h) continue;
      const names = (
        await execa("docker", ["volume", "ls", "-q", "--filter", `label=com.docker.compose.project=${TENANT}`], {
          env: { DOCKER_HOST: h },
          reject: false,
        })
      ).stdout
        .split("\n")
        .filter(Boolean);
      if (names.length > 0) await execa("docker", ["volume", "rm", "-f", ...names], { env: { DOCKER_HOST: h }, reject: false });
    }
  }

  beforeAll(async () => {
    await dropVolumes();
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-reconcile-"));
    webPort = await freePort();
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", `${SWEEP_MS}ms`] });
    const nodes = ctl.admin(NodeService);
    // Placement trusts the admin's labels, and agent-reported ones only under keys the admin
    // allowed: the prod host's labels are set at registration, the dev host's agent is trusted
    // for env (both agents report their labels).
    const nodeSetups: [string, string, string[], { labels?: Record<string, string>; trustedLabelKeys?: string[] }][] = [
      ["rc-prod", hostA!, ["env=prod", "region=eu"], { labels: { env: "prod", region: "eu" } }],
      ["rc-dev", hostB!, ["env=dev"], { trustedLabelKeys: ["env"] }],
    ];
    for (const [id, dockerHost, labels, registration] of nodeSetups) {
      const token = (await nodes.registerNode({ nodeId: id, ...registration })).token;
      agents.push(
        startAgentProcess({
          controller: ctl,
          nodeId: id,
          token,
          stateDir: join(root, id, "state"),
          workDir: join(root, id, "work"),
          dockerHost,
          extraArgs: labels.flatMap((l) => ["--label", l]).concat(["--ready-timeout", "20s"]),
        }),
      );
    }
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, {
        case: "tenant",
        value: { displayName: "Shop", deploymentPolicy: { nodeSelector: { env: "prod" } } },
      }),
    });
    await api().createResource({
      resourceType: "resource_limits",
      resource: res("resource_limits", "rc-small", { case: "resourceLimits", value: { cpus: 0.5, memoryBytes: 64n * MiB } }),
    });
    const loop = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"];
    await api().createResource({
      resourceType: "service",
      resource: res("service", "rc-web", {
        case: "service",
        value: {
          tenantId: TENANT,
          image: IMAGE,
          // $GREETING is the container's variable: the renderer keeps the dollar from compose.
          command: ["sh", "-c", 'mkdir -p /www && echo "$GREETING" > /www/index.html && exec httpd -f -p 8080 -h /www'],
          env: { GREETING: "hello from the reconciler" },
          ports: [{ hostIp: "127.0.0.1", hostPort: webPort, containerPort: 8080 }],
        },
      }),
    });
    await api().createResource({
      resourceType: "volume",
      resource: res("volume", "rc-cache", { case: "volume", value: { tenantId: TENANT, mountPath: "/cache" } }),
    });
    await api().createResource({
      resourceType: "volume",
      resource: res("volume", "rc-scratch", { case: "volume", value: { tenantId: TENANT, mountPath: "/scratch" } }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", "rc-worker", {
        case: "service",
        value: { tenantId: TENANT, image: IMAGE, command: loop, resourceLimitsId: "rc-small", volumeIds: ["rc-cache"] },
      }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", "rc-tool", {
        case: "service",
        value: { tenantId: TENANT, image: IMAGE, command: loop, placement: { nodeSelector: { env: "dev" } }, volumeIds: ["rc-scratch"] },
      }),
    });
  }, 120_000);

  afterAll(async () => {
    for (const a of agents) await a.stop();
    await ctl?.stop();
    for (const h of [hostA, hostB]) {
      if (!h) continue;
      const ids = Object.values(await containers(h).catch(() => ({}))).map((c) => c.id);
      if (ids.length > 0) await execa("docker", ["rm", "-f", ...ids], { env: { DOCKER_HOST: h }, reject: false });
      await removeComposeProject(h, TENANT);
    }
    await dropVolumes();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("places services by label: the prod services on the prod host, the dev-only one on the dev host", async () => {
    await converged("tenant", TENANT, 90_000);
    expect(Object.keys(await containers(hostA!)).sort()).toEqual(["rc-web", "rc-worker"]);
    expect(Object.keys(await containers(hostB!))).toEqual(["rc-tool"]);
    expect((await (await fetch(`http://127.0.0.1:${webPort}/`)).text()).trim()).toBe("hello from the reconciler");
    const tenant = (await api().getResource({ resourceType: "tenant", id: TENANT })).resource!;
    const targets = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value.targets : [];
    expect(targets.map((t) => [t.nodeId, t.serviceIds])).toEqual([
      ["rc-dev", ["rc-tool"]],
      ["rc-prod", ["rc-web", "rc-worker"]],
    ]);
    expect(targets.every((t) => t.appliedHash === t.desiredHash && t.appliedHash !== "")).toBe(true);
    const tool = (await api().getResource({ resourceType: "service", id: "rc-tool" })).resource!;
    expect(tool.convergence).toMatchObject({ status: ConvergenceStatus.CONVERGED, nodeId: "rc-dev" });
    // Converged services record what they run as their last applied state, and the tenant's
    // snapshot then shows every service in sync.
    for (const id of ["rc-web", "rc-worker", "rc-tool"]) {
      const svc = await waitFor(`${id}'s last applied state`, async () => {
        const r = (await api().getResource({ resourceType: "service", id })).resource!;
        return r.lastAppliedState ? r : undefined;
      });
      expect(equals(ResourceSpecSchema, svc.lastAppliedState!, svc.desiredState!)).toBe(true);
    }
    const diffs = await waitFor("a snapshot with the services in sync", async () => {
      const snap = (await ctl.admin(SnapshotService).getTenantSnapshot({ tenantId: TENANT })).snapshot;
      const services = (snap?.diffs ?? []).filter((d) => d.resourceType === "service");
      return services.length === 3 && services.every((d) => d.inSync) ? services : undefined;
    });
    expect(diffs.map((d) => d.resourceId).sort()).toEqual(["rc-tool", "rc-web", "rc-worker"]);
  }, 120_000);

  it("a container stopped behind Skipper's back runs again, repaired by the order drift_detected names, which says why", async () => {
    const before = await containers(hostA!);
    const stoppedAt = Date.now();
    await execa("docker", ["stop", "-t", "1", before["rc-worker"]!.id], { env: { DOCKER_HOST: hostA! } });
    expect((await containers(hostA!))["rc-worker"]!.state).toBe("exited");
    await waitFor(
      "rc-worker to run again",
      async () => ((await containers(hostA!))["rc-worker"]?.state === "running" ? true : undefined),
      30_000,
      100,
    );
    const drift = (await ctl.admin(EventService).listEvents({ type: "drift_detected", tenantId: TENANT })).events;
    expect(drift.length).toBeGreaterThanOrEqual(1);
    expect(JSON.stringify(drift.at(-1)!.data)).toContain("rc-worker");
    expect(drift.at(-1)!.nodeId).toBe("rc-prod");
    // The repair is the order the drift was detected for, issued after the stop (the drift was
    // acted on, not a sweep's routine deploy), and it succeeded.
    const repair = await waitFor("the repair order to finish", async () => {
      const o = (await ctl.admin(WorkOrderService).getWorkOrder({ id: drift.at(-1)!.workOrderId })).workOrder!;
      return o.finishedAt ? o : undefined;
    });
    expect(timestampDate(repair.createdAt!).getTime()).toBeGreaterThanOrEqual(stoppedAt);
    expect(repair.type).toBe(WorkOrderType.DEPLOY_SERVICE);
    expect(repair.target?.nodeId).toBe("rc-prod");
    expect(repair.result?.code, repair.result?.message).toBe("APPLY_OK");
    await converged("tenant", TENANT);
  }, 60_000);

  it("a resource_limits change recreates the services that use it with the new limits, others untouched", async () => {
    const before = await containers(hostA!);
    await api().updateResource({
      resourceType: "resource_limits",
      id: "rc-small",
      desiredState: res("resource_limits", "rc-small", { case: "resourceLimits", value: { cpus: 0.25, memoryBytes: 32n * MiB } })
        .desiredState,
    });
    await waitFor(
      "rc-worker to be recreated",
      async () => {
        const now = await containers(hostA!);
        return now["rc-worker"] && now["rc-worker"].id !== before["rc-worker"]!.id && now["rc-worker"].state === "running"
          ? now
          : undefined;
      },
      60_000,
    );
    const inspect = await execa(
      "docker",
      ["inspect", "--format", "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}", (await containers(hostA!))["rc-worker"]!.id],
      { env: { DOCKER_HOST: hostA! } },
    );
    expect(inspect.stdout.trim()).toBe(`250000000 ${32n * MiB}`);
    await converged("tenant", TENANT);
    expect((await containers(hostA!))["rc-web"]!.id).toBe(before["rc-web"]!.id);
  }, 90_000);

  it("deleting a service takes its container off the engine, and its volume only with delete_data; the tombstone stays readable", async () => {
    expect(await volumes(hostA!)).toEqual(["rc-cache"]);
    expect(await volumes(hostB!)).toEqual(["rc-scratch"]);
    // rc-tool was all the tenant ran on the dev host: its project goes, and with delete_data its
    // volume, once (the tombstone says where the data is still to go, until it went).
    const prodOrders = async () =>
      (await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: "rc-prod", pageSize: 1000 })).workOrders.length;
    const prodBefore = await prodOrders();
    const deleted = await api().deleteResource({ resourceType: "service", id: "rc-tool", deleteData: true });
    expect(deleted.resource?.deletion?.dataPendingOnNodes).toEqual(["rc-dev"]);
    await waitFor("rc-tool's container to go", async () => (Object.keys(await containers(hostB!)).length === 0 ? true : undefined), 60_000);
    await waitFor("rc-tool's volume to go", async () => ((await volumes(hostB!)).length === 0 ? true : undefined), 60_000);
    await waitFor("the removal to be recorded as done", async () => {
      const tomb = (await api().getResource({ resourceType: "service", id: "rc-tool", includeDeleted: true })).resource!;
      return tomb.deletion?.dataPendingOnNodes.length === 0 ? true : undefined;
    });
    // The prod host never ran rc-tool: nothing was sent there for it.
    expect(await prodOrders()).toBe(prodBefore);
    // Without delete_data the data stays.
    await api().deleteResource({ resourceType: "service", id: "rc-worker" });
    await waitFor(
      "rc-worker's container to go",
      async () => ((await containers(hostA!))["rc-worker"] === undefined ? true : undefined),
      60_000,
    );
    expect((await containers(hostA!))["rc-web"]?.state).toBe("running");
    await converged("tenant", TENANT);
    expect(await volumes(hostA!)).toEqual(["rc-cache"]);
    const tomb = (await api().getResource({ resourceType: "service", id: "rc-tool", includeDeleted: true })).resource!;
    expect(tomb.deletion?.deletedAt).toBeDefined();
    await converged("tenant", TENANT);
    const tenant = (await api().getResource({ resourceType: "tenant", id: TENANT })).resource!;
    const targets = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value.targets : [];
    expect(targets.map((t) => t.nodeId)).toEqual(["rc-prod"]);
  }, 120_000);

  it("a host whose project is wiped (files and containers) is DRIFT_DETECTED, not converged, and is redeployed without an Apply", async () => {
    await converged("tenant", TENANT);
    const orders = async () =>
      (await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: "rc-prod", tenantId: TENANT, pageSize: 1000 })).workOrders.filter(
        (o) => o.type === WorkOrderType.DEPLOY_SERVICE,
      );
    const before = new Set((await orders()).map((o) => o.id));
    const wipedAt = Date.now();
    // What a re-imaged host looks like: the agent's record of the project and its containers gone.
    const ids = Object.values(await containers(hostA!)).map((c) => c.id);
    await Promise.all([
      rm(join(root, "rc-prod", "work", "tenants", TENANT), { recursive: true, force: true }),
      execa("docker", ["rm", "-f", ...ids], { env: { DOCKER_HOST: hostA! } }),
    ]);
    // Through the API: the tenant says so (and why) while the repair runs.
    const drifted = await waitFor(
      "the tenant to be DRIFT_DETECTED",
      async () => {
        const c = (await api().getResource({ resourceType: "tenant", id: TENANT })).resource?.convergence;
        return c?.status === ConvergenceStatus.DRIFT_DETECTED ? c : undefined;
      },
      30_000,
      50,
    );
    expect(drifted.message).toContain("drift on node rc-prod");
    await waitFor(
      "rc-web to run again",
      async () => ((await containers(hostA!))["rc-web"]?.state === "running" ? true : undefined),
      60_000,
    );
    await converged("tenant", TENANT);
    expect((await (await fetch(`http://127.0.0.1:${webPort}/`)).text()).trim()).toBe("hello from the reconciler");
    // The repair was the reconciler's: orders for drift (or its retries), one at a time, each
    // issued after the one before ended; and a drift_detected event says what was found.
    const repairs = (await orders()).filter((o) => !before.has(o.id));
    expect(repairs.length).toBeGreaterThanOrEqual(1);
    expect(repairs[0]!.metadata?.annotations.reason).toBe("drift");
    for (const [i, o] of repairs.entries()) {
      expect(["drift", "retry"]).toContain(o.metadata?.annotations.reason);
      expect(timestampDate(o.createdAt!).getTime()).toBeGreaterThanOrEqual(wipedAt);
      const prev = repairs[i - 1];
      if (prev) expect(timestampDate(o.createdAt!).getTime()).toBeGreaterThanOrEqual(timestampDate(prev.finishedAt!).getTime());
    }
    expect(repairs.at(-1)!.result?.code).toBe("APPLY_OK");
    const events = (await ctl.admin(EventService).listEvents({ type: "drift_detected", tenantId: TENANT })).events.filter(
      (e) => timestampDate(e.timestamp!).getTime() >= wipedAt,
    );
    expect(events.map((e) => e.workOrderId)).toEqual(repairs.filter((o) => o.metadata?.annotations.reason === "drift").map((o) => o.id));
    expect(JSON.stringify(events[0]!.data)).toMatch(/no project|missing/);
  }, 120_000);
});

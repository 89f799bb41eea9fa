// Releases through environments end to end (issue 34): the built controller and four skippy
// agents as processes on real engines, images in a private registry on loopback (Debian's
// docker-registry with htpasswd). One artifact `web`; three environments of one delivery:
// test (takes what arrives), staging (after test ran it for a bake time, then an HTTP check from
// its node must pass twice), production (after staging, and an operator's approval; two nodes
// rolled out one wave at a time). Versions are posted as CI does. Every wait is for state the
// controller or an engine reports; nothing waits a fixed time.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConstraintKind, ConstraintPhase, type EnvironmentStatus, ReleaseOutcome } from "../gen/skipper/v1/delivery_pb.js";
import { DeliveryService } from "../gen/skipper/v1/delivery_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { RolloutService } from "../gen/skipper/v1/rollout_service_pb.js";
import { RolloutStatus } from "../gen/skipper/v1/rollout_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { dockerEngines } from "./helpers/engines.js";
import {
  type AgentProcess,
  type ControllerProcess,
  E2E_ADMIN_TOKEN,
  freePort,
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
} from "./helpers/processes.js";
import { registryInstalled, startRegistry, type TestRegistry, versionImage } from "./helpers/registry.js";
import { rawRequest } from "./helpers/https.js";
import { run } from "../cli/program.js";
import { res } from "./helpers/resources.js";

const hosts = process.env.SKIPPER_TEST_DOCKER_HOST_B ? await dockerEngines(2) : [];
const haveRegistry = await registryInstalled();
const ready = hosts.length === 2 && haveRegistry;
if (!ready)
  console.warn(
    "!!! delivery-e2e.test.ts SKIPPED: needs two Docker engines and docker-registry/htpasswd (scripts/docker-engine.sh install)",
  );

// Tenants' projects are named by tenant, so test, staging and prod-1 share engine A; prod-2 (the
// same tenant as prod-1) needs an engine of its own.
const NODES = { "dl-test": 0, "dl-staging": 0, "dl-prod-1": 0, "dl-prod-2": 1 } as const;
type NodeId = keyof typeof NODES;
const TENANTS = { test: `dl-test-${RUN_ID}`, staging: `dl-staging-${RUN_ID}`, prod: `dl-prod-${RUN_ID}` };
const REPO = `shop/web-${RUN_ID}`;
const VERSIONS = ["1.0.0", "1.1.0", "1.2.0"] as const;

describe.skipIf(!ready)("releases through environments (real engines, real registry)", () => {
  let ctl: ControllerProcess;
  let registry: TestRegistry;
  let root: string;
  let port: number;
  const agents: AgentProcess[] = [];
  const digests = new Map<string, string>();
  const api = () => ctl.admin(ResourceService);
  const delivery = () => ctl.admin(DeliveryService);
  const hostOf = (n: NodeId) => hosts[NODES[n]]!;

  async function envStatus(id: string): Promise<EnvironmentStatus> {
    const r = (await api().getResource({ resourceType: "environment", id })).resource;
    if (r?.currentState?.kind.case !== "environment") throw new Error(`environment ${id} has no status`);
    return r.currentState.kind.value;
  }
  const versionOf = (s: EnvironmentStatus | undefined) => s?.current?.versions.find((v) => v.artifactId === "web")?.version;

  /** Waits until environment `id` runs `version` verified (nothing in flight). */
  function verified(id: string, version: string, timeoutMs = 120_000) {
    return waitFor(
      `${id} to run web ${version} verified`,
      async () => {
        const s = await envStatus(id);
        return versionOf(s) === version && !s.inFlight && s.history[0]?.outcome === ReleaseOutcome.VERIFIED ? s : undefined;
      },
      timeoutMs,
    );
  }

  /** The image digest the tenant's web container runs on `node`'s engine. */
  async function runningDigest(tenant: string, node: NodeId): Promise<string | undefined> {
    const env = { DOCKER_HOST: hostOf(node) };
    const ids = (
      await execa(
        "docker",
        ["ps", "-q", "--filter", `label=com.docker.compose.project=${tenant}`, "--filter", "label=com.docker.compose.service=web"],
        {
          env,
        },
      )
    ).stdout.trim();
    if (ids === "") return undefined;
    const image = (await execa("docker", ["inspect", "--format", "{{.Config.Image}}", ids.split("\n")[0]!], { env })).stdout.trim();
    return image.slice(image.indexOf("@") + 1);
  }

  /** Waits until the tenant converged with every node of it running `version`'s image. */
  function runs(tenant: string, nodes: NodeId[], version: string) {
    return waitFor(
      `${tenant} to run web ${version} on ${nodes.join(", ")}`,
      async () => {
        const t = (await api().getResource({ resourceType: "tenant", id: tenant })).resource;
        if (t?.convergence?.status !== ConvergenceStatus.CONVERGED) return undefined;
        for (const n of nodes) if ((await runningDigest(tenant, n)) !== digests.get(version)) return undefined;
        return true;
      },
      120_000,
    );
  }

  // An image per version: busybox with /www/version holding it, served by httpd.
  async function buildAndPush(version: string): Promise<void> {
    await versionImage(hostOf("dl-test"), `dl-web-${RUN_ID}:${version}`, version);
    await registry.push(`dl-web-${RUN_ID}:${version}`, `${REPO}:${version}`);
    digests.set(version, await registry.digest(REPO, version));
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-delivery-"));
    registry = await startRegistry(hostOf("dl-test"), "deployer", `sntl-dl-pass-${RUN_ID}`);
    for (const v of VERSIONS) await buildAndPush(v);
    ctl = await startControllerProcess({
      dataDir: join(root, "data"),
      extraArgs: ["--reconcile-interval", "2s", "--promotion-interval", "1s"],
    });
    for (const nodeId of Object.keys(NODES) as NodeId[]) {
      const labels = { tier: nodeId.startsWith("dl-prod") ? "prod" : nodeId.slice(3) };
      const token = (await ctl.admin(NodeService).registerNode({ nodeId, labels })).token;
      agents.push(
        startAgentProcess({
          controller: ctl,
          nodeId,
          token,
          stateDir: join(root, nodeId, "state"),
          workDir: join(root, nodeId, "work"),
          dockerHost: hostOf(nodeId),
          extraArgs: ["--ready-timeout", "30s"],
          env: { HOME: join(root, nodeId, "home") },
        }),
      );
    }
    port = await freePort();
    const create = (type: string, id: string, value: object) =>
      api().createResource({ resourceType: type, resource: res(type, id, { case: type === "git_source" ? "gitSource" : type, value }) });
    for (const [stage, tenantId] of Object.entries(TENANTS)) {
      await create("tenant", tenantId, {
        deploymentPolicy: { nodeSelector: { tier: stage } },
        // Production: one node per wave.
        rollout: stage === "prod" ? { waves: [{ name: "first", size: { case: "count", value: 1 } }] } : undefined,
      });
      await create("secret", `${tenantId}-registry`, {
        tenantId,
        registry: registry.host,
        values: { username: registry.username, password: registry.password },
      });
    }
    await create("artifact", "web", {
      tenantId: TENANTS.test,
      source: { case: "image", value: { repository: `${registry.host}/${REPO}` } },
    });
    for (const [stage, tenantId] of Object.entries(TENANTS))
      await create("service", `${tenantId}-web`, {
        tenantId,
        artifactId: "web",
        composeService: "web",
        command: ["httpd", "-f", "-p", "8080", "-h", "/www"],
        ports: stage === "staging" ? [{ hostPort: port, containerPort: 8080 }] : [],
      });
    await create("delivery", "shop", { displayName: "Shop" });
    await create("environment", "test", { deliveryId: "shop", tenantIds: [TENANTS.test], artifactIds: ["web"] });
    await create("environment", "staging", {
      deliveryId: "shop",
      tenantIds: [TENANTS.staging],
      artifactIds: ["web"],
      dependsOn: [{ environmentId: "test", bakeTime: durationFromMs(3000) }],
      verifications: [
        {
          name: "smoke",
          kind: { case: "probe", value: { kind: { case: "http", value: { url: `http://127.0.0.1:${port}/version` } } } },
          requiredPasses: 2,
          interval: durationFromMs(1000),
        },
      ],
    });
    await create("environment", "production", {
      deliveryId: "shop",
      tenantIds: [TENANTS.prod],
      artifactIds: ["web"],
      dependsOn: [{ environmentId: "staging" }],
      requireApproval: true,
    });
  }, 300_000);

  afterAll(async () => {
    for (const a of agents) await a.stop();
    await ctl?.stop();
    await registry?.stop();
    for (const [node, engine] of Object.entries(NODES))
      for (const t of Object.values(TENANTS)) if (node.startsWith("dl-prod") || engine === 0) await removeComposeProject(hosts[engine]!, t);
    // The images built here and those the agents pulled by digest, off both engines.
    const refs = VERSIONS.flatMap((v) => [
      `dl-web-${RUN_ID}:${v}`,
      ...(digests.has(v) ? [`${registry.host}/${REPO}@${digests.get(v)}`] : []),
    ]);
    for (const h of hosts) await execa("docker", ["rmi", "-f", ...refs], { env: { DOCKER_HOST: h }, reject: false });
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 120_000);

  // Each case below takes up to ~55 s on a quiet machine (waves, bakes and checks at their real
  // intervals), near the suite's 60 s default: their timeouts are hang guards, sized for a loaded one.
  it("before any version, a service naming the artifact waits PROMOTION_PENDING and says why", async () => {
    const svc = await waitFor("the test tenant's service to say it waits for a promotion", async () => {
      const r = (await api().getResource({ resourceType: "service", id: `${TENANTS.test}-web` })).resource;
      // Until the environments exist it says no environment holds the tenant; then what test waits for.
      return r?.convergence?.status === ConvergenceStatus.PROMOTION_PENDING &&
        /environment test has promoted no release/.test(r.convergence.message)
        ? r
        : undefined;
    });
    expect(svc.convergence?.message).toMatch(/no version recorded/);
  });

  it("1.0.0 posted: test takes it, staging after test's bake and two passing checks, production waits for approval", async () => {
    const posted = await delivery().createArtifactVersion({
      artifactId: "web",
      version: "1.0.0",
      digest: digests.get("1.0.0")!,
      metadata: { commit: "c1" },
    });
    expect(posted.created).toBe(true);
    await runs(TENANTS.test, ["dl-test"], "1.0.0");
    const test = await verified("test", "1.0.0");
    const staging = await verified("staging", "1.0.0");
    await runs(TENANTS.staging, ["dl-staging"], "1.0.0");
    // Staging took it only after test had run it for the bake time.
    const testSince = Number(test.history[0]!.runningSince!.seconds) * 1000 + test.history[0]!.runningSince!.nanos / 1e6;
    const stagingPromoted = Number(staging.history[0]!.promotedAt!.seconds) * 1000 + staging.history[0]!.promotedAt!.nanos / 1e6;
    expect(stagingPromoted - testSince).toBeGreaterThanOrEqual(3000);
    // Two health checks ran from staging's node, after it ran the release.
    const checks = (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: TENANTS.staging, pageSize: 100 })).workOrders.filter(
      (o) => o.type === WorkOrderType.HEALTH_CHECK,
    );
    expect(checks.length).toBeGreaterThanOrEqual(2);
    // Production waits for an approval, and says so.
    const prod = await waitFor("production to wait for approval", async () => {
      const s = await envStatus("production");
      const approval = s.candidates[0]?.constraints.find((c) => c.kind === ConstraintKind.APPROVAL);
      return approval?.phase === ConstraintPhase.PENDING ? s : undefined;
    });
    expect(prod.current).toBeUndefined();
    expect(prod.message).toMatch(/approv/);
    // Operators see it on /metrics too: one release waits to enter production.
    const metrics = await rawRequest(ctl, "GET", "/metrics", { "x-admin-token": E2E_ADMIN_TOKEN });
    expect(metrics.body).toMatch(/skipper_delivery_versions_waiting\{environment="production"\} 1\b/);
    expect(metrics.body).toMatch(/skipper_delivery_actions_total\{action="promote"\} [1-9]/);
  }, 240_000);

  it("skipper delivery status shows the matrix; skipper delivery approve lets the release into production", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const io = {
      out: (t: string) => out.push(t),
      err: (t: string) => err.push(t),
      color: false,
      env: { SKIPPER_SERVER: ctl.url, SKIPPER_CA_FILE: ctl.caFile, SKIPPER_TOKEN: E2E_ADMIN_TOKEN, XDG_CONFIG_HOME: root },
      readStdin: async () => "",
    };
    expect(await run(["delivery", "status", "shop", "-o", "wide"], io), err.join("\n")).toBe(0);
    const text = out.join("\n");
    const releaseId = (await envStatus("production")).candidates[0]!.release!.id;
    // Columns upstream first; the release's row: current in test and staging, waiting in production, and why.
    expect(text).toMatch(/RELEASE\s+VERSIONS\s+TEST\s+STAGING\s+PRODUCTION/);
    expect(text).toMatch(new RegExp(`${releaseId}\\s+web=1\\.0\\.0\\s+CURRENT\\s+CURRENT\\s+WAITING`));
    expect(text).toContain(`${releaseId} in production: APPROVAL PENDING (${releaseId}): waits for approval of ${releaseId}`);
    out.length = 0;
    expect(await run(["delivery", "approve", "production", releaseId, "--reason", "change 4711"], io), err.join("\n")).toBe(0);
    expect(out.join("\n")).toMatch(/^environment production: /);
    const decided = (await envStatus("production")).decisions[0];
    expect([decided?.releaseId, decided?.by?.reason]).toEqual([releaseId, "change 4711"]);
  });

  it("approved, production runs 1.0.0 on both nodes; promoted once", async () => {
    await runs(TENANTS.prod, ["dl-prod-1", "dl-prod-2"], "1.0.0");
    await verified("production", "1.0.0");
    const promoted = (await ctl.admin(EventService).listEvents({ resourceId: "production", type: "delivery_promoted" })).events;
    expect(promoted).toHaveLength(1);
  });

  it("1.1.0 reaches production only when approved, then rolls out there one wave at a time", async () => {
    await delivery().createArtifactVersion({ artifactId: "web", version: "1.1.0", digest: digests.get("1.1.0")! });
    await verified("staging", "1.1.0");
    const waiting = await waitFor("production to wait for the approval of 1.1.0", async () => {
      const s = await envStatus("production");
      const c = s.candidates.find((x) => x.release?.versions[0]?.version === "1.1.0");
      return c?.constraints.find((k) => k.kind === ConstraintKind.APPROVAL)?.phase === ConstraintPhase.PENDING ? c : undefined;
    });
    expect(versionOf(await envStatus("production"))).toBe("1.0.0");
    await delivery().approveRelease({ id: "production", releaseId: waiting.release!.id, reason: "change 4712" });
    await runs(TENANTS.prod, ["dl-prod-1", "dl-prod-2"], "1.1.0");
    await verified("production", "1.1.0");
    const rollout = (await ctl.admin(RolloutService).listRollouts({ tenantId: TENANTS.prod })).rollouts[0]!;
    expect(rollout.status).toBe(RolloutStatus.SUCCEEDED);
    expect(rollout.waves.map((w) => [w.name, w.nodes.length])).toEqual([
      ["first", 1],
      ["rest", 1],
    ]);
  }, 240_000);

  it("a pin to 1.0.0 rolls production back and holds it there while 1.2.0 moves through test and staging", async () => {
    const back = (await envStatus("production")).history.find((h) => h.release?.versions[0]?.version === "1.0.0")!.release!.id;
    await delivery().pinEnvironment({ id: "production", releaseId: back, reason: "checkout errors" });
    await runs(TENANTS.prod, ["dl-prod-1", "dl-prod-2"], "1.0.0");
    await delivery().createArtifactVersion({ artifactId: "web", version: "1.2.0", digest: digests.get("1.2.0")! });
    await verified("staging", "1.2.0");
    await runs(TENANTS.staging, ["dl-staging"], "1.2.0");
    const prod = await waitFor("production to list 1.2.0 as held by the pin", async () => {
      const s = await envStatus("production");
      const c = s.candidates.find((x) => x.release?.versions[0]?.version === "1.2.0");
      return c?.constraints.find((k) => k.kind === ConstraintKind.PIN)?.phase === ConstraintPhase.PENDING ? s : undefined;
    });
    expect(versionOf(prod)).toBe("1.0.0");
    expect(prod.message).toMatch(/pinned to .* by admin .*checkout errors.*unpin/);
    expect(await runningDigest(TENANTS.prod, "dl-prod-2")).toBe(digests.get("1.0.0"));
  }, 240_000);

  it("1.2.0 marked bad: test and staging go back to 1.1.0, their last good release, and it is never a candidate again", async () => {
    await delivery().markVersionBad({ artifactId: "web", version: "1.2.0", reason: "memory leak" });
    await runs(TENANTS.test, ["dl-test"], "1.1.0");
    await runs(TENANTS.staging, ["dl-staging"], "1.1.0");
    for (const id of ["test", "staging"]) {
      const s = await waitFor(`${id} to be back on 1.1.0`, async () => {
        const st = await envStatus(id);
        return versionOf(st) === "1.1.0" && !st.inFlight ? st : undefined;
      });
      expect(s.history.some((h) => h.outcome === ReleaseOutcome.DEMOTED)).toBe(true);
      expect(s.candidates.map((c) => c.release?.versions[0]?.version)).not.toContain("1.2.0");
    }
    const prod = await envStatus("production");
    expect(versionOf(prod)).toBe("1.0.0");
    expect(prod.candidates.map((c) => c.release?.versions[0]?.version)).not.toContain("1.2.0");
    const events = (await ctl.admin(EventService).listEvents({ resourceId: "staging", type: "delivery_demoted" })).events;
    expect(events.length).toBeGreaterThanOrEqual(1);
  }, 240_000);
});

// Registry credentials end to end: a private registry on loopback that wants a login (Debian's
// docker-registry, htpasswd), a controller and an agent as processes on a real engine. A service
// whose image is only in that registry fails to deploy without a credential, with an error that
// names the image and the registry; a registry secret of the tenant makes the next deploy pull
// and run it. The credential never reaches the host's Docker config (the agent's HOME here), a
// file outside the project's secret directory, a log line or an API answer.
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { toJsonString } from "@bufbuild/protobuf";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ListResourcesResponseSchema, ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { ListWorkOrdersResponseSchema, WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { filesHolding } from "./helpers/files.js";
import { registryInstalled, startRegistry, type TestRegistry } from "./helpers/registry.js";
import { res, tenantConverged } from "./helpers/resources.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const haveRegistry = await registryInstalled();
if (!dockerHost || !haveRegistry)
  console.warn(
    "!!! registry-credentials-e2e.test.ts SKIPPED: no Docker engine or no docker-registry/htpasswd (scripts/docker-engine.sh install)",
  );

const NODE = "reg-node";
const TENANT = `reg-shop-${RUN_ID}`;
const PASSWORD = `sntl-registry-pass-${RUN_ID}`;

describe.skipIf(!dockerHost || !haveRegistry)("registry credentials (real engine, real registry)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let registry: TestRegistry;
  let root: string;
  let image: string;
  const api = () => ctl.admin(ResourceService);
  const orders = () => ctl.admin(WorkOrderService);
  const deployOrders = async () =>
    (await orders().listWorkOrders({ tenantId: TENANT, pageSize: 100 })).workOrders.filter((o) => o.type === WorkOrderType.DEPLOY_SERVICE);

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-registry-"));
    registry = await startRegistry(dockerHost!, "deployer", PASSWORD);
    image = await registry.push("skipper-busybox:local", `skipper/private-busybox:${RUN_ID}`);
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", "2s"] });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      extraArgs: ["--ready-timeout", "30s"],
      // The host's Docker config is under HOME: it must stay without the credential.
      env: { HOME: join(root, "home") },
    });
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
    });
  }, 180_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    await registry?.stop();
    if (dockerHost) {
      await removeComposeProject(dockerHost, TENANT);
      if (image) await execa("docker", ["rmi", "-f", image], { env: { DOCKER_HOST: dockerHost }, reject: false });
    }
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("without a credential the pull fails naming the image and its registry", async () => {
    await api().createResource({
      resourceType: "service",
      resource: res("service", "reg-web", {
        case: "service",
        value: { tenantId: TENANT, image, command: ["sh", "-c", 'trap "exit 0" TERM; sleep 3600 & wait'] },
      }),
    });
    const failed = await waitFor(
      "the deploy to fail",
      async () => (await deployOrders()).find((o) => o.status === WorkOrderStatus.FAILED || o.status === WorkOrderStatus.RETRY_PENDING),
      120_000,
    );
    const r = failed.result!;
    expect(r.code).toMatch(/^IMAGE_(NOT_FOUND|PULL_FAILED)$/);
    expect(r.message).toContain(image);
    expect(r.message).toContain(`registry ${registry.host}`);
    expect(r.message).toMatch(/no credential/);
  }, 180_000);

  it("a registry secret of the tenant lets the next deploy pull the image, without the host's Docker config", async () => {
    await expect(
      api().createResource({
        resourceType: "secret",
        resource: res("secret", "reg-login-bad", {
          case: "secret",
          value: { tenantId: TENANT, registry: registry.host, values: { username: "deployer" } },
        }),
      }),
    ).rejects.toThrow(/username and password/);
    await api().createResource({
      resourceType: "secret",
      resource: res("secret", "reg-login", {
        case: "secret",
        value: { tenantId: TENANT, registry: registry.host, values: { username: "deployer", password: PASSWORD } },
      }),
    });
    await tenantConverged(api(), TENANT, 180_000);
    const ok = (await deployOrders()).find((o) => o.status === WorkOrderStatus.SUCCESS)!;
    expect(ok.desiredState?.registrySecretIds).toEqual(["reg-login"]);
    const running = await execa("docker", ["ps", "--format", "{{.Image}}", "--filter", `label=com.docker.compose.project=${TENANT}`], {
      env: { DOCKER_HOST: dockerHost! },
    });
    expect(running.stdout.trim()).toBe(image);

    // The host's Docker config never saw it.
    await expect(stat(join(root, "home", ".docker", "config.json"))).rejects.toThrow(/ENOENT/);
    // The project's own login lives in its secret directory only.
    const config = join(root, "work", "tenants", TENANT, ".skipper-secrets", ".docker", "config.json");
    expect((await stat(config)).mode & 0o777).toBe(0o600);

    const hits = await filesHolding(root, [PASSWORD], (p) => p.includes("/.skipper-secrets/") || p.includes("/.skipper-applied-secrets/"));
    expect(hits).toEqual([]);
    const answers = [
      toJsonString(ListResourcesResponseSchema, await api().listResources({ resourceType: "secret", pageSize: 100 })),
      toJsonString(ListWorkOrdersResponseSchema, await orders().listWorkOrders({ pageSize: 500 })),
    ];
    for (const a of answers) expect(a).not.toContain(PASSWORD);
  }, 240_000);
});

// Secrets reaching containers, end to end: a controller and an agent as processes (HTTP/2 + TLS
// between them) on a real Docker engine. Two tenants use values of their secret resources, one
// through service resources (env from a secret, a file under /run/secrets) and one through its
// own compose file (${VAR} and a compose `secrets:` entry). The containers see the values; a key
// rotation leaves them running and the values readable; a new value rolls the service. Then
// every file under the controller's and the agent's directories (except the project's secret
// directories, which are the mounted files themselves), every log line and every API answer is
// searched for the values: none holds one.
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toJsonString } from "@bufbuild/protobuf";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { DeploySafetySchema } from "../gen/skipper/v1/safety_pb.js";
import { SecretKeyRefSchema } from "../gen/skipper/v1/secret_pb.js";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { ComposeProjectSchema } from "../gen/skipper/v1/resource_pb.js";
import { ListResourcesResponseSchema, ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { SecretService } from "../gen/skipper/v1/secret_service_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { ListWorkOrdersResponseSchema, WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { ListEventsResponseSchema } from "../gen/skipper/v1/event_service_pb.js";
import { ListAuditEntriesResponseSchema } from "../gen/skipper/v1/audit_service_pb.js";
import { filesHolding } from "./helpers/files.js";
import {
  RUN_ID,
  freePort,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res, tenantConverged } from "./helpers/resources.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! secret-deploy-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const IMAGE = "skipper-busybox:local";
const NODE = "sec-node";
const BY_SERVICES = `sec-svc-${RUN_ID}`;
const OWN_FILE = `sec-own-${RUN_ID}`;
const tag = randomBytes(4).toString("hex");
// Every value planted, by what it is.
const V = {
  password1: `sntl-${tag}-password-one`,
  password2: `sntl-${tag}-password-two`,
  cert: `sntl-${tag}-certificate`,
  token: `sntl-${tag}-api-token`,
  key: `sntl-${tag}-tls-key`,
  tokenNext: `sntl-${tag}-api-token-next`,
};
const SENTINELS = Object.values(V);
const SECRET_DIRS = new Set([".skipper-secrets", ".skipper-applied-secrets"]);

// A busybox web server whose page shows what the container was given.
const SERVE = (lines: string, then = "true") =>
  `mkdir -p /www && { ${lines}; } > /www/index.html && ${then} && httpd -f -p 8080 -h /www & trap "exit 0" TERM; wait`;

describe.skipIf(!dockerHost)("secrets in deployed services (real engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  let portA: number;
  let portB: number;
  const api = () => ctl.admin(ResourceService);
  const orders = () => ctl.admin(WorkOrderService);
  const page = async (port: number) => (await (await fetch(`http://127.0.0.1:${port}/`)).text()).trim();
  const converged = (tenant: string) => tenantConverged(api(), tenant);
  const deployOrders = async (tenant: string) =>
    (await orders().listWorkOrders({ tenantId: tenant, pageSize: 100 })).workOrders.filter((o) => o.type === WorkOrderType.DEPLOY_SERVICE);
  const container = async (tenant: string) =>
    (
      await execa("docker", ["ps", "-q", "--no-trunc", "--filter", `label=com.docker.compose.project=${tenant}`], {
        env: { DOCKER_HOST: dockerHost! },
      })
    ).stdout.trim();

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-secrets-"));
    [portA, portB] = [await freePort(), await freePort()];
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
      // A variable of the agent's own that a project's env also sets: the project's value wins.
      env: { MODE: "from-the-agent" },
    });
  }, 120_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    if (dockerHost) for (const t of [BY_SERVICES, OWN_FILE]) await removeComposeProject(dockerHost, t);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("a service's env and file secrets reach its container, and a tenant's own compose file gets them too", async () => {
    // Tenant A: service resources.
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", BY_SERVICES, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
    });
    await api().createResource({
      resourceType: "secret",
      resource: res("secret", "a-db", {
        case: "secret",
        value: { tenantId: BY_SERVICES, values: { password: V.password1, cert: V.cert } },
      }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", "a-web", {
        case: "service",
        value: {
          tenantId: BY_SERVICES,
          image: IMAGE,
          command: ["sh", "-c", SERVE('echo "pw=$DB_PASSWORD"; echo "file=$(cat /run/secrets/server.crt)"')],
          secretEnv: { DB_PASSWORD: { secretId: "a-db", key: "password" } },
          secretFiles: { "server.crt": { secretId: "a-db", key: "cert" } },
          ports: [{ hostIp: "127.0.0.1", hostPort: portA, containerPort: 8080 }],
        },
      }),
    });
    // Tenant B: its own compose file, which declares no top-level secrets (the controller does).
    const compose = create(ComposeProjectSchema, {
      composeFile: [
        "services:",
        "  app:",
        `    image: ${IMAGE}`,
        // The health page is there unless MODE is "broken" (the health gate's probe reads it).
        `    command: ["sh", "-c", ${JSON.stringify(SERVE('echo "token=$$API_TOKEN"; echo "key=$$(cat /run/secrets/tls_key)"', '{ [ "$$MODE" = broken ] || echo ok > /www/health.html; }'))}]`,
        "    environment:",
        `      API_TOKEN: $\{API_TOKEN}`,
        `      MODE: $\{MODE:-fine}`,
        "    secrets: [tls_key]",
        `    ports: ["127.0.0.1:${portB}:8080"]`,
        "",
      ].join("\n"),
      env: { GREETING: "plain" },
      secretEnv: { API_TOKEN: { secretId: "b-keys", key: "token" } },
      secretFiles: { tls_key: { secretId: "b-keys", key: "key" } },
    });
    const tenantB = res("tenant", OWN_FILE, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE }, compose } });
    // Its secret first: a reference to one that does not exist is refused, and nothing is stored.
    await expect(api().createResource({ resourceType: "tenant", resource: tenantB })).rejects.toThrow(
      /names secret b-keys, which does not exist/,
    );
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", OWN_FILE, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
    });
    await api().createResource({
      resourceType: "secret",
      resource: res("secret", "b-keys", { case: "secret", value: { tenantId: OWN_FILE, values: { token: V.token, key: V.key } } }),
    });
    await api().updateResource({ resourceType: "tenant", id: OWN_FILE, desiredState: tenantB.desiredState });

    await converged(BY_SERVICES);
    await converged(OWN_FILE);
    expect(await page(portA)).toBe(`pw=${V.password1}\nfile=${V.cert}`);
    expect(await page(portB)).toBe(`token=${V.token}\nkey=${V.key}`);

    // On the node: the mounted files and the secret variables live in the project's secret
    // directory (0700, files 0600), nowhere else.
    const dir = join(root, "work", "tenants", BY_SERVICES, ".skipper-secrets");
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    for (const name of await readdir(dir)) expect((await stat(join(dir, name))).mode & 0o777, name).toBe(0o600);
    const envFile = await readFile(join(root, "work", "tenants", OWN_FILE, ".env"), "utf8");
    expect(envFile).toBe("GREETING=plain\n");
  }, 240_000);

  it("a key rotation keeps the services running with readable values; a new value rolls the service that uses it", async () => {
    const before = await container(BY_SERVICES);
    const ordersBefore = (await deployOrders(BY_SERVICES)).length;
    const rotated = await ctl.admin(SecretService).rotateSecretKeys({});
    expect(rotated.resealedSecrets).toBeGreaterThanOrEqual(2);
    expect(await page(portA)).toBe(`pw=${V.password1}\nfile=${V.cert}`);

    const secret = (await api().getResource({ resourceType: "secret", id: "a-db" })).resource!;
    if (secret.desiredState?.kind.case !== "secret") throw new Error("not a secret");
    secret.desiredState.kind.value.values = { password: V.password2 };
    await api().updateResource({ resourceType: "secret", id: "a-db", desiredState: secret.desiredState });
    await waitFor(
      "the new password to reach the container",
      async () => ((await page(portA).catch(() => "")) === `pw=${V.password2}\nfile=${V.cert}` ? true : undefined),
      120_000,
    );
    await converged(BY_SERVICES);
    expect(await container(BY_SERVICES)).not.toBe(before);
    // One deploy for the new value; the rotation itself deployed nothing.
    const after = await deployOrders(BY_SERVICES);
    expect(after.length).toBe(ordersBefore + 1);
    const last = after.find(
      (o) => o.status === WorkOrderStatus.SUCCESS && o.desiredState?.secretUses.some((u) => u.key === "password" && u.version === 2n),
    );
    expect(last, "the order names the value's new version").toBeDefined();
  }, 240_000);

  it("a deploy that fails its health gate is restored with the values its predecessor ran with", async () => {
    const t = (await api().getResource({ resourceType: "tenant", id: OWN_FILE })).resource!;
    if (t.desiredState?.kind.case !== "tenant") throw new Error("not a tenant");
    const spec = t.desiredState.kind.value;
    spec.safety = create(DeploySafetySchema, {
      healthGate: {
        probes: [
          {
            kind: { case: "http", value: { url: `http://127.0.0.1:${portB}/health.html`, expectStatus: 200 } },
            timeout: durationFromMs(1000),
          },
        ],
        deadline: durationFromMs(5000),
      },
    });
    await api().updateResource({ resourceType: "tenant", id: OWN_FILE, desiredState: t.desiredState });
    // A new value under a new name, and a broken spec, in one change.
    const keys = (await api().getResource({ resourceType: "secret", id: "b-keys" })).resource!;
    if (keys.desiredState?.kind.case !== "secret") throw new Error("not a secret");
    keys.desiredState.kind.value.values = { token_next: V.tokenNext };
    await api().updateResource({ resourceType: "secret", id: "b-keys", desiredState: keys.desiredState });
    spec.compose!.env = { GREETING: "plain", MODE: "broken" };
    spec.compose!.secretEnv.API_TOKEN = create(SecretKeyRefSchema, { secretId: "b-keys", key: "token_next" });
    await api().updateResource({ resourceType: "tenant", id: OWN_FILE, desiredState: t.desiredState });

    const failed = await waitFor(
      "the broken spec to be rolled back",
      async () => (await deployOrders(OWN_FILE)).find((o) => o.result?.code === "ROLLED_BACK"),
      120_000,
    );
    expect(failed.result?.message).toMatch(/restored spec/);
    // The previous spec runs again, with the value it ran with, not the one the failed spec used.
    expect(await page(portB)).toBe(`token=${V.token}\nkey=${V.key}`);
  }, 240_000);

  it("an admin's rollback runs the earlier spec with the values the secrets hold now", async () => {
    const { workOrder } = await orders().createWorkOrder({
      type: WorkOrderType.ROLLBACK,
      target: { nodeId: NODE, tenantId: BY_SERVICES },
      action: { kind: { case: "rollback", value: {} } },
    });
    const done = await waitFor(
      "the rollback to finish",
      async () => {
        const o = (await orders().getWorkOrder({ id: workOrder!.id })).workOrder!;
        return o.status === WorkOrderStatus.SUCCESS || o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      120_000,
    );
    expect(done.result?.code).toBe("ROLLBACK_OK");
    // The spec restored is the first one (password version 1); the value is today's.
    expect(done.desiredState?.secretUses.find((u) => u.key === "password")?.version).toBe(2n);
    expect(await page(portA)).toBe(`pw=${V.password2}\nfile=${V.cert}`);
  }, 180_000);

  it("a removed value in use is refused; no file, log line or API answer holds a value", async () => {
    const secret = (await api().getResource({ resourceType: "secret", id: "a-db" })).resource!;
    if (secret.desiredState?.kind.case !== "secret") throw new Error("not a secret");
    secret.desiredState.kind.value.remove = ["cert"];
    await expect(api().updateResource({ resourceType: "secret", id: "a-db", desiredState: secret.desiredState })).rejects.toThrow(
      /cert still in use by service\/a-web/,
    );

    // A failure whose output carries a value: Compose prints the image it could not use.
    const t = (await api().getResource({ resourceType: "tenant", id: OWN_FILE })).resource!;
    if (t.desiredState?.kind.case !== "tenant") throw new Error("not a tenant");
    const compose = t.desiredState.kind.value.compose!;
    compose.composeFile = compose.composeFile.replace(`image: ${IMAGE}`, `image: "Bad:$\{API_TOKEN}"`);
    compose.env = { GREETING: "plain" };
    await api().updateResource({ resourceType: "tenant", id: OWN_FILE, desiredState: t.desiredState });
    const failed = await waitFor(
      "the deploy with a bad image to fail",
      async () =>
        (await deployOrders(OWN_FILE)).find(
          (o) => o.desiredState?.composeProject?.composeFile.includes("Bad:") && o.result && !o.result.success,
        ),
      120_000,
    );
    expect(failed.result?.message).toContain("[REDACTED]");
    expect(toJsonString(WorkOrderSchema, failed)).toContain("[REDACTED]");

    // Every file under the controller's and the agent's directories, logs included.
    const hits = await filesHolding(root, SENTINELS, (p) => p.split("/").some((part) => SECRET_DIRS.has(part)));
    expect(hits).toEqual([]);

    // Every API answer about the things that used them.
    const answers: string[] = [];
    for (const type of ["tenant", "service", "secret", "deployment"]) {
      answers.push(toJsonString(ListResourcesResponseSchema, await api().listResources({ resourceType: type, pageSize: 500 })));
    }
    answers.push(toJsonString(ListWorkOrdersResponseSchema, await orders().listWorkOrders({ pageSize: 500 })));
    answers.push(toJsonString(ListEventsResponseSchema, await ctl.admin(EventService).listEvents({ pageSize: 1000 })));
    answers.push(toJsonString(ListAuditEntriesResponseSchema, await ctl.admin(AuditService).listAuditEntries({ pageSize: 1000 })));
    const metrics = await fetch(`${ctl.url}/metrics`).then(
      (r) => r.text(),
      () => "",
    );
    answers.push(metrics);
    for (const a of answers) for (const s of SENTINELS) expect(a.includes(s), s).toBe(false);

    // The values are where they are meant to be: the mounted files.
    const secretDir = join(root, "work", "tenants", BY_SERVICES, ".skipper-secrets");
    const held = await Promise.all(
      (await readdir(secretDir)).filter((n) => !n.startsWith(".")).map((n) => readFile(join(secretDir, n), "utf8")),
    );
    expect(held).toEqual([V.cert]);
  }, 120_000);

  it("when the service goes, its secret files go with the project", async () => {
    await api().deleteResource({ resourceType: "service", id: "a-web" });
    const project = join(root, "work", "tenants", BY_SERVICES);
    await waitFor(
      "the project and its secret directories to be removed",
      async () => ((await stat(project).catch(() => undefined)) === undefined ? true : undefined),
      120_000,
    );
    expect(await container(BY_SERVICES)).toBe("");
  }, 180_000);
});

// Enrollment end to end: the controller and skippy as processes, a real Docker engine. skippy
// joins with an enrollment token (its key made on the host, mode 0600), deploys over mutual TLS,
// renews its short-lived certificate while an order runs without dropping it, and is refused on
// its next call once an admin revokes its certificates.
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { X509Certificate } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { rpcError } from "./helpers/errors.js";
import { markReady } from "./helpers/containers.js";
import { filesContaining } from "./helpers/files.js";
import {
  RUN_ID,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! enrollment-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const NODE = "enrolled-host";
const TENANT = `enrolled-shop-${RUN_ID}`;
// Healthy only once the test says so (/tmp/ready), so the order runs until a renewal was seen.
const COMPOSE = `services:
  slow:
    image: skipper-busybox:local
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    healthcheck:
      test: ["CMD", "test", "-f", "/tmp/ready"]
      interval: 1s
      retries: 120
    stop_grace_period: 1s
`;

describe.skipIf(!dockerHost)("enrollment (real processes, real engine, mutual TLS)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  const stateDir = () => join(root, "state");

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-enroll-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
  }, 60_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    if (root) {
      const dir = join(root, "work", "tenants", TENANT);
      await execa(
        "docker-compose",
        ["-p", TENANT, "-f", join(dir, "docker-compose.yml"), "--env-file", join(dir, ".env"), "down", "-t", "1"],
        { env: { DOCKER_HOST: dockerHost! }, reject: false },
      );
      if (!process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
    }
  }, 60_000);

  it("skippy enrolls, deploys over mTLS, renews its certificate mid-order, and is refused once revoked", async () => {
    // Certificates of 12 s: skippy renews about every 8 s.
    const { token } = await ctl.admin(EnrollmentService).createEnrollmentToken({ nodeId: NODE, certificateTtl: { seconds: 12n } });
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token: "",
      stateDir: stateDir(),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      extraArgs: ["--enroll-token", token, "--ready-timeout", "60s"],
    });
    const nodes = ctl.admin(ResourceService);
    await waitFor("the enrolled node's first heartbeat", async () => {
      const n = (await nodes.getResource({ resourceType: "node", id: NODE }).catch(() => undefined))?.resource;
      return n?.currentState?.kind.case === "node" && n.currentState.kind.value.lastHeartbeatAt ? n : undefined;
    });
    const pem = join(stateDir(), "identity", "node.pem");
    expect((await stat(pem)).mode & 0o777).toBe(0o600);
    const keyText = (await readFile(pem, "utf8")).match(/-----BEGIN PRIVATE KEY-----([\s\S]+?)-----END/)![1]!.replace(/\s/g, "");
    // The private key never left the host: not in the controller's data directory or its log.
    expect(await filesContaining(join(root, "data"), keyText.slice(10, 70))).toEqual([]);

    await nodes.createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: TENANT,
        resourceType: "tenant",
        desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE }, compose: { composeFile: COMPOSE } } } },
      }),
    });
    const orders = ctl.admin(WorkOrderService);
    const orderId = (await ctl.admin(DeploymentService).apply({ tenantId: TENANT })).workOrder!.id;
    await waitFor("the deploy to be claimed", async () => {
      const o = (await orders.getWorkOrder({ id: orderId })).workOrder!;
      return o.status === WorkOrderStatus.RUNNING ? o : undefined;
    });
    const firstSerial = new X509Certificate(await readFile(pem, "utf8")).serialNumber;
    // While the order runs (its container not yet healthy), skippy renews over mTLS.
    const events = ctl.admin(EventService);
    await waitFor(
      "a certificate renewal while the order runs",
      async () => ((await events.listEvents({ resourceId: NODE, type: "node_certificate_renewed" })).events.length > 0 ? true : undefined),
      60_000,
    );
    // The agent writes the new certificate once the answer reaches it, just after the event.
    await waitFor(
      "the renewed certificate in the agent's file",
      async () => (new X509Certificate(await readFile(pem, "utf8")).serialNumber !== firstSerial ? true : undefined),
      30_000,
    );
    expect((await orders.getWorkOrder({ id: orderId })).workOrder!.status).toBe(WorkOrderStatus.RUNNING);
    const done = await waitFor(
      "the deploy to finish",
      async () => {
        await makeReady();
        const o = (await orders.getWorkOrder({ id: orderId })).workOrder!;
        return o.status === WorkOrderStatus.SUCCESS || o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      90_000,
    );
    expect([done.status, done.result?.code]).toEqual([WorkOrderStatus.SUCCESS, "APPLY_OK"]);
    expect(done.attempts).toHaveLength(1);

    // Revoked: the agent's very next call with its current certificate is refused.
    const current = await readFile(pem, "utf8");
    const asAgent = createClient(
      NodeService,
      createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca, cert: current, key: current } }),
    );
    await asAgent.heartbeat({ nodeId: NODE });
    const revoked = await ctl.admin(EnrollmentService).revokeNodeCertificates({ nodeId: NODE, reason: "test" });
    expect(revoked.revoked).toBeGreaterThanOrEqual(1);
    const e = await rpcError(asAgent.heartbeat({ nodeId: NODE }));
    expect([e.code, e.message]).toEqual(["UNAUTHORIZED", "the client certificate has been revoked"]);
    // And the token was single-use and bound: it enrolls nothing else.
    const again = await rpcError(
      createClient(
        EnrollmentService,
        createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca } }),
      ).enrollNode({
        enrollmentToken: token,
        nodeId: "another-host",
        csrPem: "x",
      }),
    );
    expect(again.code).toBe("UNAUTHORIZED");
  }, 240_000);

  const makeReady = () => markReady(dockerHost!, TENANT, "slow");
});

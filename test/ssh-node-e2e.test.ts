// SSH nodes end to end: a built controller, a relay agent (skippy --relay, on engine A) and a
// private sshd on loopback whose login reaches engine B (test/helpers/sshd.ts): engine B is the
// SSH node's, reached only through SSH from the relay's side (its DOCKER_HOST is engine A's). A
// tenant placed on the SSH node runs there and is observed there; a container removed behind
// Skipper's back comes back; a node pinned to another host key is refused, with both fingerprints
// on the order and on the node; the relay's credential acts for its SSH nodes and no other.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createControllerClients } from "../agent/controller-client.js";
import { fingerprintOf } from "../agent/relay/ssh-files.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { SshTargetState, type NodeStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res, tenantConverged } from "./helpers/resources.js";
import { SSHD, startSshd, type TestSshd } from "./helpers/sshd.js";

const hostA = process.env.SKIPPER_TEST_DOCKER_HOST;
const hostB = process.env.SKIPPER_TEST_DOCKER_HOST_B;
if (!hostA || !hostB) console.warn("!!! ssh-node-e2e.test.ts SKIPPED: needs two Docker engines (see test/global-setup.ts)");

const IMAGE = "skipper-busybox:local";
const TENANT = `ssh-app-${RUN_ID}`;
const RELAY = "ssh-relay";
const SSH_NODE = "ssh-target";
const BAD_NODE = "ssh-wrong-key";

/** The tenant's containers on engine B: service id -> container id. */
async function containersOnB(): Promise<Record<string, string>> {
  const r = await execa(
    "docker",
    ["ps", "-a", "--filter", `label=dev.skipper.tenant-id=${TENANT}`, "--format", '{{.ID}} {{.Label "dev.skipper.service-id"}}'],
    {
      env: { DOCKER_HOST: hostB! },
    },
  );
  return Object.fromEntries(
    r.stdout
      .split("\n")
      .filter(Boolean)
      .map((l) => l.split(" ").reverse() as [string, string]),
  );
}

describe.skipIf(!hostA || !hostB)("SSH nodes through a relay agent (real sshd, two engines)", () => {
  let sshd: TestSshd | undefined;
  let ctl: ControllerProcess;
  let relay: AgentProcess;
  let relayToken: string;
  let root: string;
  const api = () => ctl.admin(ResourceService);
  const nodeStatus = async (id: string): Promise<NodeStatus | undefined> => {
    const r = (await api().getResource({ resourceType: "node", id })).resource;
    return r?.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
  };
  const sshNode = (id: string, hostKey: string) =>
    res("node", id, {
      case: "node",
      value: {
        displayName: id,
        ssh: {
          address: "127.0.0.1",
          port: sshd!.port,
          user: userInfo().username,
          hostKey,
          keySecret: { secretId: "ssh-key", key: "private" },
          relayNodeId: RELAY,
        },
      },
    });

  beforeAll(async () => {
    sshd = await startSshd(hostB!);
    if (!sshd) return;
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-ssh-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", "2s"] });
    relayToken = (await ctl.admin(NodeService).registerNode({ nodeId: RELAY })).token;
    // The key is the fleet's: a secret of no tenant (a tenant's is refused for a node).
    await api().createResource({
      resourceType: "secret",
      resource: res("secret", "ssh-key", { case: "secret", value: { values: { private: sshd.clientKey } } }),
    });
    await api().createResource({ resourceType: "node", resource: sshNode(SSH_NODE, sshd.hostKey) });
    await api().createResource({ resourceType: "node", resource: sshNode(BAD_NODE, sshd.otherHostKey) });
    relay = startAgentProcess({
      controller: ctl,
      nodeId: RELAY,
      token: relayToken,
      stateDir: join(root, "relay", "state"),
      workDir: join(root, "relay", "work"),
      dockerHost: hostA!,
      extraArgs: ["--relay", "--ready-timeout", "20s"],
    });
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, { case: "tenant", value: { displayName: "App", deploymentPolicy: { targetNodeId: SSH_NODE } } }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", "ssh-worker", {
        case: "service",
        value: { tenantId: TENANT, image: IMAGE, command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"] },
      }),
    });
  }, 120_000);

  afterAll(async () => {
    await relay?.stop();
    await ctl?.stop();
    if (hostB) await removeComposeProject(hostB, TENANT);
    await sshd?.stop();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("deploys a tenant to the SSH node: it runs on the node's engine, observed and reported as the node's", async () => {
    if (!sshd) return console.warn(`!!! SKIPPED: no ${SSHD}`);
    await tenantConverged(api(), TENANT, 120_000);
    expect(Object.keys(await containersOnB())).toEqual(["ssh-worker"]);
    // Not on the relay's own engine.
    const onA = await execa("docker", ["ps", "-aq", "--filter", `label=dev.skipper.tenant-id=${TENANT}`], { env: { DOCKER_HOST: hostA! } });
    expect(onA.stdout.trim()).toBe("");
    const status = await waitFor("the SSH node's observed project", async () => {
      const s = await nodeStatus(SSH_NODE);
      return s?.projects.some((p) => p.tenantId === TENANT && p.services.length > 0) ? s : undefined;
    });
    expect(status.ssh).toMatchObject({
      state: SshTargetState.CONNECTED,
      relayNodeId: RELAY,
      pinnedFingerprint: fingerprintOf(sshd.hostKey),
    });
    expect(status.capabilities?.dockerAvailable).toBe(true);
    expect(status.capabilities?.hostname).toBe("127.0.0.1");
  }, 150_000);

  it("repairs drift on the SSH node: a container removed there behind Skipper's back is brought back", async () => {
    if (!sshd) return;
    const before = (await containersOnB())["ssh-worker"]!;
    await execa("docker", ["rm", "-f", before], { env: { DOCKER_HOST: hostB! } });
    const after = await waitFor(
      "ssh-worker to run again on the SSH node",
      async () => {
        const id = (await containersOnB())["ssh-worker"];
        return id && id !== before ? id : undefined;
      },
      90_000,
    );
    expect(after).not.toBe(before);
    await tenantConverged(api(), TENANT, 60_000);
  }, 120_000);

  it("refuses a host whose key is not the pinned one, naming both fingerprints on the order and on the node", async () => {
    if (!sshd) return;
    const presented = fingerprintOf(sshd.hostKey);
    const pinned = fingerprintOf(sshd.otherHostKey);
    const node = await waitFor("the wrong-key node's status", async () => {
      const s = await nodeStatus(BAD_NODE);
      return s?.ssh?.state === SshTargetState.HOST_KEY_MISMATCH ? s : undefined;
    });
    expect(node.ssh).toMatchObject({ pinnedFingerprint: pinned, presentedFingerprint: presented });
    expect(node.capabilities?.dockerAvailable).toBe(false);
    const orders = ctl.admin(WorkOrderService);
    const created = await orders.createWorkOrder({
      type: WorkOrderType.INSPECT,
      target: { nodeId: BAD_NODE },
      action: { kind: { case: "inspect", value: {} } },
    });
    const done = await waitFor("the inspect order to end", async () => {
      const o = (await orders.getWorkOrder({ id: created.workOrder!.id })).workOrder;
      return o && o.status !== WorkOrderStatus.PENDING && o.status !== WorkOrderStatus.RUNNING ? o : undefined;
    });
    expect(done.result).toMatchObject({ success: false, code: "HOST_KEY_MISMATCH" });
    expect(done.result?.message).toContain(presented);
    expect(done.result?.message).toContain(pinned);
    expect(done.result?.details?.ssh).toMatchObject({
      state: SshTargetState.HOST_KEY_MISMATCH,
      pinnedFingerprint: pinned,
      presentedFingerprint: presented,
    });
  }, 90_000);

  it("the relay's credential acts for its SSH nodes only", async () => {
    if (!sshd) return;
    await ctl.admin(NodeService).registerNode({ nodeId: "ssh-bystander" });
    const base = `${ctl.url.replace(/\/+$/, "").replace(/\/v1$/, "")}/v1`;
    const clients = createControllerClients({ baseUrl: base, credential: { token: relayToken }, caFile: ctl.caFile });
    const forSsh = await clients.relayFor!(SSH_NODE).nodes.getNextWorkOrder({ nodeId: SSH_NODE });
    expect(forSsh.workOrder?.target?.nodeId ?? SSH_NODE).toBe(SSH_NODE);
    for (const other of ["ssh-bystander", "no-such-node"]) {
      const refused = await clients.relayFor!(other)
        .nodes.getNextWorkOrder({ nodeId: other })
        .then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
      expect(refused?.code, other).toBe(Code.PermissionDenied);
    }
    // Without the header, its own credential is its own node only.
    const own = await clients.nodes.getNextWorkOrder({ nodeId: SSH_NODE }).catch((e: unknown) => ConnectError.from(e));
    expect((own as ConnectError).code).toBe(Code.PermissionDenied);
    // The relay's own listing names its SSH nodes.
    expect((await clients.nodes.listRelayTargets({ nodeId: RELAY })).targets.map((t) => t.nodeId).sort()).toEqual(
      [SSH_NODE, BAD_NODE].sort(),
    );
  }, 30_000);
});

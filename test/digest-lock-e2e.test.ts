// The digest lock end to end (issue 35): a private registry on loopback (Debian's docker-registry,
// with a login), the built controller and two skippy agents as processes, each node on its own
// Docker engine. One world, three deploys that matter:
//   - a tag moved in the registry between the first and the second node of a rollout: the second
//     node, which even has the moved tag locally, refuses the spec before `up` (DIGEST_MISMATCH,
//     its containers untouched) and the rollout pauses with both digests; the first node's
//     deployment shows the digest it runs;
//   - a moving tag already on a host is pulled again for a new spec (no stale copy), and when that
//     spec fails its gate, the previous spec comes back from the host's images by its locked
//     digest with the registry stopped.
// Nothing waits a fixed time: every wait is for state the controller or an engine reports.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus, type TargetStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { RolloutNodeState as S, RolloutStatus } from "../gen/skipper/v1/rollout_pb.js";
import { RolloutService } from "../gen/skipper/v1/rollout_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  type AgentProcess,
  type ControllerProcess,
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
} from "./helpers/processes.js";
import { registryInstalled, startRegistry, type TestRegistry, versionImage } from "./helpers/registry.js";
import { res } from "./helpers/resources.js";

const hostA = process.env.SKIPPER_TEST_DOCKER_HOST;
const hostB = process.env.SKIPPER_TEST_DOCKER_HOST_B;
const haveRegistry = await registryInstalled();
const ready = !!hostA && !!hostB && haveRegistry;
if (!ready) console.warn("!!! digest-lock-e2e.test.ts SKIPPED: needs two Docker engines and docker-registry/htpasswd");

const N1 = "dl-n1";
const N2 = "dl-n2";
const hostOf = (nodeId: string) => (nodeId === N1 ? hostA! : hostB!);
const MOVED = `dl-moved-${RUN_ID}`;
const BACK = `dl-back-${RUN_ID}`;
const PASSWORD = `dl-registry-pass-${RUN_ID}`;
const docker = (host: string, ...args: string[]) => execa("docker", args, { env: { DOCKER_HOST: host } });

function composeFile(image: string, healthy = true): string {
  const check = healthy ? "" : `    healthcheck:\n      test: ["CMD", "false"]\n      interval: 1s\n      retries: 1\n`;
  return `services:
  web:
    image: ${image}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $$!; done"]
    environment:
      RELEASE: \${RELEASE}
${check}    stop_grace_period: 1s
`;
}

/** MOVED: on both nodes, a rollout of a canary wave and a gated rest. */
const movedSpec = (image: string, release: string) => ({
  deploymentPolicy: { nodeSelector: { fleet: "dl" } },
  compose: { composeFile: composeFile(image), env: { RELEASE: release } },
  rollout: {
    waves: [
      { name: "canary", nodeSelector: { ring: "canary" } },
      { name: "rest", requirePromote: true },
    ],
  },
});

/** BACK: on node 1 with a health gate. */
const backSpec = (ref: string, release: string, healthy: boolean) => ({
  deploymentPolicy: { targetNodeId: N1 },
  compose: { composeFile: composeFile(ref, healthy), env: { RELEASE: release } },
  safety: { healthGate: { deadline: durationFromMs(4000) } },
});

/** The tenant's running container on the node's engine: its id, image id and RELEASE ("" when none). */
async function running(nodeId: string, tenantId: string): Promise<{ id: string; image: string; release: string }> {
  const host = hostOf(nodeId);
  const id = (await docker(host, "ps", "-q", "--no-trunc", "--filter", `label=com.docker.compose.project=${tenantId}`)).stdout.trim();
  if (id === "" || id.includes("\n")) return { id, image: "", release: "" };
  const out = (await docker(host, "inspect", "--format", "{{.Image}}\n{{range .Config.Env}}{{println .}}{{end}}", id)).stdout;
  return { id, image: out.split("\n")[0]!, release: /^RELEASE=(.*)$/m.exec(out)?.[1] ?? "" };
}

/** The id of the image `ref` names on the engine. */
async function imageId(host: string, ref: string): Promise<string> {
  return (await docker(host, "image", "inspect", "--format", "{{.Id}}", ref)).stdout.trim();
}

describe.skipIf(!ready)("the digest lock (registry, controller and two agents as processes, one engine per node)", () => {
  let ctl: ControllerProcess;
  let registry: TestRegistry;
  let root: string;
  let appRef: string;
  let appDigest: string;
  const agents: AgentProcess[] = [];
  const api = () => ctl.admin(ResourceService);
  const rollouts = () => ctl.admin(RolloutService);

  async function targets(tenantId: string): Promise<TargetStatus[]> {
    const t = (await api().getResource({ resourceType: "tenant", id: tenantId })).resource!;
    return t.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets : [];
  }

  async function setTenant(id: string, value: object, create = false): Promise<void> {
    const resource = res("tenant", id, { case: "tenant", value });
    if (create) await api().createResource({ resourceType: "tenant", resource });
    else await api().updateResource({ resourceType: "tenant", id, desiredState: resource.desiredState });
  }

  async function converged(id: string, nodes: string[], what: string): Promise<TargetStatus[]> {
    return waitFor(
      what,
      async () => {
        const t = await targets(id);
        const ok =
          t.length === nodes.length &&
          t.every((x) => x.appliedHash !== "" && x.appliedHash === x.desiredHash && x.convergence?.status === ConvergenceStatus.CONVERGED);
        return ok ? t : undefined;
      },
      90_000,
    );
  }

  async function deployOrders(tenantId: string): Promise<WorkOrder[]> {
    const list = (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId, pageSize: 200 })).workOrders;
    return list.filter((o) => o.type === WorkOrderType.DEPLOY_SERVICE);
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-digest-"));
    registry = await startRegistry(hostA!, "deployer", PASSWORD);
    // The images the tests push: each a content of its own (one id each).
    const images = { "web-a": "a", "web-b": "b", "app-1": "one", "app-2": "two" };
    await Promise.all(Object.entries(images).map(([name, content]) => versionImage(hostA!, `dl-${name}-${RUN_ID}`, content)));
    appRef = await registry.push(`dl-app-1-${RUN_ID}`, `dl/app-${RUN_ID}:stable`);
    appDigest = await registry.digest(`dl/app-${RUN_ID}`, "stable");
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", "2s"] });
    for (const nodeId of [N1, N2]) {
      const labels = { fleet: "dl", ring: nodeId === N1 ? "canary" : "main" };
      const token = (await ctl.admin(NodeService).registerNode({ nodeId, labels })).token;
      agents.push(
        startAgentProcess({
          controller: ctl,
          nodeId,
          token,
          stateDir: join(root, nodeId, "state"),
          workDir: join(root, nodeId, "work"),
          dockerHost: hostOf(nodeId),
          extraArgs: ["--ready-timeout", "20s"],
          env: { HOME: join(root, nodeId, "home") },
        }),
      );
    }
    // Both tenants (placed nowhere yet) log in to the registry with a secret of their own.
    for (const tenantId of [MOVED, BACK]) {
      await setTenant(tenantId, { deploymentPolicy: { nodeSelector: { fleet: "none" } } }, true);
      await api().createResource({
        resourceType: "secret",
        resource: res("secret", `${tenantId}-login`, {
          case: "secret",
          value: { tenantId, registry: registry.host, values: { username: "deployer", password: PASSWORD } },
        }),
      });
    }
    // v1 of both: MOVED from a local image on both nodes (a first deploy is not a rollout), BACK
    // from the registry's tag on node 1.
    await setTenant(MOVED, movedSpec("skipper-busybox:local", "v1"));
    await setTenant(BACK, backSpec(appRef, "v1", true));
    await Promise.all([converged(MOVED, [N1, N2], "MOVED's v1 on both nodes"), converged(BACK, [N1], "BACK's v1 on node 1")]);
  }, 180_000);

  afterAll(async () => {
    for (const a of agents) await a.stop();
    await ctl?.stop();
    await registry?.stop();
    for (const t of [MOVED, BACK]) for (const n of [N1, N2]) await removeComposeProject(hostOf(n), t);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("a tag moved between the first and the second node of a rollout: the second refuses it before up, the rollout pauses naming both digests", async () => {
    const n2Before = await running(N2, MOVED);
    expect(n2Before.release).toBe("v1");

    const ref = await registry.push(`dl-web-a-${RUN_ID}`, `dl/web-${RUN_ID}:stable`);
    const digestA = await registry.digest(`dl/web-${RUN_ID}`, "stable");

    // v2 names the tag: the canary resolves it (pulls) and its digest becomes the spec's lock.
    await setTenant(MOVED, movedSpec(ref, "v2"));
    const atGate = await waitFor("the canary done and the rest waiting for its promote", async () => {
      const r = (await rollouts().listRollouts({ tenantId: MOVED })).rollouts[0];
      const canary = r?.waves[0]?.nodes[0];
      return r && canary?.state === S.DONE && !r.waves[1]?.startedAt ? r : undefined;
    });
    const n1 = (await targets(MOVED)).find((t) => t.nodeId === N1)!;
    expect(n1.imageDigests).toEqual({ [ref]: digestA });
    // The canary's deployment shows the digest it runs.
    const n1Order = (await deployOrders(MOVED)).find((o) => o.desiredState?.specHash === n1.appliedHash && o.target?.nodeId === N1)!;
    const dep = (await api().getResource({ resourceType: "deployment", id: n1Order.desiredState!.deploymentId })).resource!;
    expect(dep.currentState?.kind.case === "deployment" && dep.currentState.kind.value.imageDigests).toEqual({ [ref]: digestA });

    // The tag moves in the registry, and node 2's host even has the moved image under the tag.
    await registry.push(`dl-web-b-${RUN_ID}`, `dl/web-${RUN_ID}:stable`);
    const digestB = await registry.digest(`dl/web-${RUN_ID}`, "stable");
    expect(digestB).not.toBe(digestA);
    await execa("sh", ["-c", `DOCKER_HOST=${hostA} docker save dl-web-b-${RUN_ID} | DOCKER_HOST=${hostB} docker load -q`]);
    await docker(hostB!, "tag", `dl-web-b-${RUN_ID}`, ref);

    await rollouts().promoteRollout({ id: atGate.id, wave: "rest", reason: "go on" });
    const paused = await waitFor("the rollout to pause", async () => {
      const r = (await rollouts().getRollout({ id: atGate.id })).rollout;
      return r?.status === RolloutStatus.PAUSED ? r : undefined;
    });
    expect(paused.message).toContain(digestA);
    expect(paused.message).toContain(digestB);
    expect(paused.waves[1]?.nodes[0]).toMatchObject({ nodeId: N2, state: S.FAILED });

    // Node 2's order was refused before anything changed, once (DIGEST_MISMATCH is not retried).
    const n2Orders = (await deployOrders(MOVED)).filter((o) => o.target?.nodeId === N2 && o.desiredState?.specHash === n1.appliedHash);
    expect(n2Orders).toHaveLength(1);
    const refused = n2Orders[0]!;
    expect(refused.desiredState?.imageLock?.digests).toEqual({ [ref]: digestA });
    expect(refused.status).toBe(WorkOrderStatus.FAILED);
    expect(refused.result?.code).toBe("DIGEST_MISMATCH");
    expect(refused.result?.message).toContain(`locked to ${digestA}, the registry now serves ${digestB}`);
    expect(refused.result?.details?.imageLock).toEqual({ [ref]: digestB });
    // Its container is the one it ran before, untouched.
    expect(await running(N2, MOVED)).toEqual(n2Before);
  }, 180_000);

  it("a moving tag already on the host is pulled again; a failed gate brings the previous spec back from local images with the registry stopped", async () => {
    const repo = `dl/app-${RUN_ID}`;
    const ref = appRef;
    const v1 = (await targets(BACK))[0]!;
    expect(v1.imageDigests).toEqual({ [ref]: appDigest });
    const image1 = await imageId(hostA!, ref);
    expect((await running(N1, BACK)).image).toBe(image1);

    // The tag moves; the host keeps its old copy under the tag (what Compose alone would run).
    await registry.push(`dl-app-2-${RUN_ID}`, `${repo}:stable`);
    await docker(hostA!, "tag", image1, ref);
    const image2 = await imageId(hostA!, `dl-app-2-${RUN_ID}`);

    // v2 (a healthcheck that never passes) runs the tag as the registry names it now...
    await setTenant(BACK, backSpec(ref, "v2", false));
    const v2 = await waitFor("v2's container on node 1", async () => {
      const c = await running(N1, BACK);
      return c.release === "v2" ? c : undefined;
    });
    expect(v2.image).toBe(image2);
    // ...and the registry is gone before its gate gives up on it.
    await registry.stop();

    const order = await waitFor("v2's order to end", async () => {
      const o = (await deployOrders(BACK)).find((x) => x.result?.code !== undefined && x.result.code !== "" && x.id !== v1.lastWorkOrderId);
      return o;
    });
    expect(order.result?.code).toBe("ROLLED_BACK");
    expect(order.result?.message).not.toMatch(/pull/i);
    const back = await running(N1, BACK);
    expect(back.release).toBe("v1");
    expect(back.image).toBe(image1);
    expect(await imageId(hostA!, ref)).toBe(image1);
  }, 180_000);
});

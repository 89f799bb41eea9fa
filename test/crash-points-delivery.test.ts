// The controller killed by its own promotion crash points (SKIPPER_CRASH_AT), on the file store
// and on PostgreSQL: after a release's verification order is queued and before the status naming
// it is written (promotion.after-verification-order), and after the status with a promotion is
// written and before its tenants are woken (promotion.after-promote). A real agent on the test
// engine deploys the tenant and runs the verification (`true`, on its --allow-command list); the
// image comes from a private registry on loopback. After the restart on the same data the
// promotion completes once: one delivery_promoted, one deploy order for the release, and each
// verification run counted once (the passes equal the check orders that ran, each id once).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { CrashPointName } from "../common/crash-points.js";
import { type EnvironmentStatus, ReleaseOutcome } from "../gen/skipper/v1/delivery_pb.js";
import { DeliveryService } from "../gen/skipper/v1/delivery_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { crashAt, crashOf } from "./helpers/crash.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import {
  type AgentProcess,
  type ControllerProcess,
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  stopProcess,
  waitFor,
} from "./helpers/processes.js";
import { registryInstalled, startRegistry, type TestRegistry, versionImage } from "./helpers/registry.js";
import { res } from "./helpers/resources.js";

const engine = process.env.SKIPPER_TEST_DOCKER_HOST;
const ready = !!engine && (await registryInstalled());
if (!ready)
  console.warn(
    "!!! crash-points-delivery.test.ts SKIPPED: needs a Docker engine and docker-registry/htpasswd (scripts/docker-engine.sh install)",
  );
if (ready && !pgUrl()) console.warn("!!! crash-points-delivery.test.ts: the PostgreSQL cases are SKIPPED (see test/global-setup.ts)");

const REPO = `crash/web-${RUN_ID}`;
const LOCAL_IMAGE = `crd-web-${RUN_ID}:1.0.0`;
const ENV = "crash";
const REQUIRED_PASSES = 2;
const ENDED = new Set([WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED]);

let registry: TestRegistry | undefined;
let digest = "";
let seq = 0;

/** One case's controller (armed, then restarted unarmed on the same data and port) and its agent. */
class Rig {
  ctl: ControllerProcess | undefined;
  agent: AgentProcess | undefined;
  readonly tenant = `crd-${RUN_ID}-${seq}`;
  readonly node = `crd-node-${seq}`;
  private port = 0;
  private constructor(
    readonly root: string,
    private readonly storeArgs: string[],
  ) {}

  static async create(store: "file" | "postgres"): Promise<Rig> {
    seq += 1;
    const root = await mkdtemp(join(tmpdir(), "skipper-crash-delivery-"));
    const args = store === "postgres" ? ["--store", await freshDatabase(`crash_delivery_${RUN_ID}_${process.pid}_${seq}`)] : [];
    return new Rig(root, args);
  }

  async start(point?: CrashPointName) {
    this.ctl = await startControllerProcess({
      dataDir: join(this.root, "data"),
      port: this.port || undefined,
      extraArgs: [...this.storeArgs, "--reconcile-interval", "2s", "--promotion-interval", "1s"],
      env: point ? crashAt(point) : {},
    });
    this.port = Number(new URL(this.ctl.url).port);
    return { ended: crashOf(this.ctl.child) };
  }

  api = () => this.ctl!.admin(ResourceService);

  /** The node's agent: it outlives the controller process (same URL and CA after the restart). */
  async startAgent(): Promise<void> {
    const token = (await this.ctl!.admin(NodeService).registerNode({ nodeId: this.node })).token;
    this.agent = startAgentProcess({
      controller: this.ctl!,
      nodeId: this.node,
      token,
      stateDir: join(this.root, "agent", "state"),
      workDir: join(this.root, "agent", "work"),
      dockerHost: engine!,
      extraArgs: ["--ready-timeout", "30s", "--allow-command", "true"],
      env: { HOME: join(this.root, "agent", "home") },
    });
  }

  /** A tenant on the node whose service runs artifact web; one environment promoting web, verified by `true` run twice. */
  async world(): Promise<void> {
    const create = (type: string, id: string, value: object) =>
      this.api().createResource({ resourceType: type, resource: res(type, id, { case: type, value }) });
    await create("tenant", this.tenant, { deploymentPolicy: { targetNodeId: this.node } });
    await create("secret", `${this.tenant}-registry`, {
      tenantId: this.tenant,
      registry: registry!.host,
      values: { username: registry!.username, password: registry!.password },
    });
    await create("artifact", "web", {
      tenantId: this.tenant,
      source: { case: "image", value: { repository: `${registry!.host}/${REPO}` } },
    });
    await create("service", `${this.tenant}-web`, {
      tenantId: this.tenant,
      artifactId: "web",
      composeService: "web",
      command: ["sleep", "86400"],
    });
    await create("delivery", "shop", { displayName: "Shop" });
    await create("environment", ENV, {
      deliveryId: "shop",
      tenantIds: [this.tenant],
      artifactIds: ["web"],
      verifications: [
        {
          name: "smoke",
          kind: { case: "command", value: { argv: ["true"] } },
          requiredPasses: REQUIRED_PASSES,
          interval: durationFromMs(1000),
        },
      ],
    });
  }

  async status(): Promise<EnvironmentStatus | undefined> {
    const r = (await this.api().getResource({ resourceType: "environment", id: ENV })).resource;
    return r?.currentState?.kind.case === "environment" ? r.currentState.kind.value : undefined;
  }

  async dispose(): Promise<void> {
    await this.agent?.stop();
    if (this.ctl) await stopProcess(this.ctl.child);
    await removeComposeProject(engine!, this.tenant);
    if (!process.env.SKIPPER_KEEP_E2E) await rm(this.root, { recursive: true, force: true });
  }
}

describe.skipIf(!ready)("promotion crash points (real agent and engine, private registry)", () => {
  let rig: Rig | undefined;

  beforeAll(async () => {
    registry = await startRegistry(engine!, "deployer", `crd-pass-${RUN_ID}`);
    // An image of its own (busybox plus a file): pulling skipper-busybox:local itself by digest
    // would leave that digest on the suite's shared image, which other tests read by its id.
    await versionImage(engine!, LOCAL_IMAGE, "crash");
    await registry.push(LOCAL_IMAGE, `${REPO}:1.0.0`);
    digest = await registry.digest(REPO, "1.0.0");
  }, 120_000);

  afterAll(async () => {
    await registry?.stop();
    // The image and what the agent pulled by digest, off the shared engine.
    const refs = [LOCAL_IMAGE, ...(registry && digest ? [`${registry.host}/${REPO}@${digest}`] : [])];
    await execa("docker", ["rmi", "-f", ...refs], { env: { DOCKER_HOST: engine! }, reject: false });
  });

  afterEach(async () => {
    await rig?.dispose();
    rig = undefined;
  }, 60_000);

  for (const store of ["file", "postgres"] as const)
    for (const point of ["promotion.after-verification-order", "promotion.after-promote"] as const)
      it.skipIf(store === "postgres" && !pgUrl())(
        `${point} (${store} store): after the restart the promotion completes once`,
        async () => {
          rig = await Rig.create(store);
          const { ended } = await rig.start(point);
          await rig.startAgent();
          await rig.world();
          // The pass that dies may be the one this post wakes; its answer may be lost then.
          await rig
            .ctl!.admin(DeliveryService)
            .createArtifactVersion({ artifactId: "web", version: "1.0.0", digest })
            .catch(() => undefined);
          expect(await ended).toMatchObject({ signal: "SIGKILL", point });
          await rig.start();
          await completedOnce(rig);
        },
        240_000,
      );
});

/** The environment runs 1.0.0 verified, and every step of its promotion happened once. */
async function completedOnce(r: Rig): Promise<void> {
  const s = await waitFor(
    "the environment to run web 1.0.0 verified",
    async () => {
      const st = await r.status();
      return st?.current?.versions[0]?.digest === digest && !st.inFlight && st.history[0]?.outcome === ReleaseOutcome.VERIFIED
        ? st
        : undefined;
    },
    90_000,
  );
  const releaseId = s.current!.id;
  // Every check order ended (a stray one, queued under another id, would still be running or count below).
  const orders = r.ctl!.admin(WorkOrderService);
  const checks = await waitFor("every check order to end", async () => {
    // A command order is the node's (no tenant on it).
    const os = (await orders.listWorkOrders({ nodeId: r.node, pageSize: 1000 })).workOrders.filter(
      (o) => o.type === WorkOrderType.EXECUTE_COMMAND,
    );
    return os.every((o) => ENDED.has(o.status)) ? os : undefined;
  });
  const events = r.ctl!.admin(EventService);
  const of = async (type: string) => (await events.listEvents({ resourceId: ENV, type, pageSize: 1000 })).events;
  // One promotion.
  expect(await of("delivery_promoted")).toHaveLength(1);
  expect(await of("delivery_release_verified")).toHaveLength(1);
  // One deploy order for the release's spec on the tenant's one node.
  const deploys = (await orders.listWorkOrders({ tenantId: r.tenant, pageSize: 1000 })).workOrders.filter(
    (o) => o.type === WorkOrderType.DEPLOY_SERVICE && o.desiredState?.composeProject?.composeFile.includes(digest),
  );
  expect(deploys.map((o) => o.target?.nodeId)).toEqual([r.node]);
  // Each run counted once: the passes counted equal the check orders queued since the tenant ran
  // the release converged (one queued before — by the killed process, or before a tenant's
  // converged_since moved — is run and not counted, by rule), under the fixed ids 1..n, each run once.
  const passed = await of("delivery_verification_passed");
  expect(passed).toHaveLength(1);
  expect((passed[0]!.data as { passes?: string } | undefined)?.passes).toBe(String(REQUIRED_PASSES));
  const short = releaseId.slice(4, 16);
  const ids = checks.map((o) => o.id).sort((a, b) => Number(a.split("-").pop()) - Number(b.split("-").pop()));
  expect(ids).toEqual(ids.map((_, i) => `vrf-${ENV}-${short}-smoke-${i + 1}`));
  for (const o of checks) {
    expect(o.status, o.id).toBe(WorkOrderStatus.SUCCESS);
    expect(o.attempts, o.id).toHaveLength(1);
  }
  const since = timestampMs(s.history[0]!.runningSince!);
  const counted = checks.filter((o) => timestampMs(o.createdAt!) >= since);
  expect(counted.map((o) => o.id).sort()).toEqual(ids.slice(ids.length - REQUIRED_PASSES).sort());
}

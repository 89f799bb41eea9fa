// Keyed Applies cannot wedge controllers that share PostgreSQL. A keyed Apply holds its
// idempotency key's lock and then takes its tenant's; each used to take a database session of its
// own from a small pool, so with more keyed Applies at once than lock sessions (8 on the default
// pool of 30 connections) every one held a session and waited for a second one, for ever: later
// calls hung, the reconciler stopped, SIGTERM did not end the process and it kept leading.
// Here: two built controllers on the default pool, 64 keyed Applies at once through both, then a
// plain Apply, then SIGTERM ends both.
import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { E2E_ADMIN_TOKEN, RUN_ID, startControllerProcess, stopProcess, type ControllerProcess } from "./helpers/processes.js";

const pg = pgUrl();
if (!pg) console.warn("!!! pg-lock-wedge.test.ts SKIPPED: it needs PostgreSQL (see test/global-setup.ts)");

const TENANTS = ["wedge-a", "wedge-b"];
const APPLIES = 64;

describe.skipIf(!pg)("keyed Applies on controllers sharing PostgreSQL", () => {
  const controllers: ControllerProcess[] = [];

  beforeAll(async () => {
    const root = await mkdtemp(join(tmpdir(), "skipper-wedge-"));
    const store = await freshDatabase(`wedge_${RUN_ID}`);
    for (let i = 0; i < 2; i++) {
      await mkdir(join(root, `c${i}`), { recursive: true });
      controllers.push(await startControllerProcess({ dataDir: join(root, `c${i}`, "data"), extraArgs: ["--store", store] }));
    }
    const api = controllers[0]!.admin(ResourceService);
    await controllers[0]!.admin(NodeService).registerNode({ nodeId: "wedge-node" });
    const compose = ["services:", "  app:", "    image: skipper-busybox:local", ""].join("\n");
    for (const id of TENANTS) {
      await api.createResource({
        resourceType: "tenant",
        resource: {
          id,
          resourceType: "tenant",
          desiredState: {
            kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: "wedge-node" }, compose: { composeFile: compose } } },
          },
        },
      });
    }
  }, 60_000);

  afterAll(async () => {
    await Promise.all(controllers.map((c) => c.stop()));
  });

  // A client whose calls carry an idempotency key of their own.
  const keyed = (c: ControllerProcess, key: string) =>
    createClient(
      DeploymentService,
      createConnectTransport({
        baseUrl: `${c.url}/v1`,
        httpVersion: "2",
        nodeOptions: { ca: c.ca },
        interceptors: [
          (next) => (req) => {
            req.header.set("x-admin-token", E2E_ADMIN_TOKEN);
            req.header.set("x-idempotency-key", key);
            return next(req);
          },
        ],
      }),
    );

  it("64 keyed Applies at once through two controllers on the default pool all end, and the controllers still serve and stop", async () => {
    const results = await Promise.allSettled(
      Array.from({ length: APPLIES }, (_, k) =>
        keyed(controllers[k % 2]!, `wedge-${RUN_ID}-${k}`).apply({ tenantId: TENANTS[k % TENANTS.length]! }, { timeoutMs: 90_000 }),
      ),
    );
    const failed = results.flatMap((r) => (r.status === "rejected" ? [String(r.reason)] : []));
    // Each ends: applied, or refused as busy (UNAVAILABLE, to be retried); none hangs.
    for (const reason of failed) expect(reason).toMatch(/unavailable/i);
    expect(results.filter((r) => r.status === "fulfilled").length).toBeGreaterThan(0);
    // The same keys again replay or apply; nothing is wedged.
    const again = await keyed(controllers[1]!, `wedge-${RUN_ID}-0`).apply({ tenantId: TENANTS[0]! }, { timeoutMs: 30_000 });
    expect(again.workOrder?.id).toBeTruthy();
    const plain = await controllers[0]!.admin(DeploymentService).apply({ tenantId: TENANTS[1]! }, { timeoutMs: 30_000 });
    expect(plain.workOrder?.id).toBeTruthy();
    // SIGTERM ends both (stopProcess kills with SIGKILL after 10 s: the exit must be by SIGTERM).
    for (const c of controllers) {
      await stopProcess(c.child);
      expect(c.child.signalCode).not.toBe("SIGKILL");
    }
  }, 240_000);
});

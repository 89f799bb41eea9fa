// A deploy that fails its health gate restores the last applied spec (agent/executors/deploy-safety.ts)
// with that spec's proxy routes, not the failed spec's: the deploy that switches the traffic stages
// its spec's routes by spec hash (agent/engine/applied-spec.ts), and the record written when the
// spec applies takes them; a record of another spec takes none.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProxyRouteSchema } from "../gen/skipper/v1/proxy_pb.js";
import { WorkOrderSchema, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { readAppliedSpec, stageSpecRoutes, writeAppliedSpec, type AppliedSpec } from "../agent/engine/applied-spec.js";
import { outcome, type DeployContext } from "../agent/executors/deploy-context.js";
import { rollBack } from "../agent/executors/deploy-safety.js";

let workDir: string;
beforeAll(async () => {
  workDir = await mkdtemp(join(tmpdir(), "skipper-rbr-"));
  await mkdir(join(workDir, "tenants", "shop"), { recursive: true });
});
afterAll(async () => {
  if (workDir) await rm(workDir, { recursive: true, force: true });
});

const route = (host: string) => create(ProxyRouteSchema, { host, service: "web", port: 8080 });
const record = (specHash: string): AppliedSpec => ({
  schema_version: "v1",
  tenant_id: "shop",
  project_name: "shop",
  spec_hash: specHash,
  work_order_id: `wo-${specHash}`,
  compose_file: "services:\n  web:\n    image: busybox\n",
  env: {},
  compose_services: {},
  service_ids: [],
  applied_at: new Date().toISOString(),
});

describe("a restore routes as the restored spec did", () => {
  it("the applied record keeps the routes staged for its own spec only", async () => {
    await stageSpecRoutes(workDir, "shop", "h-other", [route("other.example")]);
    await writeAppliedSpec(workDir, record("h-old"));
    expect((await readAppliedSpec(workDir, "shop"))?.routes).toBeUndefined();
    await stageSpecRoutes(workDir, "shop", "h-old", [route("old.example")]);
    await writeAppliedSpec(workDir, record("h-old"));
    expect((await readAppliedSpec(workDir, "shop"))?.routes).toEqual([{ host: "old.example", service: "web", port: 8080 }]);
  });

  it("the failed spec's routes are replaced by the applied spec's", async () => {
    // The failed deploy staged its own routes (it switched the traffic) and never applied.
    await stageSpecRoutes(workDir, "shop", "h-new", [route("new.example")]);
    const order = create(WorkOrderSchema, {
      id: "wo-new",
      type: WorkOrderType.DEPLOY_SERVICE,
      desiredState: {
        tenantId: "shop",
        specHash: "h-new",
        composeProject: { projectName: "shop", composeFile: "services:\n  web:\n    image: busybox:2\n" },
        routes: [route("new.example")],
      },
    });
    const restores: WorkOrder[] = [];
    const ctx: DeployContext = {
      workDir,
      docker: undefined as never,
      composeTimeoutMs: 1000,
      readyTimeoutMs: 1000,
      log: pino({ level: "silent" }),
    };
    const parts = { composePath: "", services: [] };
    const r = await rollBack(order, ctx, {
      failure: "health gate failed",
      parts,
      started: performance.now(),
      redeploy: async (o) => {
        restores.push(o);
        return outcome("APPLY_OK", "restored", performance.now(), parts);
      },
    });
    expect(r.result.code).toBe("ROLLED_BACK");
    expect(restores).toHaveLength(1);
    expect(restores[0]!.desiredState?.specHash).toBe("h-old");
    expect(restores[0]!.desiredState?.routes.map((x) => x.host)).toEqual(["old.example"]);
  });
});

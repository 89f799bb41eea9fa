// Writes a data directory as a controller with a long history leaves it, for bench/restart.ts:
// nodes, tenants (each with a service and a converged target record), deployments, finished
// deploy orders spread over the last `days` days with their events, tenant and system snapshots.
// Records are built as proto JSON, checked by decoding them, and written in the store's own
// encoding at the store's own paths (store-paths.ts); fsync is skipped, as the files are fixtures.
import { randomUUID } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { fromJson, type DescMessage, type JsonObject, type MessageShape } from "@bufbuild/protobuf";
import { EventSchema } from "../gen/skipper/v1/event_pb.js";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { SnapshotSchema } from "../gen/skipper/v1/snapshot_pb.js";
import { WorkOrderSchema } from "../gen/skipper/v1/work_order_pb.js";
import { encodeMessage, encodeSnapshot } from "../controller/store/record-codec.js";
import { StorePaths } from "../controller/store/file/store-paths.js";

export interface HistoryShape {
  resources: number;
  orders: number;
  eventsPerOrder: number;
  days: number;
}

const COMPOSE = `services:
  web:
    image: registry.example.com/shop/web:1.42.0
    ports:
      - "8080:8080"
    environment:
      LOG_LEVEL: info
      DATABASE_HOST: db.internal
    volumes:
      - data:/var/lib/web
volumes:
  data: {}
`;
const WRITE_CONCURRENCY = 64;

/** Writes `shape` into `dataDir` (which should be empty); returns how many files it wrote. */
export async function writeHistory(dataDir: string, shape: HistoryShape, now = Date.now()): Promise<number> {
  const paths = new StorePaths(dataDir);
  let files: Array<[string, string]> = [];
  let written = 0;
  const put = <D extends DescMessage>(path: string, schema: D, json: JsonObject): MessageShape<D> => {
    const msg = fromJson(schema, json);
    files.push([path, encodeMessage(schema, msg)]);
    return msg;
  };
  // Written a batch at a time, so the history is never all in memory.
  const flush = async (atLeast: number) => {
    if (files.length < atLeast) return;
    await writeLimited(files);
    written += files.length;
    files = [];
  };
  const nodes = Math.max(1, Math.round(shape.resources / 100));
  const tenants = Math.max(1, Math.round(shape.resources / 5));
  const deployments = Math.max(0, shape.resources - nodes - 2 * tenants);
  const at = (ms: number) => new Date(ms).toISOString();
  const span = shape.days * 86_400_000;
  let version = 0;
  const meta = (extra: JsonObject = {}): JsonObject => ({ resource_version: String(++version), request_id: randomUUID(), ...extra });

  for (let n = 0; n < nodes; n++) {
    const id = `node-${n}`;
    put(paths.resource("node", id), ResourceSchema, {
      id,
      resource_type: "node",
      schema_version: "v1",
      desired_state: { node: { display_name: id } },
      metadata: meta(),
      created_at: at(now - span),
      updated_at: at(now - span),
    });
  }
  // Orders, oldest first; each tenant's last one is what its target record names.
  const lastOrder = new Map<number, { id: string; node: string; finished: number; hash: string }>();
  for (let i = 0; i < shape.orders; i++) {
    const tenant = i % tenants;
    const node = `node-${tenant % nodes}`;
    const created = now - span + Math.floor((i / shape.orders) * (span - 60_000));
    const id = randomUUID();
    const hash = randomUUID().replaceAll("-", "").repeat(2);
    const corr = randomUUID();
    const tenantId = `tenant-${tenant}`;
    put(paths.workOrder("finished", id), WorkOrderSchema, {
      id,
      resource_type: "work_order",
      schema_version: "v1",
      type: "WORK_ORDER_TYPE_DEPLOY_SERVICE",
      target: { tenant_id: tenantId, node_id: node },
      desired_state: {
        deployment_id: `deploy-${id}`,
        tenant_id: tenantId,
        compose_project: { project_name: tenantId, compose_file: COMPOSE },
        spec_hash: hash,
      },
      status: "WORK_ORDER_STATUS_SUCCESS",
      result: { success: true, code: "APPLY_OK", message: `applied project ${tenantId}: 1 service started` },
      request_id: corr,
      correlation_id: corr,
      created_at: at(created),
      started_at: at(created + 500),
      finished_at: at(created + 4_000),
      metadata: { labels: { deployment_id: `deploy-${id}` }, annotations: { reason: "desired_changed" }, request_id: corr },
      claim: { node_id: node, claimed_at: at(created + 500), lease_expires_at: at(created + 30_500), fencing_token: "1" },
      fencing_token: "1",
      attempts: [{ node_id: node, fencing_token: "1", claimed_at: at(created + 500), ended_at: at(created + 4_000), outcome: "finished" }],
      max_attempts: 3,
    });
    for (const e of orderEvents(id, tenantId, node, hash).slice(0, shape.eventsPerOrder)) {
      const eid = randomUUID();
      const ts = new Date(created + e.afterMs);
      put(paths.event(ts, eid), EventSchema, {
        id: eid,
        schema_version: "v1",
        timestamp: ts.toISOString(),
        tenant_id: tenantId,
        request_id: randomUUID(),
        correlation_id: corr,
        ...e.fields,
      });
    }
    lastOrder.set(tenant, { id, node, finished: created + 4_000, hash });
    // The newest orders keep their deployment (older deployments were pruned with their orders).
    if (i >= shape.orders - deployments) deployment(put, paths, meta, at, `deploy-${id}`, tenantId, node, id, hash, created);
    await flush(5_000);
  }
  const tenantResources: Resource[][] = [];
  for (let t = 0; t < tenants; t++) {
    const last = lastOrder.get(t);
    const node = last?.node ?? `node-${t % nodes}`;
    const tenantId = `tenant-${t}`;
    const desired = { tenant: { deployment_policy: { target_node_id: node }, compose: { compose_file: COMPOSE } } };
    const target = last && {
      node_id: node,
      desired_hash: last.hash,
      applied_hash: last.hash,
      last_work_order_id: last.id,
      last_result_code: "APPLY_OK",
      finished_at: at(last.finished),
      project_name: tenantId,
    };
    const tenant = put(paths.resource("tenant", tenantId), ResourceSchema, {
      id: tenantId,
      resource_type: "tenant",
      schema_version: "v1",
      desired_state: desired,
      current_state: { tenant: { node_id: node, deployment_id: last ? `deploy-${last.id}` : "", targets: target ? [target] : [] } },
      last_applied_state: desired,
      metadata: meta(),
      created_at: at(now - span),
      updated_at: at(last?.finished ?? now - span),
    });
    const service = put(paths.resource("service", `svc-${t}`), ResourceSchema, {
      id: `svc-${t}`,
      resource_type: "service",
      schema_version: "v1",
      desired_state: {
        service: { tenant_id: tenantId, kind: "compose_service", image: "registry.example.com/shop/web:1.42.0", compose_service: "web" },
      },
      metadata: meta(),
      created_at: at(now - span),
      updated_at: at(now - span),
    });
    tenantResources.push([tenant, service]);
  }
  for (const [t, list] of tenantResources.entries()) {
    const snap = fromJson(SnapshotSchema, { snapshot_id: randomUUID(), scope: "tenant", tenant_id: `tenant-${t}`, schema_version: "v1" });
    snap.resources = list;
    files.push([paths.tenantSnapshot(`tenant-${t}`), await encodeSnapshot(snap)]);
  }
  const system = fromJson(SnapshotSchema, { snapshot_id: randomUUID(), scope: "system", schema_version: "v1" });
  system.resources = tenantResources.flat();
  files.push([paths.systemSnapshot(), await encodeSnapshot(system)]);
  await flush(0);
  return written;
}

/**
 * The events one deploy leaves, as a controller records them (up to 9; --events-per-order takes
 * the first n): the tenant's change, the deployment and its order issued, claimed and finished,
 * the node's state report, convergence and the snapshot.
 */
function orderEvents(orderId: string, tenantId: string, node: string, hash: string): Array<{ afterMs: number; fields: JsonObject }> {
  const deploymentId = `deploy-${orderId}`;
  const order = { resource_type: "work_order", resource_id: orderId, work_order_id: orderId, node_id: node, deployment_id: deploymentId };
  const dep = { resource_type: "deployment", resource_id: deploymentId, deployment_id: deploymentId, node_id: node };
  const tenant = { resource_type: "tenant", resource_id: tenantId };
  return [
    { afterMs: -2_000, fields: { type: "desired_state_changed", ...tenant, data: { fields: ["desired_state.tenant.compose"] } } },
    { afterMs: -1, fields: { type: "deployment_started", ...dep, data: { spec_hash: hash } } },
    {
      afterMs: 0,
      fields: { type: "work_order_created", ...order, data: { type: "deploy_service", reason: "desired_changed", spec_hash: hash } },
    },
    { afterMs: 500, fields: { type: "work_order_started", ...order, data: { fencing_token: "1", attempt: 1 } } },
    {
      afterMs: 4_000,
      fields: {
        type: "work_order_succeeded",
        ...order,
        data: { code: "APPLY_OK", message: `applied project ${tenantId}: 1 service started` },
      },
    },
    {
      afterMs: 4_000,
      fields: {
        type: "deployment_succeeded",
        ...dep,
        data: { code: "APPLY_OK", message: `applied project ${tenantId}: 1 service started` },
      },
    },
    { afterMs: 4_100, fields: { type: "resource_state_reported", ...tenant, node_id: node, data: { services: 1, running: 1 } } },
    { afterMs: 4_200, fields: { type: "convergence_changed", ...tenant, data: { from: "converging", to: "converged" } } },
    { afterMs: 4_300, fields: { type: "snapshot_created", ...tenant, data: { scope: "tenant", resources: 2 } } },
  ];
}

function deployment(
  put: <D extends DescMessage>(path: string, schema: D, json: JsonObject) => MessageShape<D>,
  paths: StorePaths,
  meta: (extra?: JsonObject) => JsonObject,
  at: (ms: number) => string,
  id: string,
  tenantId: string,
  node: string,
  orderId: string,
  hash: string,
  created: number,
): void {
  const desired = {
    deployment: {
      tenant_id: tenantId,
      node_id: node,
      compose_project: { project_name: tenantId, compose_file: COMPOSE },
      work_order_id: orderId,
      spec_hash: hash,
    },
  };
  put(paths.resource("deployment", id), ResourceSchema, {
    id,
    resource_type: "deployment",
    schema_version: "v1",
    desired_state: desired,
    current_state: {
      deployment: {
        phase: "DEPLOYMENT_PHASE_SUCCEEDED",
        work_order_id: orderId,
        result_code: "APPLY_OK",
        started_at: at(created),
        finished_at: at(created + 4_000),
      },
    },
    last_applied_state: desired,
    metadata: meta({ labels: { tenant_id: tenantId, node_id: node } }),
    created_at: at(created),
    updated_at: at(created + 4_000),
  });
}

async function writeLimited(files: Array<[string, string]>): Promise<void> {
  const dirs = new Set(files.map(([p]) => dirname(p)));
  for (const d of dirs) await mkdir(d, { recursive: true, mode: 0o700 });
  let next = 0;
  const worker = async () => {
    while (next < files.length) {
      const [path, text] = files[next++]!;
      await writeFile(path, text, { mode: 0o600 });
    }
  };
  await Promise.all(Array.from({ length: WRITE_CONCURRENCY }, worker));
}

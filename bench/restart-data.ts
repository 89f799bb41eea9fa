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
  const out = new HistoryFiles(dataDir);
  const nodes = Math.max(1, Math.round(shape.resources / 100));
  const tenants = Math.max(1, Math.round(shape.resources / 5));
  const deployments = Math.max(0, shape.resources - nodes - 2 * tenants);
  const span = shape.days * 86_400_000;
  const layout: Layout = { nodes, tenants, deployments, now, span };
  writeNodes(out, layout);
  const lastOrder = await writeOrders(out, shape, layout);
  const tenantResources = writeTenants(out, layout, lastOrder);
  for (const [t, list] of tenantResources.entries()) {
    const snap = fromJson(SnapshotSchema, { snapshot_id: randomUUID(), scope: "tenant", tenant_id: `tenant-${t}`, schema_version: "v1" });
    snap.resources = list;
    out.push(out.paths.tenantSnapshot(`tenant-${t}`), await encodeSnapshot(snap));
  }
  const system = fromJson(SnapshotSchema, { snapshot_id: randomUUID(), scope: "system", schema_version: "v1" });
  system.resources = tenantResources.flat();
  out.push(out.paths.systemSnapshot(), await encodeSnapshot(system));
  await out.flush(0);
  return out.written;
}

/** How many of each there are, and the time the history spans (ending `now`, epoch ms). */
interface Layout {
  nodes: number;
  tenants: number;
  deployments: number;
  now: number;
  span: number;
}

/** A tenant's last order: what its target record names. */
interface LastOrder {
  id: string;
  node: string;
  finished: number;
  hash: string;
}

/** The files of the history as they are built, written a batch at a time. */
class HistoryFiles {
  readonly paths: StorePaths;
  /** Files written so far. */
  written = 0;
  private files: Array<[string, string]> = [];
  private version = 0;

  constructor(dataDir: string) {
    this.paths = new StorePaths(dataDir);
  }

  /** Checks `json` by decoding it as `schema`, queues it at `path` in the store's encoding, and returns it. */
  put<D extends DescMessage>(path: string, schema: D, json: JsonObject): MessageShape<D> {
    const msg = fromJson(schema, json);
    this.files.push([path, encodeMessage(schema, msg)]);
    return msg;
  }

  /** Queues a file already encoded. */
  push(path: string, text: string): void {
    this.files.push([path, text]);
  }

  /** Writes the queued files once there are `atLeast` of them, so the history is never all in memory. */
  async flush(atLeast: number): Promise<void> {
    if (this.files.length < atLeast) return;
    await writeLimited(this.files);
    this.written += this.files.length;
    this.files = [];
  }

  /** A resource's metadata, with the next resource version. */
  meta(extra: JsonObject = {}): JsonObject {
    return { resource_version: String(++this.version), request_id: randomUUID(), ...extra };
  }
}

function at(ms: number): string {
  return new Date(ms).toISOString();
}

function writeNodes(out: HistoryFiles, { nodes, now, span }: Layout): void {
  for (let n = 0; n < nodes; n++) {
    const id = `node-${n}`;
    out.put(out.paths.resource("node", id), ResourceSchema, {
      id,
      resource_type: "node",
      schema_version: "v1",
      desired_state: { node: { display_name: id } },
      metadata: out.meta(),
      created_at: at(now - span),
      updated_at: at(now - span),
    });
  }
}

// Orders, oldest first, with their events (and the newest their deployments); returns each
// tenant's last order.
async function writeOrders(out: HistoryFiles, shape: HistoryShape, { nodes, tenants, deployments, now, span }: Layout) {
  const lastOrder = new Map<number, LastOrder>();
  for (let i = 0; i < shape.orders; i++) {
    const tenant = i % tenants;
    const node = `node-${tenant % nodes}`;
    const created = now - span + Math.floor((i / shape.orders) * (span - 60_000));
    const id = randomUUID();
    const hash = randomUUID().replaceAll("-", "").repeat(2);
    const corr = randomUUID();
    const tenantId = `tenant-${tenant}`;
    out.put(out.paths.workOrder("finished", id), WorkOrderSchema, {
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
      out.put(out.paths.event(ts, eid), EventSchema, {
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
    if (i >= shape.orders - deployments) deployment(out, `deploy-${id}`, tenantId, node, id, hash, created);
    await out.flush(5_000);
  }
  return lastOrder;
}

// Each tenant with its service, converged on its last order; returns both, per tenant, for the snapshots.
function writeTenants(out: HistoryFiles, { tenants, nodes, now, span }: Layout, lastOrder: Map<number, LastOrder>): Resource[][] {
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
    const tenant = out.put(out.paths.resource("tenant", tenantId), ResourceSchema, {
      id: tenantId,
      resource_type: "tenant",
      schema_version: "v1",
      desired_state: desired,
      current_state: { tenant: { node_id: node, deployment_id: last ? `deploy-${last.id}` : "", targets: target ? [target] : [] } },
      last_applied_state: desired,
      metadata: out.meta(),
      created_at: at(now - span),
      updated_at: at(last?.finished ?? now - span),
    });
    const service = out.put(out.paths.resource("service", `svc-${t}`), ResourceSchema, {
      id: `svc-${t}`,
      resource_type: "service",
      schema_version: "v1",
      desired_state: {
        service: { tenant_id: tenantId, kind: "compose_service", image: "registry.example.com/shop/web:1.42.0", compose_service: "web" },
      },
      metadata: out.meta(),
      created_at: at(now - span),
      updated_at: at(now - span),
    });
    tenantResources.push([tenant, service]);
  }
  return tenantResources;
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

function deployment(out: HistoryFiles, id: string, tenantId: string, node: string, orderId: string, hash: string, created: number): void {
  const desired = {
    deployment: {
      tenant_id: tenantId,
      node_id: node,
      compose_project: { project_name: tenantId, compose_file: COMPOSE },
      work_order_id: orderId,
      spec_hash: hash,
    },
  };
  out.put(out.paths.resource("deployment", id), ResourceSchema, {
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
    metadata: out.meta({ labels: { tenant_id: tenantId, node_id: node } }),
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

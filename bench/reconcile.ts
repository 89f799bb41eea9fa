// Reconciler benchmark (npm run bench:reconcile). Run on demand; it prints figures.
//
// A controller built in this process on a file store in a temp dir (real TLS, real HTTP/2 for the
// changes), with 100 simulated nodes and 100 tenants of 10 rendered services each (1,000
// services), each tenant placed by label on its own node. Once the initial orders are marked
// successful (as agents would report them), it measures:
//
//   sweep     one full reconcile pass over every tenant of the converged fleet: controller CPU
//             (user + system, this process) and wall time, over --sweeps runs
//   change    UpdateResource of one service's env over HTTP/2 + TLS until the deploy order is in
//             its node's work queue (the store has it), p50/p99 over --changes runs
//
// Options: --sweeps <n> (default 10), --changes <n> (default 200), --services-per-tenant <n> (10),
//          --nodes <n> (100).
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderResultSchema, WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { build, type Controller } from "../controller/server/build.js";
import { serve } from "../controller/server/listener.js";
import { createLogger } from "../common/logging/logger.js";
import { ensureTlsMaterial } from "../controller/tls/tls-material.js";
import { FileStore } from "../controller/store/file/file-store.js";
import type { Store } from "../controller/store/store.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { percentile } from "./measure.js";

const ADMIN = "bench-admin-token-0123456789abcdef";
const { values } = parseArgs({
  options: {
    sweeps: { type: "string", default: "10" },
    changes: { type: "string", default: "200" },
    "services-per-tenant": { type: "string", default: "10" },
    nodes: { type: "string", default: "100" },
  },
});
const SWEEPS = Number(values.sweeps);
const CHANGES = Number(values.changes);
const PER_TENANT = Number(values["services-per-tenant"]);
const NODES = Number(values.nodes);

// Resolves when the reconciler stores a work order for the tenant: the node's queue has it.
const waiting = new Map<string, (o: WorkOrder) => void>();
function observed(store: Store): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === "createWorkOrder") {
        return async (o: WorkOrder) => {
          const stored = await target.createWorkOrder(o);
          waiting.get(o.target?.tenantId ?? "")?.(stored);
          return stored;
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "skipper-bench-reconcile-"));
  const { logger, close: closeLog } = createLogger({ service: "skipper-controller", stdout: false, level: "warn" });
  const store = observed(new FileStore(dir));
  const ctl = await build({ dataDir: dir, logger, adminToken: ADMIN, store, reconcileIntervalMs: 0 });
  const tls = await ensureTlsMaterial({ dataDir: dir });
  const serving = await serve(ctl.handler, { host: "127.0.0.1", port: 0, tls: { cert: tls.cert, key: tls.key } });
  const auth: Interceptor = (next) => (req) => {
    req.header.set("x-admin-token", ADMIN);
    return next(req);
  };
  const ca = await readFile(tls.caFile!, "utf8");
  const transport = createConnectTransport({ baseUrl: `${serving.url}/v1`, httpVersion: "2", nodeOptions: { ca }, interceptors: [auth] });
  const api = createClient(ResourceService, transport);
  const nodes = createClient(NodeService, transport);
  const t0 = performance.now();
  const tenants = NODES;
  await seed(api, nodes, tenants, (token) =>
    createConnectTransport({ baseUrl: `${serving.url}/v1`, httpVersion: "2", nodeOptions: { ca }, interceptors: [bearer(token)] }),
  );
  await ctl.reconciler.idle();
  await finishAll(ctl.store);
  await ctl.reconciler.idle();
  const setupS = (performance.now() - t0) / 1000;
  const pending = (await ctl.store.listWorkOrders({ status: WorkOrderStatus.PENDING, pageSize: 1000 })).items.length;

  const { cpu, wall } = await sweep(ctl);
  const afterSweeps = (await ctl.store.listWorkOrders({ status: WorkOrderStatus.PENDING, pageSize: 1000 })).items.length;

  const { lat, ack } = await change(ctl, api, tenants);
  lat.sort((a, b) => a - b);
  ack.sort((a, b) => a - b);
  cpu.sort((a, b) => a - b);
  wall.sort((a, b) => a - b);
  const figures = {
    nodes: NODES,
    tenants,
    services: tenants * PER_TENANT,
    setup_s: Number(setupS.toFixed(1)),
    sweep_cpu_ms_p50: Number(percentile(cpu, 50).toFixed(1)),
    sweep_cpu_ms_max: Number(cpu.at(-1)!.toFixed(1)),
    sweep_wall_ms_p50: Number(percentile(wall, 50).toFixed(1)),
    orders_issued_by_converged_sweeps: afterSweeps - pending,
    change_to_queue_ms_p50: Number(percentile(lat, 50).toFixed(2)),
    change_to_queue_ms_p99: Number(percentile(lat, 99).toFixed(2)),
    update_ack_ms_p50: Number(percentile(ack, 50).toFixed(2)),
    update_ack_ms_p99: Number(percentile(ack, 99).toFixed(2)),
    changes: lat.length,
  };
  report(figures);
  await serving.close();
  await ctl.close();
  closeLog();
  await rm(dir, { recursive: true, force: true });
}

// Registers the nodes, then creates each tenant (placed on its own node by label) with its services.
async function seed(
  api: Client<typeof ResourceService>,
  nodes: Client<typeof NodeService>,
  tenants: number,
  transportOf: (token: string) => Transport,
): Promise<void> {
  for (let n = 0; n < NODES; n++)
    tokens.set(`node-${n}`, (await nodes.registerNode({ nodeId: `node-${n}`, labels: { slot: String(n) } })).token);
  agentTransport = transportOf;
  for (let t = 0; t < tenants; t++) {
    const tenant = `tenant-${t}`;
    await api.createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: tenant,
        resourceType: "tenant",
        desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { nodeSelector: { slot: String(t) } } } } },
      }),
    });
    for (let s = 0; s < PER_TENANT; s++) {
      await api.createResource({ resourceType: "service", resource: service(tenant, s, "1") });
    }
  }
}

// Full sweeps over the converged fleet: CPU and wall time of each, in ms.
async function sweep(ctl: Controller): Promise<{ cpu: number[]; wall: number[] }> {
  const cpu: number[] = [];
  const wall: number[] = [];
  for (let i = 0; i < SWEEPS; i++) {
    const c0 = process.cpuUsage();
    const w0 = performance.now();
    ctl.reconciler.queue.addAll();
    await ctl.reconciler.idle();
    wall.push(performance.now() - w0);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
  }
  return { cpu, wall };
}

// Single changes, one at a time: the time until the order is queued, and until the update is acknowledged, in ms.
async function change(ctl: Controller, api: Client<typeof ResourceService>, tenants: number): Promise<{ lat: number[]; ack: number[] }> {
  const lat: number[] = [];
  const ack: number[] = [];
  for (let i = 0; i < CHANGES; i++) {
    const t = i % tenants;
    const tenant = `tenant-${t}`;
    const got = new Promise<WorkOrder>((resolve) => waiting.set(tenant, resolve));
    const start = performance.now();
    await api.updateResource({
      resourceType: "service",
      id: `${tenant}-svc-${i % PER_TENANT}`,
      desiredState: service(tenant, i % PER_TENANT, `v${i + 2}`).desiredState,
    });
    ack.push(performance.now() - start);
    const order = await got;
    lat.push(performance.now() - start);
    waiting.delete(tenant);
    await ctl.reconciler.idle();
    await finish(order);
    // A single change: the next one starts on a quiet controller.
    await ctl.reconciler.idle();
  }
  return { lat, ack };
}

/** Prints the figures as a table, then as one line of JSON. */
function report(figures: Record<string, number>): void {
  console.log(
    `reconcile benchmark: ${figures.services} services, ${figures.tenants} tenants on ${figures.nodes} nodes (file store, setup ${figures.setup_s} s)`,
  );
  console.log(`| measure | value | target |`);
  console.log(`|---|---|---|`);
  console.log(`| full sweep, controller CPU p50 / max | ${figures.sweep_cpu_ms_p50} / ${figures.sweep_cpu_ms_max} ms | < 1000 ms |`);
  console.log(`| full sweep, wall p50 | ${figures.sweep_wall_ms_p50} ms | |`);
  console.log(`| orders issued by sweeps of a converged fleet | ${figures.orders_issued_by_converged_sweeps} | 0 |`);
  console.log(
    `| change -> node queue p50 / p99 | ${figures.change_to_queue_ms_p50} / ${figures.change_to_queue_ms_p99} ms | p99 < 50 ms |`,
  );
  console.log(`| of which UpdateResource acknowledged p50 / p99 | ${figures.update_ack_ms_p50} / ${figures.update_ack_ms_p99} ms | |`);
  console.log(JSON.stringify(figures));
}

function service(tenant: string, s: number, version: string): Resource {
  return create(ResourceSchema, {
    id: `${tenant}-svc-${s}`,
    resourceType: "service",
    desiredState: {
      kind: {
        case: "service",
        value: { tenantId: tenant, image: "busybox:stable", command: ["sleep", "3600"], env: { VERSION: version } },
      },
    },
  });
}

// Plays every node's agent through the API: claims and reports each pending order as a success.
async function finishAll(store: Store): Promise<void> {
  for (;;) {
    const page = await store.listWorkOrders({ status: WorkOrderStatus.PENDING, pageSize: 1000 });
    if (page.items.length === 0) return;
    for (const o of page.items) await finish(o);
  }
}

const tokens = new Map<string, string>();
const agents = new Map<string, Client<typeof WorkOrderService>>();
let agentTransport: (token: string) => Transport;

async function finish(o: WorkOrder): Promise<void> {
  const node = o.target!.nodeId;
  let client = agents.get(node);
  if (!client) agents.set(node, (client = createClient(WorkOrderService, agentTransport(tokens.get(node)!))));
  await client.claimWorkOrder({ id: o.id });
  await client.reportWorkOrderResult({
    id: o.id,
    result: create(WorkOrderResultSchema, { success: true, code: "APPLY_OK", message: "bench" }),
  });
}

function bearer(token: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

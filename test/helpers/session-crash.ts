// For the session crash-point tests (crash-points-session.test.ts): a controller process on the
// file store or on PostgreSQL, started (armed or not) and restarted on the same data where its
// node expects it; a tenant whose deploy orders go to one node; and a scripted agent on the
// node's Session stream that keeps its own journal in memory (what it was pushed, acked, reported)
// and outlives the controller process, as a real agent would.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { NodeService, SessionAnswerSubject, type SessionAnswer, type SessionResponse } from "../../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import type { CrashPointName } from "../../common/crash-points.js";
import { crashAt, crashOf, type Ended } from "./crash.js";
import { freshDatabase } from "./postgres.js";
import { RUN_ID, startControllerProcess, stopProcess, waitFor, type ControllerProcess } from "./processes.js";
import { openSession, type TestSession } from "./session-client.js";

export type StoreKind = "file" | "postgres";

/** The result every scripted run reports. */
export const OK = { success: true, code: "APPLY_OK", message: "session crash point test" };

let dbSeq = 0;

/** One controller's data (a data dir, and a database on PostgreSQL) and the process running on it. */
export class CrashRig {
  ctl: ControllerProcess | undefined;
  private port = 0;
  private constructor(
    readonly root: string,
    readonly dataDir: string,
    private readonly args: string[],
  ) {}

  /** A fresh data dir (and database), nothing started. */
  static async create(store: StoreKind): Promise<CrashRig> {
    const root = await mkdtemp(join(tmpdir(), "skipper-crash-session-"));
    const args = store === "postgres" ? ["--store", await freshDatabase(`crash_session_${RUN_ID}_${process.pid}_${dbSeq++}`)] : [];
    return new CrashRig(root, join(root, "data"), args);
  }

  /** Starts the controller (armed at `point` if given; `leaseMs` as its lease); `ended` says how it ends. */
  async start(opts: { point?: CrashPointName; leaseMs?: number } = {}): Promise<{ ended: Promise<Ended> }> {
    const lease = opts.leaseMs ? ["--lease-duration", `${opts.leaseMs}ms`] : [];
    this.ctl = await startControllerProcess({
      dataDir: this.dataDir,
      port: this.port || undefined,
      extraArgs: [...this.args, ...lease],
      env: opts.point ? crashAt(opts.point) : {},
    });
    this.port = Number(new URL(this.ctl.url).port);
    // Wrapped: an async function returning the bare promise would wait for the process to end.
    return { ended: crashOf(this.ctl.child) };
  }

  /** Stops the process (if alive) and removes the data dir. */
  async dispose(): Promise<void> {
    if (this.ctl) await stopProcess(this.ctl.child);
    this.ctl = undefined;
    await rm(this.root, { recursive: true, force: true });
  }

  admin() {
    const c = this.ctl!;
    return {
      resources: c.admin(ResourceService),
      orders: c.admin(WorkOrderService),
      events: c.admin(EventService),
      nodes: c.admin(NodeService),
    };
  }

  /** Registers `nodeId` and returns its token and clients with it (they outlive the process: same URL and CA). */
  async node(nodeId: string) {
    const token = (await this.admin().nodes.registerNode({ nodeId })).token;
    const auth: Interceptor = (next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req));
    const transport = createConnectTransport({
      baseUrl: `${this.ctl!.url}/v1`,
      httpVersion: "2",
      nodeOptions: { ca: this.ctl!.ca },
      interceptors: [auth],
    });
    return { token, session: createClient(NodeService, transport), orders: createClient(WorkOrderService, transport) };
  }

  /** A tenant whose deploys go to `nodeId`. */
  async tenant(id: string, nodeId: string): Promise<void> {
    await this.admin().resources.createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id,
        resourceType: "tenant",
        desiredState: {
          kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: nodeId }, compose: { composeFile: "services: {}\n" } } },
        },
      }),
    });
  }

  async order(id: string): Promise<WorkOrder> {
    return (await this.admin().orders.getWorkOrder({ id })).workOrder!;
  }

  /** How many events of `type` the order has. */
  async count(workOrderId: string, type: string): Promise<number> {
    return (await this.admin().events.listEvents({ workOrderId, type, pageSize: 1000 })).events.length;
  }

  async deployments(tenantId: string): Promise<Resource[]> {
    return (await this.admin().resources.listResources({ resourceType: "deployment", tenantId, pageSize: 1000 })).resources;
  }

  async tenantRecord(tenantId: string): Promise<Resource | undefined> {
    return (await this.admin().resources.getResource({ resourceType: "tenant", id: tenantId })).resource;
  }

  /** Polls the order until `ok` holds (observed progress, bounded by waitFor's deadline). */
  orderWhen(id: string, what: string, ok: (o: WorkOrder) => boolean): Promise<WorkOrder> {
    return waitFor(what, async () => {
      const o = await this.order(id);
      return ok(o) ? o : undefined;
    });
  }
}

/** What the scripted agent wrote down about one order. */
export interface JournalEntry {
  order: WorkOrder;
  token: bigint;
  acked: boolean;
  reported: boolean;
}

type NodeClients = Awaited<ReturnType<CrashRig["node"]>>;

/** A node on its Session stream, scripted by the test, with a journal that survives its sessions. */
export class ScriptedAgent {
  readonly journal = new Map<string, JournalEntry>();
  s: TestSession | undefined;

  constructor(
    readonly nodeId: string,
    readonly clients: NodeClients,
  ) {}

  /** Opens a session with a hello naming the journal's orders, and waits for the welcome. */
  async connect(): Promise<TestSession> {
    const s = openSession(this.clients.session, 30_000);
    s.send({ case: "hello", value: { nodeId: this.nodeId, agentVersion: "test", journalWorkOrderIds: [...this.journal.keys()] } });
    await s.next("the welcome", (m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
    this.s = s;
    return s;
  }

  /** Waits for a pushed order (any, or `id`) from `from` on, and journals it. */
  async pushed(id?: string, from = 0): Promise<JournalEntry> {
    const o = await this.s!.next(
      `an order pushed${id ? ` (${id})` : ""}`,
      (m: SessionResponse) => (m.kind.case === "order" && (!id || m.kind.value.workOrder?.id === id) ? m.kind.value.workOrder : undefined),
      from,
    );
    const entry = { order: o, token: o.claim!.fencingToken, acked: false, reported: false };
    this.journal.set(o.id, entry);
    return entry;
  }

  /** Sends a request about `id` and returns a promise of its answer (it never comes if the controller dies). */
  ask(subject: SessionAnswerSubject, id: string, token: bigint): Promise<SessionAnswer> {
    const s = this.s!;
    const from = s.received.length;
    const value = { workOrderId: id, fencingToken: token };
    if (subject === SessionAnswerSubject.ACK) s.send({ case: "ack", value });
    else if (subject === SessionAnswerSubject.LEASE_RENEWAL) s.send({ case: "leaseRenewal", value });
    else s.send({ case: "result", value: { ...value, result: OK } });
    if (subject === SessionAnswerSubject.ACK) this.journal.get(id)!.acked = true;
    if (subject === SessionAnswerSubject.RESULT) this.journal.get(id)!.reported = true;
    return s.next(
      `the ${SessionAnswerSubject[subject]} answered`,
      (m) => (m.kind.case === "answer" && m.kind.value.subject === subject && m.kind.value.workOrderId === id ? m.kind.value : undefined),
      from,
    );
  }

  /** Cuts the stream as a killed agent process would (no clean close). */
  async kill(): Promise<void> {
    this.s?.abort();
    await this.s?.ended();
    this.s = undefined;
  }

  /** Ends the session cleanly. */
  async close(): Promise<void> {
    this.s?.close();
    await this.s?.ended();
    this.s = undefined;
  }
}

/** True once `o` is running under a claim newer than `token`, or pending again. */
export const leftToken = (token: bigint) => (o: WorkOrder) =>
  o.status === WorkOrderStatus.PENDING || (o.status === WorkOrderStatus.RUNNING && (o.claim?.fencingToken ?? 0n) > token);

// What one controller tells the others that share its store (store/coordination.ts), so that
// any of them can serve any call:
// - "reconcile": a trigger (reconcile/triggers.ts) raised where the leader does not run goes to
//   the leader's queue; the leader alone runs passes, so two passes of one tenant never race.
// - "order": an order that became pending reaches the watch streams its node holds on any of them.
// - "heartbeat": beats received anywhere reach every liveness view (the leader judges from them).
// - "session": agent sessions opening and ending anywhere reach every liveness view, and a session
//   opened elsewhere replaces the node's older one here; "presence":
//   each controller says every second that it is there (one that stops has lost its sessions);
//   "session-sync": a controller heard from for the first time (or again, after it lapsed) is
//   asked for the sessions it holds, and answers on "session".
// - "credential": a credential that ended or changed anywhere reaches the streams it opened on
//   any controller (auth/credential-ends.ts), which then ask the store whether it still holds.
// Messages are batched (what one turn of the event loop raised; heartbeats over HEARTBEAT_BATCH_MS,
// a node's latest beat only) and are best effort: a lost one costs latency (agents poll, the leader sweeps every tenant),
// never correctness, since the store is the truth.
import { parseTraceparent } from "../../common/trace-context.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import { create } from "@bufbuild/protobuf";
import { ActorSchema } from "../../gen/skipper/v1/access_pb.js";
import type { OrderFeed } from "../dispatch/order-feed.js";
import type { CredentialEnds } from "../auth/credential-ends.js";
import type { PromotionQueue } from "../promotion/promotion-triggers.js";
import type { ReconcileQueue } from "../reconcile/triggers.js";
import type { Coordination } from "../store/coordination.js";
import { MAX_MESSAGE_BYTES } from "../store/postgres/pg-coordination.js";
import type { WorkOrderStore } from "../store/store.js";
import type { LivenessView, SessionChange } from "../nodes/liveness-view.js";
import { PRESENCE_MS } from "../nodes/liveness-view.js";
import type { AgentSessions, SessionOnController } from "../dispatch/agent-session.js";

// Heartbeats wait this long to share a message: thousands arrive each second, and liveness is
// judged in seconds.
const HEARTBEAT_BATCH_MS = 100;

// What the envelope around a batch adds (pg-coordination.ts: {"from":...,"topic":...,"message":...}).
const ENVELOPE_BYTES = 256;

// An item's bytes inside the envelope: the batch travels as a JSON string within JSON, so every
// quote and backslash of it is escaped (a batch of small objects nearly doubles).
function enveloped(item: unknown): number {
  return Buffer.byteLength(JSON.stringify(JSON.stringify(item))) - 2 + 1;
}

/**
 * Sends batches of items on one topic, each message under the size limit. With `keyOf`, an item
 * replaces the waiting item of the same key (heartbeats: only a node's latest beat matters), so a
 * batch is bounded by the fleet, not by the beat rate.
 */
class Batcher<T> {
  private items = new Map<unknown, T>();
  private seq = 0;
  private pending = false;

  /** `delayMs` 0: the batch goes once the current turn of the event loop is done. */
  constructor(
    private readonly coordination: Coordination,
    private readonly topic: string,
    private readonly delayMs = 0,
    private readonly keyOf?: (item: T) => unknown,
  ) {}

  push(item: T): void {
    this.items.set(this.keyOf ? this.keyOf(item) : this.seq++, item);
    if (this.pending) return;
    this.pending = true;
    if (this.delayMs === 0) setImmediate(() => this.flush());
    else setTimeout(() => this.flush(), this.delayMs).unref();
  }

  flush(): void {
    this.pending = false;
    let batch: T[] = [];
    let bytes = ENVELOPE_BYTES;
    for (const item of this.items.values()) {
      const size = enveloped(item);
      if (bytes + size > MAX_MESSAGE_BYTES && batch.length > 0) {
        this.send(batch);
        batch = [];
        bytes = ENVELOPE_BYTES;
      }
      batch.push(item);
      bytes += size;
    }
    if (batch.length > 0) this.send(batch);
    this.items = new Map();
  }

  // Messages are best effort (the top of this file): one that still cannot go (an item too big on
  // its own) is dropped, never thrown out of a timer, where it would end the process.
  private send(batch: T[]): void {
    try {
      this.coordination.broadcast(this.topic, JSON.stringify(batch));
    } catch {
      // dropped: the store is the truth, and agents poll
    }
  }
}

type Wake = { tenant: string; paced?: boolean; trace?: Trace } | { all: true };

/**
 * The reconcile queue as the services see it: the local one while this controller leads, the
 * leader's (through messages) otherwise. Messages that reach the leader go into its queue. While
 * a new leader is still taking over (`running` false: it replays what the old one left), triggers
 * are dropped: the sweep that starts its loop covers every tenant.
 */
export function leaderQueue(coordination: Coordination, local: ReconcileQueue, running: () => boolean = () => true): ReconcileQueue {
  const out = new Batcher<Wake>(coordination, "reconcile");
  const here = () => coordination.leading && running();
  coordination.subscribe("reconcile", (message) => {
    if (!here()) return;
    for (const w of parseList<Wake>(message)) {
      if ("all" in w) local.addAll();
      else if (typeof w.tenant !== "string") continue;
      else if (w.paced) local.addPaced(w.tenant, traceFrom(w.trace));
      else local.add(w.tenant, traceFrom(w.trace));
    }
  });
  const send = (wake: Wake, locally: () => void) => {
    if (!coordination.leading) out.push(wake);
    else if (running()) locally();
  };
  return {
    add: (tenant, trace) => send({ tenant, trace }, () => local.add(tenant, trace)),
    addPaced: (tenant, trace) => send({ tenant, paced: true, trace }, () => local.addPaced(tenant, trace)),
    addAll: () => send({ all: true }, () => local.addAll()),
  };
}

/**
 * The promotion loop's queue as the services see it: the leader's own while its loop runs here,
 * else a message to the leader (an operator's decision on a follower wakes the leader's loop at
 * once instead of at its next sweep). Wakes are coalesced into "every environment": they are few.
 */
export function leaderPromotionQueue(
  coordination: Coordination,
  local: () => PromotionQueue | undefined,
  running: () => boolean,
): () => PromotionQueue | undefined {
  const out = new Batcher<true>(coordination, "promotion", 0, () => "all");
  coordination.subscribe("promotion", () => {
    if (coordination.leading && running()) local()?.addAll();
  });
  const remote: PromotionQueue = { add: () => out.push(true), addAll: () => out.push(true) };
  return () => (coordination.leading ? (running() ? local() : undefined) : remote);
}

/** A trace as another controller sent it (JSON), rebuilt from its known fields. */
function traceFrom(t: unknown): Trace | undefined {
  if (typeof t !== "object" || t === null) return undefined;
  const { requestId, correlationId, traceparent: tp, actor } = t as Record<string, unknown>;
  if (typeof requestId !== "string" || typeof correlationId !== "string") return undefined;
  const traceparent = typeof tp === "string" && parseTraceparent(tp) ? tp : undefined;
  if (typeof actor !== "object" || actor === null) return { requestId, correlationId, traceparent };
  const a = actor as Record<string, unknown>;
  const text = (v: unknown) => (typeof v === "string" ? v : "");
  const num = (v: unknown) => (typeof v === "number" && Number.isInteger(v) ? v : 0);
  return {
    requestId,
    correlationId,
    traceparent,
    actor: create(ActorSchema, { kind: num(a.kind), id: text(a.id), name: text(a.name), role: num(a.role) }),
  };
}

/** Relays the feed's notices to the other controllers, and theirs to the watches held here. */
export function relayOrders(coordination: Coordination, feed: OrderFeed, store: WorkOrderStore): void {
  const out = new Batcher<{ id: string; node: string }>(coordination, "order");
  feed.relay = (o: WorkOrder) => out.push({ id: o.id, node: o.target?.nodeId ?? "" });
  coordination.subscribe("order", (message) => {
    for (const n of parseList<{ id: string; node: string }>(message)) {
      // Read only for a node that watches here: the notice carries ids, the store the order.
      // A pool order held by no node ("") is for every watch here (order-feed.ts deliver).
      if (typeof n.id !== "string" || !(n.node === "" ? feed.watchers > 0 : feed.watching(n.node))) continue;
      store.getWorkOrder(n.id).then(
        (o) => o && feed.deliver(o),
        () => undefined, // the agent's poll finds it
      );
    }
  });
}

/** Relays credential changes made here to the others' streams, and theirs to the streams held here. */
export function relayCredentialEnds(coordination: Coordination, ends: CredentialEnds): void {
  const out = new Batcher<{ key: string }>(coordination, "credential");
  ends.relayTo((key) => out.push({ key }));
  coordination.subscribe("credential", (message) => {
    for (const n of parseList<{ key: string }>(message)) if (typeof n.key === "string") ends.deliver(n.key);
  });
}

/** Relays heartbeats seen here to the others' liveness views, and theirs to `seen`. */
export function relayHeartbeats(
  coordination: Coordination,
  seen: (nodeId: string, at: Date, intervalMs: number, written?: boolean) => void,
): (nodeId: string, at: Date, intervalMs: number, written?: boolean) => void {
  const out = new Batcher<[string, number, number]>(coordination, "heartbeat", HEARTBEAT_BATCH_MS, (beat) => beat[0]);
  coordination.subscribe("heartbeat", (message) => {
    for (const b of parseList<[string, number, number]>(message)) {
      if (Array.isArray(b) && typeof b[0] === "string" && Number.isFinite(b[1]) && Number.isFinite(b[2])) seen(b[0], new Date(b[1]), b[2]);
    }
  });
  return (nodeId, at, intervalMs, written) => {
    seen(nodeId, at, intervalMs, written);
    out.push([nodeId, at.getTime(), intervalMs]);
  };
}

// A session change as it travels: [node, controller, session, open (1) or ended (0), at ms, interval ms].
type SessionItem = [string, string, string, number, number, number];

function sessionItem(c: SessionChange): SessionItem {
  return [c.nodeId, c.controller, c.session, c.open ? 1 : 0, c.at.getTime(), c.intervalMs];
}

function sessionChange(i: unknown): SessionChange | undefined {
  if (!Array.isArray(i) || i.length !== 6) return undefined;
  const [nodeId, controller, session, open, at, intervalMs] = i as unknown[];
  if (typeof nodeId !== "string" || typeof controller !== "string" || typeof session !== "string") return undefined;
  if (!Number.isFinite(at) || !Number.isFinite(intervalMs)) return undefined;
  return { nodeId, controller, session, open: open === 1, at: new Date(at as number), intervalMs: intervalMs as number };
}

/**
 * Sessions and presence: the sessions opened and ended here go to `view` and to the other
 * controllers' views, theirs come to `view`; this controller says it is there every PRESENCE_MS.
 * Returns what the sessions of this controller call, and a stop for the presence timer.
 */
export function relaySessions(
  coordination: Coordination,
  view: () => LivenessView | undefined,
  sessions?: Pick<AgentSessions, "openedElsewhere">,
): { onSession: (c: SessionOnController) => void; stop: () => void } {
  const self = coordination.controllerId;
  const out = new Batcher<SessionItem>(coordination, "session", 0, (i) => `${i[0]}/${i[2]}`);
  coordination.subscribe("session", (message) => {
    for (const item of parseList<unknown[]>(message)) {
      const c = sessionChange(item);
      if (!c || c.controller === self) continue;
      view()?.session(c);
      if (c.open) sessions?.openedElsewhere(c.nodeId, c.session, c.controller, c.at);
    }
  });
  coordination.subscribe("presence", (message) => {
    for (const p of parseList<{ c: string }>(message)) {
      if (typeof p.c !== "string" || p.c === self) continue;
      const v = view();
      if (!v) continue;
      // Heard for the first time, or again after it lapsed: it may hold sessions this view lacks.
      const known = v.alive(p.c);
      v.present(p.c, new Date());
      if (!known) coordination.broadcast("session-sync", JSON.stringify([{ c: p.c }]));
    }
  });
  coordination.subscribe("session-sync", (message) => {
    if (!parseList<{ c: string }>(message).some((r) => r.c === self)) return;
    for (const c of view()?.heldHere() ?? []) out.push(sessionItem(c));
  });
  const presence = setInterval(() => {
    try {
      coordination.broadcast("presence", JSON.stringify([{ c: self }]));
    } catch {
      // best effort, as every message (the top of this file)
    }
  }, PRESENCE_MS);
  presence.unref();
  return {
    onSession: (c) => {
      const change = { ...c, controller: self };
      view()?.session(change);
      out.push(sessionItem(change));
    },
    stop: () => clearInterval(presence),
  };
}

function parseList<T>(message: string): T[] {
  try {
    const v: unknown = JSON.parse(message);
    return Array.isArray(v) ? (v.filter((x) => typeof x === "object" && x !== null) as T[]) : [];
  } catch {
    return [];
  }
}

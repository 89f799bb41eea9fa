// Controllers sharing a PostgreSQL database, in process: leadership through the advisory lock,
// and the relays of controller/server/cluster.ts (reconcile triggers to the leader, order notices to the
// node's watches, heartbeats to every liveness view) over real LISTEN/NOTIFY.
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import type { WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { leaderPromotionQueue, leaderQueue, relayHeartbeats, relayOrders } from "../controller/server/cluster.js";
import { OrderFeed } from "../controller/dispatch/order-feed.js";
import type { ReconcileQueue } from "../controller/reconcile/triggers.js";
import { PgCoordination } from "../controller/store/postgres/pg-coordination.js";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { order } from "./store-conformance.js";

const url = pgUrl();
let n = 0;
const opened: Array<{ close(): Promise<void> }> = [];

afterEach(async () => {
  await Promise.all(opened.splice(0).map((c) => c.close()));
});

/** A controller's coordination; `leading` resolves once it leads, `changes` records every change. */
async function member(db: string, id: string, options: { lockSessions?: number; lockWaitMs?: number; stepDownAfter?: number } = {}) {
  const c = new PgCoordination(db, { controllerId: id, pollMs: 100, ...options });
  opened.push(c);
  const changes: boolean[] = [];
  let onLead: () => void = () => undefined;
  const leading = new Promise<void>((r) => {
    onLead = r;
  });
  await c.start((l) => {
    changes.push(l);
    if (l) onLead();
  });
  return { c, changes, leading };
}

/** Resolves with the next value `register` hands to its callback. */
function next<T>(register: (fn: (v: T) => void) => void): Promise<T> {
  return new Promise((resolve) => register(resolve));
}

describe.skipIf(!url)("controllers sharing a PostgreSQL database", () => {
  it("exactly one leads; when its session ends another takes over", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a");
    await a.leading;
    const b = await member(db, "b");
    expect(a.c.leading).toBe(true);
    expect(b.c.leading).toBe(false);
    await a.c.close();
    await b.leading;
    expect(b.c.leading).toBe(true);
    expect(b.changes).toEqual([true]);
  });

  it("an exclusive section of a key waits for the same key's section on another controller, not for other keys", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a");
    const b = await member(db, "b");
    const ran: string[] = [];
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => {
      release = r;
    });
    let entered: () => void = () => undefined;
    const inside = new Promise<void>((r) => {
      entered = r;
    });
    const first = a.c.exclusive("targets:t1", async () => {
      entered();
      await held;
      ran.push("a");
    });
    await inside;
    const second = b.c.exclusive("targets:t1", async () => {
      ran.push("b");
    });
    // Another key is not held up.
    await b.c.exclusive("targets:t2", async () => {
      ran.push("other key");
    });
    // b's session is seen waiting for the advisory lock before a lets go.
    const probe = new pg.Client({ connectionString: db });
    await probe.connect();
    try {
      for (;;) {
        const { rows } = await probe.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
        if (rows[0].n > 0) break;
        await new Promise((r) => setImmediate(r));
      }
    } finally {
      await probe.end();
    }
    expect(ran).toEqual(["other key"]);
    release();
    await Promise.all([first, second]);
    expect(ran).toEqual(["other key", "a", "b"]);
  });

  it("a follower's reconcile triggers reach the leader's queue, with their trace", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a");
    await a.leading;
    const b = await member(db, "b");
    const leaderLocal: Array<[string, unknown]> = [];
    let got: () => void = () => undefined;
    const local = (into: Array<[string, unknown]>, onAdd?: () => void): ReconcileQueue => ({
      add: (t, trace) => {
        into.push([`add ${t}`, trace]);
        onAdd?.();
      },
      addPaced: (t) => {
        into.push([`paced ${t}`, undefined]);
        onAdd?.();
      },
      addAll: () => {
        into.push(["all", undefined]);
        onAdd?.();
      },
    });
    const arrived = new Promise<void>((r) => {
      got = () => leaderLocal.length === 3 && r();
    });
    leaderQueue(
      a.c,
      local(leaderLocal, () => got()),
    );
    const followerLocal: Array<[string, unknown]> = [];
    const follower = leaderQueue(b.c, local(followerLocal));
    follower.add("tenant-x", { requestId: "req-1", correlationId: "corr-1" });
    follower.addPaced("tenant-y");
    follower.addAll();
    await arrived;
    expect(leaderLocal).toEqual([
      ["add tenant-x", { requestId: "req-1", correlationId: "corr-1" }],
      ["paced tenant-y", undefined],
      ["all", undefined],
    ]);
    expect(followerLocal).toEqual([]); // a follower runs no passes
  });

  it("a follower's promotion wake reaches the leader's loop as one sweep; the follower queues nothing itself", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a");
    await a.leading;
    const b = await member(db, "b");
    let woke: () => void = () => undefined;
    const arrived = new Promise<void>((r) => {
      woke = r;
    });
    const leaderWakes: string[] = [];
    const leaderLoop = { add: (id: string) => leaderWakes.push(`add ${id}`), addAll: () => (leaderWakes.push("all"), woke()) };
    const followerWakes: string[] = [];
    const followerLoop = { add: (id: string) => followerWakes.push(id), addAll: () => followerWakes.push("all") };
    leaderPromotionQueue(
      a.c,
      () => leaderLoop,
      () => true,
    );
    const onFollower = leaderPromotionQueue(
      b.c,
      () => followerLoop,
      () => true,
    );
    onFollower()?.add("production");
    onFollower()?.addAll();
    await arrived;
    expect(leaderWakes).toEqual(["all"]);
    expect(followerWakes).toEqual([]);
  });

  it("a new leader drops triggers until its loops run (the sweep that starts them covers every tenant)", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a");
    await a.leading;
    const added: string[] = [];
    let running = false;
    const queue = leaderQueue(
      a.c,
      { add: (t) => added.push(t), addPaced: (t) => added.push(t), addAll: () => added.push("all") },
      () => running,
    );
    queue.add("t1");
    queue.addAll();
    expect(added).toEqual([]);
    running = true;
    queue.add("t2");
    expect(added).toEqual(["t2"]);
  });

  it("an order published on one controller reaches the node's watch on another, read from the store", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const store = new PostgresStore(db);
    await store.open();
    opened.push(store);
    const a = await member(db, "a");
    const b = await member(db, "b");
    const feedA = new OrderFeed();
    const feedB = new OrderFeed();
    relayOrders(a.c, feedA, store);
    relayOrders(b.c, feedB, store);
    const stored = await store.createWorkOrder(order("wo-relay", "node-1"));
    const watched = next<WorkOrder>((fn) => feedB.subscribe("node-1", fn));
    feedA.publish(stored);
    expect((await watched).id).toBe("wo-relay");
  });

  it("heartbeats seen by one controller reach the others' liveness views", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a");
    const b = await member(db, "b");
    const at = new Date("2026-11-24T10:00:00.000Z");
    const seenByB = next<[string, Date, number]>((fn) => relayHeartbeats(b.c, (id, when, every) => fn([id, when, every])));
    const seenByA: string[] = [];
    relayHeartbeats(a.c, (id) => seenByA.push(id))("node-7", at, 5000);
    expect(await seenByB).toEqual(["node-7", at, 5000]);
    expect(seenByA).toEqual(["node-7"]); // and the controller's own view
  });

  it("a burst of beats from a big fleet reaches the others whole, each node's latest beat once, split under the size limit", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a");
    const b = await member(db, "b");
    const nodes = Array.from({ length: 600 }, (_, k) => `node-with-a-long-name-in-a-big-fleet-${String(k).padStart(5, "0")}`);
    const seenByB = new Map<string, number[]>();
    const all = next<void>((done) =>
      relayHeartbeats(b.c, (id, when) => {
        seenByB.set(id, [...(seenByB.get(id) ?? []), when.getTime()]);
        if (seenByB.size === nodes.length) done();
      }),
    );
    // Within one batch window: three beats per node (a keepalive storm), as a session's keepalives come.
    const beat = relayHeartbeats(a.c, () => undefined);
    for (let round = 1; round <= 3; round++) for (const id of nodes) beat(id, new Date(1_800_000_000_000 + round), 10_000);
    await all;
    // Each node once, with its latest beat: a batch is bounded by the fleet, not the beat rate.
    expect([...seenByB.values()].every((times) => times.length === 1 && times[0] === 1_800_000_000_003)).toBe(true);
  });

  it("a section entered inside another takes its lock on the outer one's session: more keyed callers than sessions do not wedge", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a", { lockSessions: 2, lockWaitMs: 5000 });
    // Eight callers, two sessions: each holds an idempotency key, then its tenant's lock.
    const done = await Promise.all(
      Array.from({ length: 8 }, (_, k) => a.c.exclusive(`idem:k${k}`, () => a.c.exclusive(`targets:t${k % 2}`, async () => k))),
    );
    expect(done).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it("a lock held elsewhere past lockWaitMs is UNAVAILABLE with a retry hint; a leader whose waits keep failing steps down", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a", { lockWaitMs: 200, stepDownAfter: 2 });
    await a.leading;
    const b = await member(db, "b");
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => {
      release = r;
    });
    let entered: () => void = () => undefined;
    const inside = new Promise<void>((r) => {
      entered = r;
    });
    const holder = b.c.exclusive("targets:t1", async () => {
      entered();
      await held;
    });
    await inside;
    for (let i = 0; i < 2; i++) {
      const e = await a.c.exclusive("targets:t1", async () => "ran").catch((err: unknown) => err);
      expect(e).toMatchObject({ code: "UNAVAILABLE", details: { lock: "targets", retry_after_ms: 1000 } });
    }
    expect(a.changes).toEqual([true, false]);
    expect(a.c.leading).toBe(false);
    release();
    await holder;
  });

  it("close() ends a section still waiting for its lock", async () => {
    const db = await freshDatabase(`cluster_${process.pid}_${n++}`);
    const a = await member(db, "a", { lockWaitMs: 600_000 });
    const b = await member(db, "b");
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => {
      release = r;
    });
    let entered: () => void = () => undefined;
    const inside = new Promise<void>((r) => {
      entered = r;
    });
    const holder = b.c.exclusive("targets:t1", async () => {
      entered();
      await held;
    });
    await inside;
    const waiting = a.c.exclusive("targets:t1", async () => "ran").catch((err: unknown) => err);
    // The waiter is seen waiting in the database, then its controller closes.
    const probe = new pg.Client({ connectionString: db });
    await probe.connect();
    try {
      for (;;) {
        const { rows } = await probe.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
        if (rows[0].n > 0) break;
        await new Promise((r) => setImmediate(r));
      }
    } finally {
      await probe.end();
    }
    await a.c.close();
    expect(await waiting).toBeInstanceOf(Error);
    release();
    await holder;
  });
});

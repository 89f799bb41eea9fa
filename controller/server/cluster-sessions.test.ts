// relaySessions over an in-memory message bus (as PostgreSQL's NOTIFY delivers: to every other
// controller, never to the sender): sessions opened on one controller reach the others' liveness
// views and replace an older session of the node there; a controller that starts later learns the
// sessions the others already hold (it asks once it hears them for the first time).
import { afterEach, describe, expect, it } from "vitest";
import type { Coordination, CoordinationListener } from "../store/coordination.js";
import { LivenessView } from "../nodes/liveness-view.js";
import { relaySessions } from "./cluster.js";

type Bus = Map<string, Map<string, Set<CoordinationListener>>>;

function member(bus: Bus, controllerId: string): Coordination {
  const mine = new Map<string, Set<CoordinationListener>>();
  bus.set(controllerId, mine);
  return {
    controllerId,
    shared: true,
    leading: false,
    start: async () => undefined,
    broadcast(topic, message) {
      for (const [id, listeners] of bus) {
        if (id === controllerId) continue;
        for (const fn of listeners.get(topic) ?? []) queueMicrotask(() => fn(message));
      }
    },
    subscribe(topic, fn) {
      let set = mine.get(topic);
      if (!set) mine.set(topic, (set = new Set()));
      set.add(fn);
    },
    exclusive: (_key, fn) => fn(),
    close: async () => undefined,
  };
}

async function until<T>(what: string, probe: () => T | undefined, ms = 5_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const stops: Array<() => void> = [];
afterEach(() => {
  for (const s of stops.splice(0)) s();
});

function controller(bus: Bus, id: string, replaced: string[] = []) {
  const view = new LivenessView(id, () => new Date());
  const relay = relaySessions(member(bus, id), () => view, {
    openedElsewhere: (nodeId, session, on) => replaced.push(`${nodeId} by ${session} on ${on}`),
  });
  stops.push(relay.stop);
  return { view, relay };
}

describe("relaySessions", () => {
  it("tells the other controllers of a session, which replace their older one of the node", async () => {
    const bus: Bus = new Map();
    const replacedOnA: string[] = [];
    const a = controller(bus, "a", replacedOnA);
    const b = controller(bus, "b");
    b.relay.onSession({ nodeId: "n1", session: "s2", open: true, at: new Date(), intervalMs: 10_000 });
    await until("a to hear of it", () => a.view.get("n1")?.holder);
    expect(a.view.get("n1")?.holder).toEqual({ controller: "b", session: "s2" });
    expect(replacedOnA).toEqual(["n1 by s2 on b"]);
    b.relay.onSession({ nodeId: "n1", session: "s2", open: false, at: new Date(), intervalMs: 10_000 });
    await until("a to hear of its end", () => (a.view.get("n1")?.holder ? undefined : true));
    expect(a.view.get("n1")?.cause).toBe("session_ended");
  });

  it("gives a controller that starts later the sessions the others hold", async () => {
    const bus: Bus = new Map();
    const a = controller(bus, "a");
    const b = controller(bus, "b");
    a.relay.onSession({ nodeId: "n1", session: "s1", open: true, at: new Date(), intervalMs: 10_000 });
    a.relay.onSession({ nodeId: "n2", session: "s2", open: true, at: new Date(), intervalMs: 10_000 });
    // Told while it was not there yet.
    await until("b to hear of both", () => (b.view.get("n1") && b.view.get("n2") ? true : undefined));
    const late = controller(bus, "late");
    // It hears a's presence (once a second), asks, and a answers with what it holds.
    await until("late to learn a's sessions", () => (late.view.get("n1")?.holder && late.view.get("n2")?.holder ? true : undefined));
    expect(late.view.get("n2")?.holder).toEqual({ controller: "a", session: "s2" });
    expect(late.view.alive("a")).toBe(true);
  });
});

// The liveness a view of signs implies: sessions on live controllers, ended sessions, vanished
// controllers, heartbeats.
import { describe, expect, it } from "vitest";
import { NodeLiveness } from "../../gen/skipper/v1/resource_pb.js";
import { LivenessView, PRESENCE_LAPSE_MS, SESSION_GONE_INTERVAL_MS, type SessionChange } from "./liveness-view.js";

const T0 = new Date("2026-11-28T10:00:00Z").getTime();

function setup(self = "a") {
  let now = T0;
  const view = new LivenessView(self, () => new Date(now));
  const at = (ms: number) => {
    now = T0 + ms;
    return new Date(now);
  };
  const judged = (nodeId: string) => {
    const d = view.due(new Date(now)).find((x) => x.nodeId === nodeId);
    return d ? d.next : view.get(nodeId)?.stored;
  };
  const change = (nodeId: string, controller: string, session: string, open: boolean, ms: number): SessionChange => ({
    nodeId,
    controller,
    session,
    open,
    at: at(ms),
    intervalMs: 10_000,
  });
  return { view, at, judged, change };
}

describe("liveness from sessions", () => {
  it("keeps a node with an open session online past any number of its intervals' silence short of six", () => {
    const { view, at, judged, change } = setup();
    view.session(change("n1", "a", "s1", true, 0));
    at(50_000);
    expect(judged("n1")).toBe(NodeLiveness.ONLINE);
  });

  it("takes a node whose session ended and was not replaced offline within 15 s, through degraded", () => {
    const { view, at, judged, change } = setup();
    view.session(change("n1", "a", "s1", true, 0));
    view.storedAs("n1", NodeLiveness.ONLINE);
    view.session(change("n1", "a", "s1", false, 60_000));
    at(60_000 + SESSION_GONE_INTERVAL_MS * 2);
    expect(judged("n1")).toBe(NodeLiveness.ONLINE);
    at(60_000 + SESSION_GONE_INTERVAL_MS * 4);
    expect(judged("n1")).toBe(NodeLiveness.DEGRADED);
    at(60_000 + SESSION_GONE_INTERVAL_MS * 6 + 1);
    expect(judged("n1")).toBe(NodeLiveness.OFFLINE);
    expect(view.get("n1")?.cause).toBe("session_ended");
  });

  it("ignores the end of a session that another already replaced, here or on another controller", () => {
    const { view, at, judged, change } = setup();
    view.session(change("n1", "a", "s1", true, 0));
    view.session(change("n1", "b", "s2", true, 1000));
    view.session(change("n1", "a", "s1", false, 1500));
    view.present("b", at(20_000));
    expect(judged("n1")).toBe(NodeLiveness.ONLINE);
    expect(view.get("n1")?.holder?.session).toBe("s2");
  });

  it("ends the sessions of a controller that stopped saying it is there, and only those", () => {
    const { view, at, judged, change } = setup();
    view.session(change("n1", "b", "s1", true, 0));
    view.session(change("n2", "c", "s2", true, 0));
    view.storedAs("n1", NodeLiveness.ONLINE);
    view.storedAs("n2", NodeLiveness.ONLINE);
    view.present("b", at(1000));
    view.present("c", at(1000));
    view.present("c", at(1000 + PRESENCE_LAPSE_MS + 1));
    expect(judged("n1")).toBe(NodeLiveness.ONLINE); // b lapses here; its session ends now
    expect(view.get("n1")?.cause).toBe("controller_lost");
    at(1000 + PRESENCE_LAPSE_MS + 1 + SESSION_GONE_INTERVAL_MS * 6 + 1);
    view.present("c", at(1000 + PRESENCE_LAPSE_MS + 1 + SESSION_GONE_INTERVAL_MS * 6 + 1));
    expect(judged("n1")).toBe(NodeLiveness.OFFLINE);
    expect(judged("n2")).toBe(NodeLiveness.ONLINE);
  });

  it("gives a node whose controller vanished the grace of an ended session, however old its last keepalive", () => {
    const { view, at, judged, change } = setup();
    view.session(change("n1", "b", "s1", true, 0));
    view.storedAs("n1", NodeLiveness.ONLINE);
    // Its last keepalive 45 s before the lapse is noticed (4.5 of its 10 s intervals): still held, online.
    view.present("b", at(44_000));
    at(45_000);
    expect(judged("n1")).toBe(NodeLiveness.ONLINE);
    at(44_000 + PRESENCE_LAPSE_MS + 1);
    expect(judged("n1")).toBe(NodeLiveness.ONLINE);
    expect(view.get("n1")?.cause).toBe("controller_lost");
  });

  it("never lets this controller's own sessions lapse", () => {
    const { view, at, judged, change } = setup("a");
    view.session(change("n1", "a", "s1", true, 0));
    view.beat("n1", at(50_000), 10_000);
    at(100_000);
    expect(judged("n1")).toBe(NodeLiveness.ONLINE);
  });

  it("judges a held session that carried nothing for six intervals offline (a lost end heals)", () => {
    const { view, at, judged, change } = setup("a");
    view.session(change("n1", "a", "s1", true, 0));
    at(60_001);
    expect(judged("n1")).toBe(NodeLiveness.OFFLINE);
  });

  it("brings a node back online with a session opened after its end, and lists the sessions held here", () => {
    const { view, at, judged, change } = setup("a");
    view.session(change("n1", "a", "s1", true, 0));
    view.session(change("n1", "a", "s1", false, 1000));
    view.storedAs("n1", NodeLiveness.OFFLINE);
    view.session(change("n1", "a", "s2", true, 30_000));
    at(30_001);
    expect(judged("n1")).toBe(NodeLiveness.ONLINE);
    expect(view.heldHere().map((c) => `${c.nodeId}/${c.session}`)).toEqual(["n1/s2"]);
  });

  it("judges a node without sessions by the age of its beats, as before", () => {
    const { view, at, judged } = setup();
    view.beat("n1", at(0), 1000, NodeLiveness.ONLINE);
    at(3500);
    expect(judged("n1")).toBe(NodeLiveness.DEGRADED);
    at(6500);
    expect(judged("n1")).toBe(NodeLiveness.OFFLINE);
    // An older beat relayed late changes nothing.
    view.beat("n1", new Date(T0 - 10_000), 1000);
    expect(view.get("n1")?.at).toBe(T0);
  });
});

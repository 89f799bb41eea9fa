// The process planner's decisions as fixtures: seed a resource, nodes and orders, plan once,
// assert the exact orders and reasons.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { launchDigest } from "../../common/process-launch.js";
import { ProcessOperation } from "../../gen/skipper/v1/order_action_pb.js";
import {
  ProcessModuleReason as R,
  ProcessModuleRun,
  ProcessModuleSpecSchema,
  ProcessModuleStatusSchema,
  ProcessNodeStatusSchema,
  type ProcessModuleStatus,
} from "../../gen/skipper/v1/process_pb.js";
import { ProcessObservationSchema, type ProcessObservation } from "../../gen/skipper/v1/resource_pb.js";
import {
  orderNotQueued,
  planProcess,
  processOrderId,
  specDigest,
  type ProcessDesired,
  type ProcessNodeView,
  type ProcessOrderView,
} from "./plan-processes.js";

const SHA = "a".repeat(64);
const T = { nowMs: 1_000_000, backoffMs: 1000, backoffCapMs: 60_000 };
const ARGV = ["bin/app"];
const CREATED = 500_000;

function desired(version = "1.0", over: Partial<ProcessDesired> = {}, run = ProcessModuleRun.RUNNING): ProcessDesired {
  const spec = create(ProcessModuleSpecSchema, {
    spec: { module: "app", version, source: { kind: { case: "path", value: "/srv/app.tgz" } }, sha256: SHA, argv: ARGV },
    run,
    nodeSelector: { role: "edge" },
  });
  return { id: "app", createdAtMs: CREATED, spec, status: create(ProcessModuleStatusSchema), deleted: false, ...over };
}

function obs(
  version: string,
  state = "running",
  extra: Partial<Omit<ProcessObservation, "$typeName" | "$unknown">> = {},
): ProcessObservation {
  return create(ProcessObservationSchema, {
    module: "app",
    activeVersion: version,
    installedVersions: version ? [version] : [],
    state,
    pid: state === "running" ? 42 : 0,
    activeSha256: SHA,
    launchDigest: launchDigest({ version, argv: ARGV, env: {} }),
    ...extra,
  });
}

function node(id: string, process?: ProcessObservation, over: Partial<ProcessNodeView> = {}): ProcessNodeView {
  return {
    id,
    labels: { role: "edge" },
    reachable: true,
    disabled: false,
    allowedSources: ["/srv"],
    observedAtMs: 900_000,
    process,
    ...over,
  };
}

// Frozen, as the store's scans hand records out.
function statusWith(nodeId: string, fields: Record<string, unknown>): ProcessModuleStatus {
  return deepFreeze(create(ProcessModuleStatusSchema, { nodes: [create(ProcessNodeStatusSchema, { nodeId, ...fields })] }));
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === "object" && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

const none = new Map<string, ProcessOrderView>();

describe("process planner", () => {
  it("a selected node without the module gets one deploy (DOWNLOADING); an unselected node nothing", () => {
    const p = planProcess(desired(), [node("n1"), node("n2", undefined, { labels: { role: "db" } })], none, T);
    expect(p.orders).toEqual([{ kind: "deploy", id: processOrderId("app", CREATED, "n1", 1), nodeId: "n1" }]);
    expect(p.status.nodes.map((n) => [n.nodeId, n.reason])).toEqual([["n1", R.DOWNLOADING]]);
    expect(p.transitions).toMatchObject([{ nodeId: "n1", from: R.UNSPECIFIED, to: R.DOWNLOADING }]);
  });

  it("a node already running the declared version and sha256 is adopted: no order, RUNNING", () => {
    const p = planProcess(desired(), [node("n1", obs("1.0"))], none, T);
    expect(p.orders).toEqual([]);
    expect(p.status.nodes[0]).toMatchObject({ reason: R.RUNNING, activeVersion: "1.0", pid: 42 });
  });

  it("no second order while the one the status names is open", () => {
    const d = desired("1.0", { status: statusWith("n1", { reason: R.DOWNLOADING, workOrderId: "o1", ordersIssued: 1 }) });
    const open = new Map([["o1", { id: "o1", open: true, deploy: true, succeeded: false, code: "", message: "", finishedAtMs: 0 }]]);
    const p = planProcess(d, [node("n1")], open, T);
    expect(p.orders).toEqual([]);
    expect(p.status.nodes[0]?.reason).toBe(R.DOWNLOADING);
  });

  it("a version installed but not active is switched by a deploy (INSTALLING: no download)", () => {
    const o = obs("1.0", "running", { installedVersions: ["1.0", "2.0"] });
    const p = planProcess(desired("2.0"), [node("n1", o)], none, T);
    expect(p.orders).toMatchObject([{ kind: "deploy", nodeId: "n1" }]);
    expect(p.status.nodes[0]?.reason).toBe(R.INSTALLING);
  });

  it("a process stopped behind Skipper's back gets a control_process START", () => {
    const p = planProcess(desired(), [node("n1", obs("1.0", "stopped"))], none, T);
    expect(p.orders).toEqual([
      { kind: "control", id: processOrderId("app", CREATED, "n1", 1), nodeId: "n1", operation: ProcessOperation.START },
    ]);
    expect(p.status.nodes[0]?.reason).toBe(R.STARTING);
  });

  it("a unit systemd is about to restart gets no START (EXITED until it runs again)", () => {
    const p = planProcess(desired(), [node("n1", obs("1.0", "restarting"))], none, T);
    expect(p.orders).toEqual([]);
    expect(p.status.nodes[0]?.reason).toBe(R.EXITED);
  });

  it("changed argv or env is drift: deployed again", () => {
    const o = obs("1.0", "running", { launchDigest: launchDigest({ version: "1.0", argv: ["bin/old"], env: {} }) });
    expect(planProcess(desired(), [node("n1", o)], none, T).orders).toMatchObject([{ kind: "deploy" }]);
  });

  it("declared stopped: a running module is stopped, a stopped one is left alone", () => {
    const d = desired("1.0", {}, ProcessModuleRun.STOPPED);
    expect(planProcess(d, [node("n1", obs("1.0"))], none, T).orders).toMatchObject([{ kind: "control", operation: ProcessOperation.STOP }]);
    const quiet = planProcess(d, [node("n1", obs("1.0", "stopped"))], none, T);
    expect(quiet.orders).toEqual([]);
    expect(quiet.status.nodes[0]?.reason).toBe(R.STOPPED);
  });

  it("a node no longer selected stops the module, then leaves the status", () => {
    const d = desired("1.0", { status: statusWith("n1", { reason: R.RUNNING, ordersIssued: 1 }) });
    const gone = node("n1", obs("1.0"), { labels: { role: "db" } });
    const p = planProcess(d, [gone], none, T);
    expect(p.orders).toEqual([
      { kind: "control", id: processOrderId("app", CREATED, "n1", 2), nodeId: "n1", operation: ProcessOperation.STOP },
    ]);
    const after = planProcess(d, [node("n1", obs("1.0", "stopped"), { labels: { role: "db" } })], none, T);
    expect(after.status.nodes).toEqual([]);
    expect(after.status.summary).toBe("no matching node");
  });

  it("a failed deploy waits its backoff, doubling per failure, then is queued again", () => {
    const d = desired("2.0", { status: statusWith("n1", { reason: R.DOWNLOADING, workOrderId: "o1", ordersIssued: 1 }) });
    const failed = new Map([
      [
        "o1",
        { id: "o1", open: false, deploy: true, succeeded: false, code: "SOURCE_UNAVAILABLE", message: "refused", finishedAtMs: T.nowMs },
      ],
    ]);
    const p = planProcess(d, [node("n1", obs("1.0"))], failed, T);
    expect(p.orders).toEqual([]);
    expect(p.status.nodes[0]).toMatchObject({ reason: R.VERSION_UNAVAILABLE, failures: 1 });
    expect(p.wakeAtMs).toBe(T.nowMs + 1000);
    // Planned again before the backoff ends: still nothing, and the failure is counted once.
    const again = planProcess({ ...d, status: p.status }, [node("n1", obs("1.0"))], failed, { ...T, nowMs: T.nowMs + 500 });
    expect(again.orders).toEqual([]);
    expect(again.status.nodes[0]?.failures).toBe(1);
    const due = planProcess({ ...d, status: p.status }, [node("n1", obs("1.0"))], failed, { ...T, nowMs: T.nowMs + 1000 });
    expect(due.orders).toEqual([{ kind: "deploy", id: processOrderId("app", CREATED, "n1", 2), nodeId: "n1" }]);
    const failed2 = new Map([
      ["o1", failed.get("o1")!],
      [
        processOrderId("app", CREATED, "n1", 2),
        { ...failed.get("o1")!, id: processOrderId("app", CREATED, "n1", 2), finishedAtMs: T.nowMs + 1000 },
      ],
    ]);
    const second = planProcess({ ...d, status: due.status }, [node("n1", obs("1.0"))], failed2, { ...T, nowMs: T.nowMs + 1000 });
    expect(second.status.nodes[0]?.failures).toBe(2);
    expect(second.wakeAtMs).toBe(T.nowMs + 1000 + 2000);
  });

  it("a changed spec is tried at once: the failures of the one before do not hold it back", () => {
    const d = desired("2.0", { status: statusWith("n1", { reason: R.DOWNLOADING, workOrderId: "o1", ordersIssued: 1 }) });
    const failed = new Map([
      ["o1", { id: "o1", open: false, deploy: true, succeeded: false, code: "SOURCE_UNAVAILABLE", message: "", finishedAtMs: T.nowMs }],
    ]);
    const waiting = planProcess(d, [node("n1", obs("1.0"))], failed, T);
    expect([waiting.orders, waiting.status.nodes[0]?.failures]).toEqual([[], 1]);
    const changed = planProcess({ ...desired("3.0"), status: waiting.status }, [node("n1", obs("1.0"))], failed, T);
    expect(changed.orders).toMatchObject([{ kind: "deploy", id: processOrderId("app", CREATED, "n1", 2) }]);
    expect(changed.status.nodes[0]?.failures).toBe(0);
  });

  it("latest: deployed once per spec; the resolved version is kept; running it is RUNNING", () => {
    const d = desired("latest", { status: statusWith("n1", { reason: R.DOWNLOADING, workOrderId: "o1", ordersIssued: 1 }) });
    const ok = new Map([
      [
        "o1",
        {
          id: "o1",
          open: false,
          deploy: true,
          succeeded: true,
          code: "PROCESS_OK",
          message: "",
          finishedAtMs: T.nowMs,
          process: obs("3.1"),
        },
      ],
    ]);
    const p = planProcess(d, [node("n1", obs("3.1"))], ok, T);
    expect(p.orders).toEqual([]);
    expect(p.status.nodes[0]).toMatchObject({ reason: R.RUNNING, resolvedVersion: "3.1", appliedDigest: specDigest(d.spec), failures: 0 });
  });

  it("latest resolved offline runs the newest installed (RUNNING, resolved_offline) and asks the source again after a backoff", () => {
    const d = desired("latest", { status: statusWith("n1", { reason: R.DOWNLOADING, workOrderId: "o1", ordersIssued: 1 }) });
    const offline = obs("2.0", "running", { resolvedOffline: true, installedVersions: ["1.0", "2.0"] });
    const ok = new Map([
      [
        "o1",
        { id: "o1", open: false, deploy: true, succeeded: true, code: "PROCESS_OK", message: "", finishedAtMs: T.nowMs, process: offline },
      ],
    ]);
    const p = planProcess(d, [node("n1", offline)], ok, T);
    expect(p.orders).toEqual([]);
    expect(p.status.nodes[0]).toMatchObject({ reason: R.RUNNING, resolvedOffline: true, resolvedVersion: "2.0", failures: 1 });
    const due = planProcess({ ...d, status: p.status }, [node("n1", offline)], ok, { ...T, nowMs: T.nowMs + 1000 });
    expect(due.orders).toMatchObject([{ kind: "deploy", nodeId: "n1" }]);
  });

  it("an offline node waits (NODE_OFFLINE), a disallowed source is not ordered, a tenant's module is left to the tenant", () => {
    expect(planProcess(desired(), [node("n1", undefined, { reachable: false })], none, T).status.nodes[0]?.reason).toBe(R.NODE_OFFLINE);
    const refused = planProcess(desired(), [node("n1", undefined, { allowedSources: ["/elsewhere"] })], none, T);
    expect(refused.orders).toEqual([]);
    expect(refused.status.nodes[0]?.reason).toBe(R.SOURCE_NOT_ALLOWED);
    const claimed = planProcess(desired("1.0", { claimedBy: "shop" }), [node("n1")], none, T);
    expect(claimed.orders).toEqual([]);
    expect(claimed.status.nodes[0]?.reason).toBe(R.MODULE_CLAIMED_BY_TENANT);
  });

  it("a deleted resource stops the module wherever it ran", () => {
    const d = desired("1.0", {
      deleted: true,
      status: statusWith("n1", { reason: R.RUNNING, ordersIssued: 3, changedAt: timestampFromMs(1) }),
    });
    expect(planProcess(d, [node("n1", obs("1.0"))], none, T).orders).toMatchObject([
      { kind: "control", operation: ProcessOperation.STOP, id: processOrderId("app", CREATED, "n1", 4) },
    ]);
  });

  it("a disabled node that runs the module gets no order (dispatch would refuse it): NODE_DISABLED, kept in the status", () => {
    const d = desired("1.0", { status: statusWith("n1", { reason: R.RUNNING, ordersIssued: 1, activeVersion: "1.0" }) });
    const p = planProcess(d, [node("n1", obs("1.0"), { disabled: true }), node("n2", obs("1.0", "stopped"))], none, T);
    expect(p.orders).toEqual([
      { kind: "control", id: processOrderId("app", CREATED, "n2", 1), nodeId: "n2", operation: ProcessOperation.START },
    ]);
    expect(p.status.nodes.map((n) => [n.nodeId, n.reason, n.workOrderId])).toEqual([
      ["n1", R.NODE_DISABLED, ""],
      ["n2", R.STARTING, processOrderId("app", CREATED, "n2", 1)],
    ]);
    // Declared stopped or deleted: still no STOP for the disabled node.
    const stopped = planProcess(
      desired("1.0", { status: d.status }, ProcessModuleRun.STOPPED),
      [node("n1", obs("1.0"), { disabled: true })],
      none,
      T,
    );
    expect([stopped.orders, stopped.status.nodes[0]?.reason]).toEqual([[], R.NODE_DISABLED]);
    const deleted = planProcess({ ...d, deleted: true }, [node("n1", obs("1.0"), { disabled: true })], none, T);
    expect([deleted.orders, deleted.status.nodes[0]?.reason]).toEqual([[], R.NODE_DISABLED]);
  });

  it("an order dispatch refuses fails only its node: FAILED with the message, no order named, a backoff; the others stand", () => {
    const p = planProcess(desired(), [node("n1"), node("n2")], none, T);
    expect(p.orders.map((o) => o.nodeId)).toEqual(["n1", "n2"]);
    orderNotQueued(p, desired(), "n1", "node n1 is disabled", T);
    expect(p.orders.map((o) => o.nodeId)).toEqual(["n2"]);
    expect(p.status.nodes[0]).toMatchObject({ nodeId: "n1", reason: R.FAILED, workOrderId: "", failures: 1, ordersIssued: 1 });
    expect(p.status.nodes[0]?.message).toMatch(/could not be queued: node n1 is disabled/);
    expect(p.status.nodes[1]).toMatchObject({ nodeId: "n2", reason: R.DOWNLOADING, workOrderId: processOrderId("app", CREATED, "n2", 1) });
    expect(p.transitions.map((x) => [x.nodeId, x.from, x.to])).toEqual([
      ["n2", R.UNSPECIFIED, R.DOWNLOADING],
      ["n1", R.UNSPECIFIED, R.FAILED],
    ]);
    expect(p.wakeAtMs).toBe(T.nowMs + 1000);
    // The next pass waits the backoff, then queues a fresh order (the next number).
    const waiting = planProcess({ ...desired(), status: p.status }, [node("n1")], none, { ...T, nowMs: T.nowMs + 500 });
    expect([waiting.orders, waiting.status.nodes[0]?.reason]).toEqual([[], R.FAILED]);
    const due = planProcess({ ...desired(), status: p.status }, [node("n1")], none, { ...T, nowMs: T.nowMs + 1000 });
    expect(due.orders).toEqual([{ kind: "deploy", id: processOrderId("app", CREATED, "n1", 2), nodeId: "n1" }]);
  });

  it("a resource re-created under the same id gets order ids of its own", () => {
    const first = planProcess(desired(), [node("n1")], none, T);
    const again = planProcess(desired("1.0", { createdAtMs: CREATED + 1 }), [node("n1")], none, T);
    expect(first.orders[0]?.id).not.toBe(again.orders[0]?.id);
    expect(again.orders[0]?.id).toBe(processOrderId("app", CREATED + 1, "n1", 1));
  });

  it("a module the agent restarts after its crash backoff gets no START (EXITED, left to the agent)", () => {
    const d = desired("1.0", { status: statusWith("n1", { reason: R.RUNNING, ordersIssued: 1 }) });
    const p = planProcess(d, [node("n1", obs("1.0", "restarting"))], none, T);
    expect(p.orders).toEqual([]);
    expect(p.status.nodes[0]).toMatchObject({ reason: R.EXITED, message: "exited; the agent restarts it after its crash backoff" });
  });
});

// The reconciler's pure parts as fixtures: seed the facts, run one decision, assert the exact
// actions and verdict. Plus properties of the compose renderer and the snapshot diff.
import { FailureReason } from "../gen/skipper/v1/failure_cause_pb.js";
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { parse } from "yaml";
import {
  DeletionSchema,
  ConvergenceStatus,
  NodeLiveness,
  ProjectObservationSchema,
  ResourceSchema,
  ServiceObservationSchema,
  TargetStatusSchema,
  type Resource,
} from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { MAX_FAILURES, planTarget, retryDelayMs, type TargetFacts } from "../controller/reconcile/plan-target.js";
import { renderProject, type RenderInput } from "../controller/reconcile/render-project.js";
import { desiredForTenant, volumesToDelete } from "../controller/reconcile/desired-targets.js";
import { recordOutcome } from "../controller/reconcile/target-outcome.js";
import { NodeCache } from "../controller/reconcile/node-cache.js";
import { World } from "../controller/reconcile/world.js";
import { order } from "./store-conformance.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MAX_ATTEMPTS, planDeployment } from "../controller/reconcile/plan-deployment.js";
import { livenessOf } from "../controller/nodes/node-liveness.js";
import { diffJson } from "../controller/snapshots/build-snapshot.js";
import { parseLabelSelector, matchesTerms } from "../controller/domain/label-selector.js";
import { DeploySafetySchema } from "../gen/skipper/v1/safety_pb.js";
import { fingerprint } from "../controller/base/canonical-json.js";

const NOW = new Date("2026-11-23T10:00:00Z");
const ago = (ms: number) => new Date(NOW.getTime() - ms);

function tenant(spec: Record<string, unknown> = {}): Resource {
  return create(ResourceSchema, {
    id: "shop",
    resourceType: "tenant",
    desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { nodeSelector: { env: "prod" } }, ...spec } } } as never,
  });
}
function service(id: string, spec: Record<string, unknown> = {}): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "service",
    desiredState: { kind: { case: "service", value: { tenantId: "shop", image: "busybox:stable", ...spec } } } as never,
  });
}
function node(id: string, labels: Record<string, string>): Resource {
  return create(ResourceSchema, { id, resourceType: "node", desiredState: { kind: { case: "node", value: { labels } } } });
}
function limits(id: string, cpus: number): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "resource_limits",
    desiredState: { kind: { case: "resourceLimits", value: { cpus, memoryBytes: 64n << 20n } } },
  });
}
const input = (services: Resource[], extra: Partial<RenderInput> = {}): RenderInput => ({
  tenant: tenant(),
  services,
  networks: new Map(),
  volumes: new Map(),
  limits: new Map(),
  ...extra,
});
const rendered = renderProject(input([service("web")]));
const onlineNode = { liveness: NodeLiveness.ONLINE, disabled: false, lastHeartbeatAt: ago(1000) };
const facts = (f: Partial<TargetFacts>): TargetFacts => ({ nodeId: "n1", node: onlineNode, now: NOW, ...f });
const applied = (extra: Record<string, unknown> = {}) =>
  create(TargetStatusSchema, {
    nodeId: "n1",
    appliedHash: rendered.specHash,
    desiredHash: rendered.specHash,
    lastWorkOrderId: "o1",
    finishedAt: timestampFromDate(ago(5000)),
    projectName: "shop",
    ...extra,
  });
const observed = (state: string, specHash = rendered.specHash) =>
  create(ProjectObservationSchema, {
    projectName: "shop",
    tenantId: "shop",
    specHash,
    services: [create(ServiceObservationSchema, { service: "web", state })],
  });

describe("planTarget", () => {
  it("deploys a desired project that was never applied", () => {
    const plan = planTarget(facts({ desired: rendered }));
    expect(plan.actions).toEqual([{ kind: "deploy", nodeId: "n1", rendered, reason: "desired_changed" }]);
    expect(plan.verdict.status).toBe(ConvergenceStatus.ORDER_IN_FLIGHT);
  });

  it("never issues a second order while one is in flight", () => {
    const inFlight = create(WorkOrderSchema, { id: "o2", status: WorkOrderStatus.PENDING });
    const plan = planTarget(facts({ desired: rendered, inFlight }));
    expect(plan.actions).toEqual([]);
    expect(plan.verdict).toMatchObject({ status: ConvergenceStatus.ORDER_IN_FLIGHT, workOrderId: "o2" });
  });

  it("says NODE_OFFLINE while the order waits for an offline node", () => {
    const plan = planTarget(facts({ desired: rendered, node: { ...onlineNode, liveness: NodeLiveness.OFFLINE } }));
    expect(plan.actions).toHaveLength(1);
    expect(plan.verdict.status).toBe(ConvergenceStatus.NODE_OFFLINE);
  });

  it("does nothing for a disabled node", () => {
    const plan = planTarget(facts({ desired: rendered, node: { ...onlineNode, disabled: true } }));
    expect(plan.actions).toEqual([]);
    expect(plan.verdict.status).toBe(ConvergenceStatus.NODE_DISABLED);
  });

  it("is converged when the applied project is observed running", () => {
    const plan = planTarget(facts({ desired: rendered, record: applied(), observed: observed("running") }));
    expect(plan.actions).toEqual([]);
    expect(plan.verdict.status).toBe(ConvergenceStatus.CONVERGED);
  });

  it("repairs drift: a stopped service is redeployed and the difference is named", () => {
    const plan = planTarget(facts({ desired: rendered, record: applied(), observed: observed("not_running") }));
    expect(plan.actions).toEqual([{ kind: "deploy", nodeId: "n1", rendered, reason: "drift" }]);
    expect(plan.drift).toEqual(["service web is not_running"]);
    expect(plan.verdict.status).toBe(ConvergenceStatus.DRIFT_DETECTED);
  });

  it("ignores an observation older than the last finished order", () => {
    const plan = planTarget(
      facts({
        desired: rendered,
        record: applied({ finishedAt: timestampFromDate(ago(100)) }),
        observed: observed("not_running"),
        node: { ...onlineNode, lastHeartbeatAt: ago(500) },
      }),
    );
    expect(plan.actions).toEqual([]);
    expect(plan.verdict.status).toBe(ConvergenceStatus.CONVERGED);
  });

  describe("a project the node no longer runs", () => {
    // The node listed its projects after the last order finished (5 s ago), and shop is not among them.
    const listed = { ...onlineNode, projectsObservedAt: ago(1000) };
    const gone = "the node reports no project shop (its files or containers are gone)";

    it("is drift: one deploy repairs it, and the verdict names why", () => {
      const plan = planTarget(facts({ desired: rendered, record: applied(), node: listed }));
      expect(plan.actions).toEqual([{ kind: "deploy", nodeId: "n1", rendered, reason: "drift" }]);
      expect(plan.drift).toEqual([gone]);
      expect(plan.verdict).toEqual({ status: ConvergenceStatus.DRIFT_DETECTED, message: `drift on node n1: ${gone}; redeploying` });
    });

    it("is not judged from a list older than the last order, nor on a node that never listed its projects", () => {
      const older = { ...onlineNode, lastHeartbeatAt: ago(10), projectsObservedAt: ago(6000) };
      for (const node of [older, onlineNode]) {
        const plan = planTarget(facts({ desired: rendered, record: applied(), node }));
        expect(plan).toMatchObject({ actions: [], verdict: { status: ConvergenceStatus.CONVERGED } });
      }
    });

    it("while its repair is pending or running: DRIFT_DETECTED with the same message, and no second order", () => {
      const first = planTarget(facts({ desired: rendered, record: applied(), node: listed }));
      const record = applied({
        lastWorkOrderId: "o2",
        lastResultCode: "",
        convergence: { status: first.verdict.status, message: first.verdict.message, workOrderId: "o2" },
      });
      for (const status of [WorkOrderStatus.PENDING, WorkOrderStatus.RUNNING]) {
        const inFlight = create(WorkOrderSchema, { id: "o2", status, metadata: { annotations: { reason: "drift" } } });
        const plan = planTarget(facts({ desired: rendered, record, node: listed, inFlight }));
        expect(plan.actions).toEqual([]);
        expect(plan.drift).toBeUndefined();
        expect(plan.verdict).toEqual({ status: ConvergenceStatus.DRIFT_DETECTED, message: first.verdict.message, workOrderId: "o2" });
      }
      // An order for another reason is just in flight.
      const deploy = create(WorkOrderSchema, { id: "o3", status: WorkOrderStatus.RUNNING, metadata: { annotations: { reason: "apply" } } });
      expect(planTarget(facts({ desired: rendered, record, node: listed, inFlight: deploy })).verdict.status).toBe(
        ConvergenceStatus.ORDER_IN_FLIGHT,
      );
    });

    it("a repair that failed backs off, is retried once due without a new drift_detected, and gives up after MAX_FAILURES", () => {
      const failed = (failures: number, retryAt: Date) =>
        applied({ failedHash: rendered.specHash, failures, retryAt: timestampFromDate(retryAt), lastResultCode: "COMPOSE_FAILED" });
      const waiting = planTarget(facts({ desired: rendered, record: failed(1, new Date(NOW.getTime() + 1000)), node: listed }));
      expect(waiting).toMatchObject({ actions: [], verdict: { status: ConvergenceStatus.RETRY_BACKOFF } });
      const due = planTarget(facts({ desired: rendered, record: failed(1, ago(1)), node: listed }));
      expect(due.actions).toEqual([{ kind: "deploy", nodeId: "n1", rendered, reason: "retry" }]);
      expect(due.drift).toBeUndefined();
      expect(due.verdict.status).toBe(ConvergenceStatus.DRIFT_DETECTED);
      const dead = planTarget(facts({ desired: rendered, record: failed(MAX_FAILURES, ago(1)), node: listed }));
      expect(dead).toMatchObject({ actions: [], verdict: { status: ConvergenceStatus.ORDER_FAILED } });
    });

    it("a project that lacks a service rendered into it is drift; a tenant's own compose file is not second-guessed", () => {
      const without = create(ProjectObservationSchema, { projectName: "shop", tenantId: "shop", specHash: rendered.specHash });
      const plan = planTarget(facts({ desired: rendered, record: applied(), node: listed, observed: without }));
      expect(plan.drift).toEqual(["service web is not in the project"]);
      const own = renderProject(
        input([service("web")], { tenant: tenant({ compose: { composeFile: "services:\n  other: {image: x}\n" } }) }),
      );
      const ownRecord = applied({ appliedHash: own.specHash, desiredHash: own.specHash });
      const ownSeen = create(ProjectObservationSchema, { projectName: "shop", tenantId: "shop", specHash: own.specHash });
      expect(planTarget(facts({ desired: own, record: ownRecord, node: listed, observed: ownSeen })).verdict.status).toBe(
        ConvergenceStatus.CONVERGED,
      );
    });
  });

  it("backs off after a failure, retries when due, and gives up after MAX_FAILURES", () => {
    const failed = (failures: number, retryAt: Date) =>
      create(TargetStatusSchema, {
        nodeId: "n1",
        failedHash: rendered.specHash,
        failures,
        retryAt: timestampFromDate(retryAt),
        lastWorkOrderId: "o1",
        lastResultCode: "COMPOSE_FAILED",
      });
    const waiting = planTarget(facts({ desired: rendered, record: failed(1, new Date(NOW.getTime() + 1000)) }));
    expect(waiting.actions).toEqual([]);
    expect(waiting.verdict.status).toBe(ConvergenceStatus.RETRY_BACKOFF);
    const due = planTarget(facts({ desired: rendered, record: failed(1, ago(1)) }));
    expect(due.actions).toEqual([{ kind: "deploy", nodeId: "n1", rendered, reason: "retry" }]);
    const dead = planTarget(facts({ desired: rendered, record: failed(MAX_FAILURES, ago(1)) }));
    expect(dead.actions).toEqual([]);
    expect(dead.verdict.status).toBe(ConvergenceStatus.ORDER_FAILED);
    // A new desired state starts over.
    const other = renderProject(input([service("web", { env: { A: "1" } })]));
    expect(planTarget(facts({ desired: other, record: failed(MAX_FAILURES, ago(1)) })).actions).toHaveLength(1);
  });

  it("a failure the spec gets every time (COMPOSE_INVALID) is ORDER_FAILED at once, without retries", () => {
    const invalid = create(TargetStatusSchema, {
      nodeId: "n1",
      failedHash: rendered.specHash,
      failures: 1,
      retryAt: timestampFromDate(ago(1)),
      lastWorkOrderId: "o1",
      lastResultCode: "COMPOSE_INVALID",
    });
    const plan = planTarget(facts({ desired: rendered, record: invalid }));
    expect(plan.actions).toEqual([]);
    expect(plan.verdict.status).toBe(ConvergenceStatus.ORDER_FAILED);
    expect(plan.verdict.message).toContain("COMPOSE_INVALID");
    // A new desired state is tried.
    const other = renderProject(input([service("web", { env: { A: "2" } })]));
    expect(planTarget(facts({ desired: other, record: invalid })).actions).toHaveLength(1);
  });

  it("a failure whose cause fails every time (a held port) is ORDER_FAILED at once, its cause first; one that may pass is retried", () => {
    const held = (reason: FailureReason, summary: string) =>
      create(TargetStatusSchema, {
        nodeId: "n1",
        failedHash: rendered.specHash,
        failures: 1,
        retryAt: timestampFromDate(ago(1)),
        lastWorkOrderId: "o1",
        lastResultCode: "COMPOSE_FAILED",
        lastFailureCause: { reason, summary, line: "listen tcp4 127.0.0.1:28932: bind: address already in use" },
      });
    const plan = planTarget(
      facts({ desired: rendered, record: held(FailureReason.PORT_IN_USE, "port 127.0.0.1:28932 is already in use") }),
    );
    expect(plan.actions).toEqual([]);
    expect(plan.verdict.status).toBe(ConvergenceStatus.ORDER_FAILED);
    expect(plan.verdict.message).toMatch(/^port 127\.0\.0\.1:28932 is already in use \(COMPOSE_FAILED\): order o1 failed/);
    const transient = planTarget(facts({ desired: rendered, record: held(FailureReason.RATE_LIMITED, "the registry limits pulls") }));
    expect(transient.actions).toEqual([{ kind: "deploy", nodeId: "n1", rendered, reason: "retry" }]);
  });

  it("removes what runs where nothing should, then forgets the target", () => {
    const plan = planTarget(facts({ record: applied() }));
    expect(plan.actions).toEqual([{ kind: "remove", nodeId: "n1", projectName: "shop" }]);
    const gone = planTarget(facts({}));
    expect(gone).toMatchObject({ actions: [], forget: true });
  });

  it("after a removal: waits on an older observation, removes again on a fresh one, forgets once none is reported", () => {
    const removed = applied({ appliedHash: "removal", finishedAt: timestampFromDate(ago(100)) });
    const stale = planTarget(facts({ record: removed, observed: observed("running"), node: { ...onlineNode, lastHeartbeatAt: ago(500) } }));
    expect(stale).toMatchObject({ actions: [], forget: false });
    const back = planTarget(facts({ record: removed, observed: observed("running"), node: { ...onlineNode, lastHeartbeatAt: ago(10) } }));
    expect(back.actions).toEqual([{ kind: "remove", nodeId: "n1", projectName: "shop" }]);
    expect(planTarget(facts({ record: removed }))).toMatchObject({ actions: [], forget: true });
  });
});

describe("recordOutcome", () => {
  const order = (status: WorkOrderStatus, type = WorkOrderType.DEPLOY_SERVICE) =>
    create(WorkOrderSchema, {
      id: "o1",
      type,
      status,
      target: { tenantId: "shop", nodeId: "n1" },
      desiredState: { specHash: "h1", composeProject: { projectName: "shop" } },
      result: { code: status === WorkOrderStatus.SUCCESS ? "APPLY_OK" : "COMPOSE_FAILED" },
    });
  const start = [create(TargetStatusSchema, { nodeId: "n1", lastWorkOrderId: "o1" })];

  it("a success records the applied hash; failures count up with a growing delay", () => {
    expect(recordOutcome(start, order(WorkOrderStatus.SUCCESS), NOW)[0]).toMatchObject({
      appliedHash: "h1",
      failures: 0,
      lastResultCode: "APPLY_OK",
    });
    const once = recordOutcome(start, order(WorkOrderStatus.FAILED), NOW);
    expect(recordOutcome(once, order(WorkOrderStatus.FAILED), NOW)).toBe(once); // the same outcome counts once
    // The reconciler issues the retry (o2): its failure counts as the second.
    const retry = create(WorkOrderSchema, { ...order(WorkOrderStatus.FAILED), id: "o2" });
    const twice = recordOutcome([create(TargetStatusSchema, { ...once[0]!, lastWorkOrderId: "o2", lastResultCode: "" })], retry, NOW);
    expect(twice[0]).toMatchObject({ failedHash: "h1", failures: 2, appliedHash: "" });
    expect(retryDelayMs(1)).toBe(2000);
    expect(retryDelayMs(2)).toBe(4000);
    expect(retryDelayMs(20)).toBe(300_000);
  });

  it("a successful removal is recorded until the node confirms; a late result of an older order changes nothing", () => {
    expect(recordOutcome(start, order(WorkOrderStatus.SUCCESS, WorkOrderType.REMOVE_SERVICE), NOW)[0]).toMatchObject({
      appliedHash: "removal",
      lastResultCode: "APPLY_OK",
    });
    const newer = [create(TargetStatusSchema, { nodeId: "n1", lastWorkOrderId: "o2" })];
    expect(recordOutcome(newer, order(WorkOrderStatus.FAILED), NOW)).toBe(newer);
  });
});

describe("rollbacks and ad-hoc orders in the target record", () => {
  const base = create(TargetStatusSchema, { nodeId: "n1", appliedHash: "h0", desiredHash: "h1", lastWorkOrderId: "o1" });
  const deploy = (code: string, restored = "") =>
    create(WorkOrderSchema, {
      id: "o1",
      type: WorkOrderType.DEPLOY_SERVICE,
      status: WorkOrderStatus.FAILED,
      target: { tenantId: "shop", nodeId: "n1" },
      desiredState: { specHash: "h1" },
      result: { code, details: restored ? { rollback: { failedSpecHash: "h1", restoredSpecHash: restored } } : {} },
    });

  it("a deploy the node rolled back leaves the restored spec applied and holds the failed one, without counting a failure", () => {
    for (const code of ["ROLLED_BACK", "DIGEST_MISMATCH"]) {
      const [t] = recordOutcome([base], deploy(code, "h0"), NOW);
      expect(t).toMatchObject({ appliedHash: "h0", rolledBackHash: "h1", failures: 0, failedHash: "", lastResultCode: code });
    }
    // The restore failed too: an ordinary failure, retried with backoff.
    expect(recordOutcome([base], deploy("ROLLBACK_FAILED", "h0"), NOW)[0]).toMatchObject({
      appliedHash: "h0",
      rolledBackHash: "",
      failures: 1,
      failedHash: "h1",
    });
  });

  it("the planner holds a rolled-back spec until the desired state changes", () => {
    const held = create(TargetStatusSchema, {
      nodeId: "n1",
      appliedHash: "h0",
      rolledBackHash: rendered.specHash,
      lastWorkOrderId: "o1",
      lastResultCode: "ROLLED_BACK",
    });
    const plan = planTarget(facts({ desired: rendered, record: held }));
    expect(plan.actions).toEqual([]);
    expect(plan.verdict.status).toBe(ConvergenceStatus.ROLLED_BACK);
    expect(plan.verdict.message).toContain("ROLLED_BACK");
    const other = renderProject(input([service("web", { env: { A: "2" } })]));
    expect(planTarget(facts({ desired: other, record: held })).actions).toHaveLength(1);
  });

  it("a spec the node's gate rolled back is released by a change of the gate or hooks; an admin's rollback is not", () => {
    const gate = (path: string) =>
      create(DeploySafetySchema, { healthGate: { probes: [{ kind: { case: "http", value: { url: `http://127.0.0.1/${path}` } } }] } });
    const failed = deploy("ROLLED_BACK", "h0");
    failed.desiredState!.specHash = rendered.specHash;
    failed.desiredState!.safety = gate("health");
    const [rec] = recordOutcome([create(TargetStatusSchema, { nodeId: "n1", appliedHash: "h0", lastWorkOrderId: "o1" })], failed, NOW);
    expect(rec!.rolledBackSafetyHash).toBe(fingerprint(DeploySafetySchema, gate("health")));
    // The same gate (map order aside): still held.
    expect(
      planTarget(facts({ desired: rendered, record: rec, safetyHash: fingerprint(DeploySafetySchema, gate("health")) })).verdict.status,
    ).toBe(ConvergenceStatus.ROLLED_BACK);
    // A fixed probe: the spec deploys again.
    const released = planTarget(facts({ desired: rendered, record: rec, safetyHash: fingerprint(DeploySafetySchema, gate("index.html")) }));
    expect(released.actions).toEqual([expect.objectContaining({ kind: "deploy", rendered })]);
    // An admin's rollback order holds whatever the gate does.
    const admin = create(TargetStatusSchema, {
      nodeId: "n1",
      appliedHash: "h0",
      rolledBackHash: rendered.specHash,
      lastResultCode: "ROLLBACK_OK",
    });
    expect(
      planTarget(facts({ desired: rendered, record: admin, safetyHash: fingerprint(DeploySafetySchema, gate("index.html")) })).actions,
    ).toEqual([]);
  });

  it("a rollback order's success applies the restored spec and holds the desired one; a later deploy's success releases the hold", () => {
    const rollback = create(WorkOrderSchema, {
      id: "o1",
      type: WorkOrderType.ROLLBACK,
      status: WorkOrderStatus.SUCCESS,
      target: { tenantId: "shop", nodeId: "n1" },
      desiredState: { specHash: "h0" },
      action: { kind: { case: "rollback", value: { holdsDesiredHash: "h1" } } },
      result: { code: "ROLLBACK_OK" },
    });
    const [t] = recordOutcome([create(TargetStatusSchema, { ...base, appliedHash: "h1" })], rollback, NOW);
    expect(t).toMatchObject({ appliedHash: "h0", rolledBackHash: "h1", lastResultCode: "ROLLBACK_OK" });
    // The desired state changed (to h2) while the rollback ran: h1 is held, h2 deploys next.
    const [moved] = recordOutcome([create(TargetStatusSchema, { ...base, appliedHash: "h1", desiredHash: "h2" })], rollback, NOW);
    expect(moved).toMatchObject({ appliedHash: "h0", rolledBackHash: "h1" });
    const redeploy = create(WorkOrderSchema, {
      id: "o2",
      type: WorkOrderType.DEPLOY_SERVICE,
      status: WorkOrderStatus.SUCCESS,
      target: { tenantId: "shop", nodeId: "n1" },
      desiredState: { specHash: "h1" },
      result: { code: "APPLY_OK" },
    });
    expect(
      recordOutcome([create(TargetStatusSchema, { ...t!, lastWorkOrderId: "o2", lastResultCode: "" })], redeploy, NOW)[0],
    ).toMatchObject({ appliedHash: "h1", rolledBackHash: "" });
  });

  it("ad-hoc orders (restart, inspect, upload…) never touch the record", () => {
    for (const type of [WorkOrderType.RESTART_SERVICE, WorkOrderType.INSPECT, WorkOrderType.UPLOAD_FILES, WorkOrderType.EXECUTE_COMMAND]) {
      const o = create(WorkOrderSchema, {
        id: "o1",
        type,
        status: WorkOrderStatus.SUCCESS,
        target: { tenantId: "shop", nodeId: "n1" },
        result: { code: "OK" },
      });
      expect(recordOutcome([base], o, NOW)).toEqual([base]);
    }
  });
});

describe("renderProject", () => {
  const services = [
    service("web", {
      env: { B: "2", A: "1", PRICE: "$5" },
      ports: [{ hostPort: 8080, containerPort: 80, hostIp: "127.0.0.1" }],
      resourceLimitsId: "small",
      dependsOn: ["db"],
    }),
    service("db", { command: ["postgres", "-c", "x=$y"] }),
  ];
  const extra = { limits: new Map([["small", limits("small", 0.5)]]) };

  it("gives the same bytes and hash whatever order the resources and map entries come in", () => {
    const a = renderProject(input(services, extra));
    const shuffled = [services[1]!, create(ResourceSchema, services[0]!)];
    const s0 = shuffled[1]!.desiredState!.kind.value as { env: Record<string, string> };
    s0.env = { PRICE: "$5", A: "1", B: "2" };
    const b = renderProject(input(shuffled, extra));
    expect(b.project.composeFile).toBe(a.project.composeFile);
    expect(b.specHash).toBe(a.specHash);
    expect(renderProject(input(services, extra)).specHash).toBe(a.specHash);
  });

  it("renders services with limits, ports, dependencies, labels and literal dollars", () => {
    const doc = parse(renderProject(input(services, extra)).project.composeFile);
    expect(doc.services.web).toMatchObject({
      image: "busybox:stable",
      environment: { A: "1", B: "2", PRICE: "$$5" },
      ports: ["127.0.0.1:8080:80/tcp"],
      cpus: 0.5,
      mem_limit: 64 * 1024 * 1024,
      depends_on: ["db"],
      restart: "unless-stopped",
      labels: { "dev.skipper.service-id": "web", "dev.skipper.tenant-id": "shop" },
    });
    expect(doc.services.db.command).toEqual(["postgres", "-c", "x=$$y"]);
  });

  it("strings that YAML 1.1 (compose v1) would read as booleans, nulls or numbers stay strings", () => {
    const env = { A: "yes", B: "off", C: "null", D: "1.0", E: "0x10", F: "~", G: "plain" };
    const file = renderProject(input([service("web", { env, command: ["echo", "on"] })])).project.composeFile;
    for (const v of ["yes", "off", "null", "1.0", "0x10", "~"]) expect(file).toContain(`"${v}"`);
    expect(file).toContain("G: plain");
    // Read back as YAML 1.1, every value is the string it was.
    const doc = parse(file, { version: "1.1" });
    expect(doc.services.web.environment).toEqual(env);
    expect(doc.services.web.command).toEqual(["echo", "on"]);
  });

  it("a changed field changes the hash; a tenant's own compose file is used as it is", () => {
    const a = renderProject(input(services, extra));
    const b = renderProject(input(services, { limits: new Map([["small", limits("small", 0.25)]]) }));
    expect(b.specHash).not.toBe(a.specHash);
    const own = renderProject(input([], { tenant: tenant({ compose: { composeFile: "services: {}\n", env: { X: "1" } } }) }));
    expect(own.project).toMatchObject({ composeFile: "services: {}\n", env: { X: "1" }, projectName: "shop" });
  });
});

describe("desiredForTenant", () => {
  const nodes = [node("p1", { env: "prod" }), node("p2", { env: "prod" }), node("d1", { env: "dev" })];
  const world = (services: Resource[]) => ({
    tenant: tenant(),
    services,
    networks: new Map(),
    volumes: new Map(),
    limits: new Map(),
    nodes,
  });

  it("a selector matching several nodes deploys to each; a service's own placement wins", () => {
    const d = desiredForTenant(world([service("web"), service("tool", { placement: { targetNodeId: "d1" } })]));
    expect([...d.targets.keys()].sort()).toEqual(["d1", "p1", "p2"]);
    expect(d.targets.get("d1")!.serviceIds).toEqual(["tool"]);
    expect(d.targets.get("p1")!.serviceIds).toEqual(["web"]);
  });

  it("names what blocks: a missing reference, or no matching node", () => {
    const d = desiredForTenant(
      world([service("web", { resourceLimitsId: "gone" }), service("lost", { placement: { nodeSelector: { env: "qa" } } })]),
    );
    expect(d.services.get("web")!.blocker?.status).toBe(ConvergenceStatus.REFERENCE_MISSING);
    expect(d.services.get("lost")!.blocker?.status).toBe(ConvergenceStatus.NO_MATCHING_NODE);
    expect(d.targets.size).toBe(0);
  });

  it("data goes once, on the nodes a deletion with delete_data left it on, unless a live service there uses it", () => {
    const gone = (r: Resource, deleteData: boolean, pendingOn: string[]) => {
      r.deletion = create(DeletionSchema, { deletedAt: timestampFromDate(ago(1000)), deleteData, dataPendingOnNodes: pendingOn });
      return r;
    };
    const vol = (id: string) =>
      create(ResourceSchema, { id, resourceType: "volume", desiredState: { kind: { case: "volume", value: { tenantId: "shop" } } } });
    const deleted = [
      gone(service("a", { volumeIds: ["data", "shared"] }), true, ["p1"]),
      gone(service("b", { volumeIds: ["elsewhere"] }), true, ["p2"]),
      gone(service("c", { volumeIds: ["kept"] }), false, []),
      gone(service("d", { volumeIds: ["done"] }), true, []), // already carried out everywhere
      gone(vol("orphan"), true, ["p1", "p2"]),
    ];
    expect(volumesToDelete(deleted, [], "p1")).toEqual(["data", "orphan", "shared"]);
    expect(volumesToDelete(deleted, [], "p2")).toEqual(["elsewhere", "orphan"]);
    // A live service on the node uses "shared": it stays there.
    expect(volumesToDelete(deleted, [service("live", { volumeIds: ["shared"] })], "p1")).toEqual(["data", "orphan"]);
    // It travels with the node's project but is no part of its hash (a one-off, not a state).
    const w = {
      tenant: tenant(),
      services: [service("web")],
      networks: new Map(),
      volumes: new Map(),
      limits: new Map(),
      nodes: [node("p1", { env: "prod" })],
    };
    const plain = desiredForTenant(w).targets.get("p1")!;
    const withData = desiredForTenant({ ...w, deleted }).targets.get("p1")!;
    expect(plain.deleteVolumes).toEqual([]);
    expect(withData.deleteVolumes).toEqual(["data", "orphan", "shared"]);
    expect(withData.specHash).toBe(plain.specHash);
    expect(desiredForTenant({ ...w, deleted }).removalVolumes("p2")).toEqual(["elsewhere", "orphan"]);
    // A converged target with data to remove gets one deploy for it.
    const done = create(TargetStatusSchema, {
      nodeId: "n1",
      appliedHash: withData.specHash,
      desiredHash: withData.specHash,
      lastWorkOrderId: "o1",
      finishedAt: timestampFromDate(ago(5000)),
    });
    const plan = planTarget(facts({ desired: withData, record: done, observed: observed("running", withData.specHash) }));
    expect(plan.actions).toEqual([expect.objectContaining({ kind: "deploy", reason: "delete_data" })]);
    expect(planTarget(facts({ desired: plain, record: done, observed: observed("running", plain.specHash) })).verdict.status).toBe(
      ConvergenceStatus.CONVERGED,
    );
  });

  it("a deleted tenant wants nothing anywhere", () => {
    expect(desiredForTenant({ ...world([service("web")]), tenant: undefined }).targets.size).toBe(0);
  });
});

describe("planDeployment", () => {
  it("carries the rendered project, its hash, the tenant's priority and the retry budget", () => {
    const { deployment, workOrder } = planDeployment({
      tenantId: "shop",
      nodeId: "n1",
      workOrderId: "o1",
      deploymentId: "d1",
      requestId: "r",
      correlationId: "c",
      now: NOW,
      rendered,
      reason: "apply",
      priority: 7,
    });
    expect(workOrder).toMatchObject({
      priority: 7,
      maxAttempts: MAX_ATTEMPTS,
      desiredState: { specHash: rendered.specHash, deploymentId: "d1" },
    });
    expect(deployment.desiredState?.kind.value).toMatchObject({ specHash: rendered.specHash, workOrderId: "o1" });
    expect(workOrder.metadata?.annotations.reason).toBe("apply");
  });
});

describe("small pure pieces", () => {
  it("liveness: online, degraded after 3 missed intervals, offline after 6", () => {
    expect(livenessOf(undefined, 1000, NOW)).toBe(NodeLiveness.UNSPECIFIED);
    expect(livenessOf(ago(2500), 1000, NOW)).toBe(NodeLiveness.ONLINE);
    expect(livenessOf(ago(3500), 1000, NOW)).toBe(NodeLiveness.DEGRADED);
    expect(livenessOf(ago(6500), 1000, NOW)).toBe(NodeLiveness.OFFLINE);
    expect(livenessOf(ago(20_000), 0, NOW)).toBe(NodeLiveness.DEGRADED);
    // An interval stored before the bounds is judged as the longest allowed (5 min): offline after 30 min.
    expect(livenessOf(ago(31 * 60_000), 86_400_000_000, NOW)).toBe(NodeLiveness.OFFLINE);
  });

  it("a diff of a state with itself is empty, whatever the state", () => {
    for (const r of [tenant(), service("web", { env: { A: "1" }, ports: [{ hostPort: 1 }] }), limits("l", 2)]) {
      const json = JSON.parse(JSON.stringify(r.desiredState, (_k, v) => (typeof v === "bigint" ? v.toString() : v)));
      expect(diffJson(json, structuredClone(json), "")).toEqual([]);
    }
    expect(diffJson({ a: { b: 1 } }, { a: { b: 2 } }, "")).toEqual([["a.b", 1, 2]]);
  });

  it("label selectors parse and match", () => {
    const terms = parseLabelSelector("env=prod, region!=us ,tier");
    expect(matchesTerms({ env: "prod", tier: "web" }, terms)).toBe(true);
    expect(matchesTerms({ env: "prod", tier: "web", region: "us" }, terms)).toBe(false);
    expect(() => parseLabelSelector("=x")).toThrow();
  });
});

describe("node cache", () => {
  it("follows the store by revision: changed, new and deleted nodes, without re-reading the rest", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-nodecache-"));
    const store = new FileStore(dir);
    await store.open();
    try {
      for (const id of ["n1", "n2"]) await store.createResource(node(id, { env: "prod" }));
      const cache = new NodeCache();
      expect((await cache.current(store)).map((n) => n.id).sort()).toEqual(["n1", "n2"]);
      await store.updateResource("node", "n1", (n) => {
        (n.desiredState!.kind.value as { labels: Record<string, string> }).labels = { env: "dev" };
        return n;
      });
      await store.createResource(node("n3", { env: "prod" }));
      await store.updateResource("node", "n2", (n) => {
        n.deletion = create(DeletionSchema, { deletedAt: timestampFromDate(NOW) });
        return n;
      });
      const after = await cache.current(store);
      expect(after.map((n) => n.id).sort()).toEqual(["n1", "n3"]);
      const n1 = after.find((n) => n.id === "n1")!;
      expect(n1.desiredState?.kind.case === "node" && n1.desiredState.kind.value.labels).toEqual({ env: "dev" });
      // Same answer from a fresh cache (a restart): the store is the truth.
      expect((await new NodeCache().current(store)).map((n) => n.id).sort()).toEqual(["n1", "n3"]);
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("a pass's read of its tenant's orders in flight", () => {
  it("sees an order released (running -> pending) while the read runs: no pass may think nothing is in flight", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-inflight-"));
    const store = new FileStore(dir);
    await store.open();
    try {
      await store.createWorkOrder(create(WorkOrderSchema, { ...order("wo-1", "n1", 0, "shop"), type: WorkOrderType.DEPLOY_SERVICE }));
      const claimed = await store.claimWorkOrder("wo-1", "n1", NOW);
      // The release lands between two listings, as a session's end can on PostgreSQL (where each
      // listing is its own statement): right after the first listing of the read answers.
      let released = false;
      const racing = new Proxy(store, {
        get(target, prop, receiver) {
          if (prop !== "listWorkOrders") return Reflect.get(target, prop, receiver);
          return async (filter: Parameters<typeof store.listWorkOrders>[0]) => {
            const page = await target.listWorkOrders(filter);
            if (!released) {
              released = true;
              await target.releaseWorkOrderClaim("wo-1", "n1", claimed.claim!.fencingToken, NOW);
            }
            return page;
          };
        },
      });
      const world = new World([], [], [], [], [], [], []);
      await world.refreshInFlight(racing, "shop");
      expect(released).toBe(true);
      expect(world.inFlight("shop", "n1")?.id).toBe("wo-1");
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

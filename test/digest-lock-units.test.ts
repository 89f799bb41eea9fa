// The digest lock's pure parts: which image references a compose file runs and how a local image
// matches a lock (agent/executors/image-lock.ts), the controller's lock kept on the target records
// and forwarded to the spec's later orders (reconcile/image-locks.ts, target-outcome.ts), and a
// rollout that pauses when a node refuses a moved tag (rollouts/rollout-step.ts, rollout-actions.ts).
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { TargetStatusSchema } from "../gen/skipper/v1/resource_pb.js";
import { RolloutNodeState as S, RolloutSchema, RolloutStatus } from "../gen/skipper/v1/rollout_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import {
  imageUses,
  interpolate,
  lockDigestOf,
  lockMismatches,
  matchesLock,
  orderLock,
  registryDigest,
  repositoryOf,
  runningLockMismatches,
} from "../agent/executors/image-lock.js";
import { imageLocks } from "../controller/reconcile/image-locks.js";
import { recordOutcome } from "../controller/reconcile/target-outcome.js";
import { applyActions } from "../controller/rollouts/rollout-actions.js";
import { rolloutStep } from "../controller/rollouts/rollout-step.js";

const A = `sha256:${"a".repeat(64)}`;
const B = `sha256:${"b".repeat(64)}`;
const ID = `sha256:${"1".repeat(64)}`;

describe("image references of a compose file", () => {
  const ref = ["127.0.0.1:5000/shop/web:", "$", "{TAG:-stable}"].join("");
  const file = [
    "services:",
    `  web: {image: '${ref}'}`,
    `  worker: {image: '${ref}', pull_policy: missing}`,
    `  pinned: {image: 'busybox@${A}'}`,
    "  local: {image: skipper-busybox:local, pull_policy: never}",
    "  built: {build: .}",
    "  tools: {image: tools:1, profiles: [debug]}",
    "",
  ].join("\n");

  it("lists each reference once, interpolated, with the most cautious pull policy of its services", () => {
    const uses = imageUses(file, ["web", "worker", "pinned", "local", "built"], { TAG: "" });
    expect(uses).toEqual([
      { reference: "127.0.0.1:5000/shop/web:stable", services: ["web", "worker"], policy: "missing" },
      { reference: "skipper-busybox:local", services: ["local"], policy: "never" },
    ]);
  });

  it("leaves out services that do not start, references pinned by digest and files it cannot read", () => {
    expect(imageUses(file, ["pinned", "built"], {})).toEqual([]);
    expect(imageUses("services: [", ["web"], {})).toEqual([]);
  });

  it("interpolates as Compose does: defaults for unset (and, with ':-', empty) values, $$ as $", () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: Compose's variables, not JavaScript's
    expect(interpolate("r/${A}:${B:-x}-${C-y}-$D-$$E", { A: "web", B: "", C: "", D: "d" })).toBe("r/web:x--d-$E");
  });
});

describe("a local image against a lock", () => {
  const pulled = { id: ID, repoDigests: [`127.0.0.1:5000/shop/web@${A}`, `other/web@${B}`] };

  it("knows the repository a reference names, with a registry port or a digest", () => {
    expect(repositoryOf("127.0.0.1:5000/shop/web:stable")).toBe("127.0.0.1:5000/shop/web");
    expect(repositoryOf("busybox")).toBe("busybox");
    expect(repositoryOf(`web@${A}`)).toBe("web");
  });

  it("takes the registry digest of the reference's own repository, else the image id", () => {
    expect(registryDigest("127.0.0.1:5000/shop/web:stable", pulled)).toBe(A);
    expect(registryDigest("docker.io/library/busybox:1", { id: ID, repoDigests: [`busybox@${B}`] })).toBe(B);
    expect(lockDigestOf("skipper-busybox:local", { id: ID, repoDigests: [] })).toBe(ID);
    expect(lockDigestOf("mine/web:1", pulled)).toBe(ID);
  });

  it("matches a lock by registry digest or by image id, never by another repository's digest", () => {
    expect(matchesLock("127.0.0.1:5000/shop/web:stable", pulled, A)).toBe(true);
    expect(matchesLock("127.0.0.1:5000/shop/web:stable", pulled, ID)).toBe(true);
    expect(matchesLock("127.0.0.1:5000/shop/web:stable", pulled, B)).toBe(false);
  });

  it("uses an order's lock only for the order's own spec", () => {
    expect(orderLock({ specHash: "h1", digests: { w: A } }, "h1")).toEqual({ w: A });
    expect(orderLock({ specHash: "h0", digests: { w: A } }, "h1")).toBeUndefined();
    expect(orderLock(undefined, "h1")).toBeUndefined();
  });

  it("names the image and both digests of a mismatch", () => {
    expect(lockMismatches({ "r/web:stable": A, "r/db:1": B }, { "r/web:stable": B, "r/db:1": B })).toEqual([
      `image r/web:stable: locked to ${A}, the registry now serves ${B}`,
    ]);
  });
});

describe("the controller's lock", () => {
  const deployed = (nodeId: string, hash: string, lock: Record<string, string>, code = "APPLY_OK") =>
    create(WorkOrderSchema, {
      id: `o-${nodeId}`,
      type: WorkOrderType.DEPLOY_SERVICE,
      target: { nodeId, tenantId: "t1" },
      status: code === "APPLY_OK" ? WorkOrderStatus.SUCCESS : WorkOrderStatus.FAILED,
      desiredState: { specHash: hash, composeProject: { projectName: "t1" } },
      result: { success: code === "APPLY_OK", code, details: { imageLock: lock } },
    });

  it("records the digests a node's applied spec resolved to, and keeps them through a spec the node refused", () => {
    let targets = recordOutcome([], deployed("n1", "h1", { "r/web:stable": A }), new Date());
    expect(targets[0]?.imageDigests).toEqual({ "r/web:stable": A });
    const first = targets[0]!;
    first.lastWorkOrderId = "";
    targets = recordOutcome([first], deployed("n1", "h2", { "r/web:stable": B }, "DIGEST_MISMATCH"), new Date());
    expect(targets[0]).toMatchObject({ appliedHash: "h1", failedHash: "h2", imageDigests: { "r/web:stable": A } });
  });

  it("keeps of a node's reported lock only references with sha256 digests, and nothing from a report of too many", () => {
    const reported = { "r/web:stable": A, "r/bad:1": "sha256:not-hex", "has space": B, "r/x:1": "md5:abc" };
    const targets = recordOutcome([], deployed("n1", "h1", reported), new Date());
    expect(targets[0]?.imageDigests).toEqual({ "r/web:stable": A });
    const flood = Object.fromEntries(Array.from({ length: 129 }, (_, i) => [`r/w${i}:1`, A]));
    expect(recordOutcome([], deployed("n1", "h1", flood), new Date())[0]?.imageDigests).toEqual({});
  });

  it("gives later orders of a spec the lock of the first node (by id) that applied it, and none for other specs", () => {
    const lookup = imageLocks([
      create(TargetStatusSchema, { nodeId: "n2", appliedHash: "h1", imageDigests: { w: B } }),
      create(TargetStatusSchema, { nodeId: "n1", appliedHash: "h1", imageDigests: { w: A } }),
      create(TargetStatusSchema, { nodeId: "n3", appliedHash: "h2", imageDigests: {} }),
    ]);
    expect(lookup("h1")).toMatchObject({ specHash: "h1", digests: { w: A } });
    expect(lookup("h2")).toBeUndefined();
    expect(lookup("h3")).toBeUndefined();
  });
});

describe("a rollout whose node refuses a moved tag", () => {
  const NOW = 1_000_000;
  const record = () =>
    create(RolloutSchema, {
      id: "r1",
      tenantId: "t1",
      status: RolloutStatus.PROGRESSING,
      // A budget of 5 failures: the pause is not the budget's.
      policy: { failureBudget: { limit: { case: "count", value: 5 } } },
      waves: [
        {
          name: "wave-1",
          startedAt: timestampFromMs(NOW - 60_000),
          completedAt: timestampFromMs(NOW - 30_000),
          nodes: [{ nodeId: "n1", state: S.DONE }],
        },
        { name: "wave-2", startedAt: timestampFromMs(NOW - 10_000), nodes: [{ nodeId: "n2", state: S.DEPLOYING }] },
        { name: "wave-3", nodes: [{ nodeId: "n3", state: S.WAITING }] },
      ],
    });
  const reason = `image r/web:stable: locked to ${A}, the registry now serves ${B} (DIGEST_MISMATCH)`;

  it("pauses at once with the node's reason, and starts no further node", () => {
    const r = record();
    const step = rolloutStep(r, new Map([["n2", { converged: false, failure: reason, halts: true }]]), NOW);
    expect(step.actions).toEqual([
      { type: "node-failed", nodeId: "n2", reason },
      { type: "halted", nodeId: "n2", reason },
    ]);
    const events = applyActions(r, step.actions, NOW);
    expect(r.status).toBe(RolloutStatus.PAUSED);
    expect(r.message).toContain(B);
    expect(r.paused?.reason).toBe(r.message);
    expect(events.map((e) => e.type)).toEqual(["rollout_node_failed", "rollout_paused"]);
  });

  it("goes on within its budget for a failure that does not halt", () => {
    const step = rolloutStep(record(), new Map([["n2", { converged: false, failure: "COMPOSE_FAILED" }]]), NOW);
    expect(step.actions.map((a) => a.type)).toEqual(["node-failed", "wave-completed", "wave-started", "node-started"]);
  });
});

describe("what runs after up, against the lock", () => {
  it("names a service whose container runs another image than its reference was locked to; a match by digest or id passes", () => {
    const running = [
      { service: "web", reference: "r/web:stable", image: { id: ID, repoDigests: [`r/web@${A}`] } },
      { service: "api", reference: "r/api:1", image: { id: ID, repoDigests: [`r/api@${B}`] } },
      { service: "local", reference: "built:dev", image: { id: ID, repoDigests: [] } },
      { service: "free", reference: "r/free:1", image: { id: ID, repoDigests: [] } },
    ];
    expect(runningLockMismatches(running, { "r/web:stable": A, "r/api:1": A, "built:dev": ID })).toEqual([
      `api: r/api:1 locked to ${A}, runs ${B}`,
    ]);
  });
});

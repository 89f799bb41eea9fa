// Keys scoped to one tenant trying to leave it, against the built controller as a process. An
// operator and a generator key scoped to t1, with t2 placed on node scope-b (pool=b) and node
// scope-a in pool=a: every write that would place t1 (or a service of t1) on t2's node, give t1's
// compose file host privileges (directly, through ${VAR} interpolation or YAML merge keys), use a
// volume or network driver that is not Docker's own, or set or change t1's policy must be refused
// with FORBIDDEN and change nothing (every resource version the same, nothing created). A
// wrongful success is a write that was answered or changed something (bar 0). After an admin
// gives t1 a pool (pool=a) and RESTRICTED, placing it inside the pool works and outside it does
// not. Benign writes by the same keys must work, or the refusals would prove nothing.
import { createHash } from "node:crypto";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Role } from "../../gen/skipper/v1/access_pb.js";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { DeploymentService } from "../../gen/skipper/v1/deployment_service_pb.js";
import { ComposePolicyLevel, type Resource, type TenantSpecSchema } from "../../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { type FieldMask, FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import { exactly, info, type Figure, type Probe } from "./figures.js";
import { startController, type ControllerProcess } from "./controller-process.js";
import { outcome, withBearer, type Outcome } from "./credential-clients.js";
import { PLAIN, PRIVILEGES } from "./host-privileges.js";

const SECTION = "scope confinement";
const T1 = "scope-t1";
const T2 = "scope-t2";
const POOL_A = "scope-a";
const POOL_B = "scope-b";

type TenantInit = MessageInitShape<typeof TenantSpecSchema>;

interface Tally {
  attempts: number;
  wrongful: string[];
  /** Writes that named t1's policy by leaving it out, answered, the policy kept. */
  keptNotRefused: string[];
  /** Refusals after which a resource version moved but no spec changed (status writes). */
  versionOnly: string[];
  otherCode: string[];
  refusedBenign: string[];
}

export const scopeConfinementProbe: Probe = {
  name: "scope-confinement",
  async run({ workDir, log }) {
    const ctl = await startController({ dataDir: join(workDir, "data") });
    try {
      const started = performance.now();
      const figures = await confinement(ctl, log);
      figures.push(info(SECTION, "time", `${((performance.now() - started) / 1000).toFixed(1)} s`));
      figures.push(exactly(SECTION, "controller down afterwards", ctl.alive() ? 0 : 1, 0));
      return figures;
    } finally {
      await ctl.stop();
    }
  },
};

/** An update mask of `path`. */
function mask(path: string): FieldMask {
  return create(FieldMaskSchema, { paths: [path] });
}

const NOTE = new TextEncoder().encode("t1 was here");

/** Ad-hoc orders naming t1 on t2's node, as `secret` queues them: what became of each. */
async function adhocOnB(ctl: ControllerProcess, secret: string): Promise<string> {
  const orders = withBearer(ctl, WorkOrderService, secret);
  const sticker = await outcome(
    orders.createWorkOrder({
      type: WorkOrderType.WRITE_STICKER,
      target: { nodeId: POOL_B, tenantId: T1 },
      action: { kind: { case: "writeSticker", value: { sticker: { releaseId: "r1" } } } },
    }),
  );
  const upload = await outcome(
    orders.createWorkOrder({
      type: WorkOrderType.UPLOAD_FILES,
      target: { nodeId: POOL_B, tenantId: T1 },
      action: {
        kind: {
          case: "uploadFiles",
          value: { files: [{ path: "note.txt", content: NOTE, sha256: createHash("sha256").update(NOTE).digest("hex") }] },
        },
      },
    }),
  );
  return `write_sticker ${sticker}, upload_files ${upload}`;
}

function tenant(value: TenantInit) {
  return { kind: { case: "tenant" as const, value } };
}

async function confinement(ctl: ControllerProcess, log: (m: string) => void): Promise<Figure[]> {
  const admin = ctl.admin(ResourceService);
  await seed(admin);
  const judge = new Judge(ctl);
  const ordersBefore = await judge.ordersOnB();
  const keys = [Role.OPERATOR, Role.GENERATOR].map(async (role) => ({
    role,
    secret: (
      await ctl.admin(AccessService).createApiKey({ name: `trust-scope-${Role[role].toLowerCase()}`, role, scope: { tenantIds: [T1] } })
    ).secret,
  }));
  const adhoc: string[] = [];
  for (const { role, secret } of await Promise.all(keys)) {
    const who = Role[role].toLowerCase();
    await withoutPool(ctl, judge, who, secret);
    adhoc.push(`${who}: ${await adhocOnB(ctl, secret)}`);
  }
  // An admin gives t1 a pool and RESTRICTED: inside it placement works, outside it does not.
  const policy: PoolPolicy = { nodeSelector: { pool: "a" }, compose: { level: ComposePolicyLevel.RESTRICTED } };
  await admin.updateResource({ resourceType: "tenant", id: T1, desiredState: tenant({ compose: { composeFile: PLAIN }, policy }) });
  const inside = { ok: 0, tried: 0 };
  for (const role of [Role.OPERATOR, Role.GENERATOR]) await withinPool(ctl, judge, role, policy, inside, adhoc);
  const t = judge.tally;
  const kept = await admin.getResource({ resourceType: "tenant", id: T1 });
  const spec = kept.resource?.desiredState?.kind.case === "tenant" ? kept.resource.desiredState.kind.value : undefined;
  const policyKept = spec?.policy?.nodeSelector?.pool === "a" && spec.policy.compose?.level === ComposePolicyLevel.RESTRICTED;
  if (!policyKept) t.wrongful.push("t1's policy is not what the admin gave");
  // The reconciler had every write above to act on: nothing of t1 may be ordered onto t2's node.
  const ordersAfter = await judge.ordersOnB();
  if (ordersAfter !== ordersBefore) t.wrongful.push(`${ordersAfter - ordersBefore} work order(s) of t1 on t2's node`);
  for (const [what, list] of [
    ["wrongful", t.wrongful],
    ["answered, policy kept", t.keptNotRefused],
    ["a version moved, no spec changed", t.versionOnly],
    ["refused with another code than FORBIDDEN", t.otherCode],
    ["benign write refused", t.refusedBenign],
  ] as const) {
    if (list.length) log(`${what}: ${list.join("; ")}`);
  }
  log(`${t.attempts} attempts; ad-hoc orders naming t1 on t2's node: ${adhoc.join("; ")}`);
  return figuresOf(t, inside, adhoc);
}

type Resources = Client<typeof ResourceService>;

/** The pool and compose level an admin gives t1. */
interface PoolPolicy {
  nodeSelector: Record<string, string>;
  compose: { level: ComposePolicyLevel };
}

/** Nodes scope-a (pool=a) and scope-b (pool=b), tenant t1 unplaced and t2 on scope-b. */
async function seed(admin: Resources): Promise<void> {
  for (const [id, pool] of [
    [POOL_A, "a"],
    [POOL_B, "b"],
  ] as const) {
    await admin.createResource({
      resourceType: "node",
      resource: {
        id,
        resourceType: "node",
        metadata: { labels: { pool } },
        desiredState: { kind: { case: "node", value: { labels: { pool } } } },
      },
    });
  }
  await admin.createResource({
    resourceType: "tenant",
    resource: { id: T1, resourceType: "tenant", desiredState: tenant({ compose: { composeFile: PLAIN } }) },
  });
  await admin.createResource({
    resourceType: "tenant",
    resource: {
      id: T2,
      resourceType: "tenant",
      desiredState: tenant({ compose: { composeFile: PLAIN }, deploymentPolicy: { targetNodeId: POOL_B } }),
    },
  });
}

type State = Map<string, { version: string; spec: string }>;

/**
 * Judges the writes of t1's keys into a Tally. Everything a refused write must leave as it was:
 * the tenants and nodes, which t1 resources exist, each one's spec (desired state, labels,
 * annotations) and how many orders would run t1 on t2's node. Resource versions are compared too,
 * but the reconciler's status writes move them (t1 placed on scope-a gets orders and status), so a
 * version that moved with its spec unchanged is counted apart.
 */
class Judge {
  readonly tally: Tally = { attempts: 0, wrongful: [], keptNotRefused: [], versionOnly: [], otherCode: [], refusedBenign: [] };
  private readonly admin: Resources;

  constructor(private readonly ctl: ControllerProcess) {
    this.admin = ctl.admin(ResourceService);
  }

  /** Orders that would run t1 on t2's node (the ad-hoc orders are reported on their own). */
  async ordersOnB(): Promise<number> {
    return (await this.ctl.admin(WorkOrderService).listWorkOrders({ tenantId: T1, nodeId: POOL_B, pageSize: 1000 })).workOrders.filter(
      (o) => o.type !== WorkOrderType.WRITE_STICKER && o.type !== WorkOrderType.UPLOAD_FILES,
    ).length;
  }

  /**
   * A write that must be refused (with one of `codes`) and change nothing. With `keeps: "policy"`
   * (a write that names t1's policy by leaving it out), what must not change is the policy: an
   * answer that kept it is noted, not wrongful ("a write that leaves it out keeps it").
   */
  async refused(what: string, call: () => Promise<unknown>, opts: { codes?: Outcome[]; keeps?: "policy" } = {}): Promise<void> {
    const t = this.tally;
    t.attempts++;
    const before = await this.state();
    const policy = await this.policyOf();
    const got = await outcome(call());
    const after = await this.state();
    const changed = changes(before, after, "spec");
    const moved = changes(before, after, "version");
    if (changed.length === 0 && moved.length > 0) t.versionOnly.push(`${what}: ${moved.join(", ")}`);
    if (opts.keeps === "policy" && got === "ok") {
      if ((await this.policyOf()) !== policy) t.wrongful.push(`${what}: ok, the policy changed`);
      else t.keptNotRefused.push(`${what}${changed.length ? ` (changed ${changed.join(", ")})` : " (nothing changed)"}`);
    } else if (got === "ok" || got === "hung" || changed.length > 0) {
      t.wrongful.push(`${what}: ${got}${changed.length ? `, changed ${changed.join(", ")}` : ""}`);
    } else if (!(opts.codes ?? ["FORBIDDEN"]).includes(got)) t.otherCode.push(`${what}: ${got}`);
  }

  /** A write that must work (else the refusals prove nothing). */
  async works(what: string, call: Promise<unknown>): Promise<void> {
    const got = await outcome(call);
    if (got !== "ok") this.tally.refusedBenign.push(`${what}: ${got}`);
  }

  private async state(): Promise<State> {
    const parts: State = new Map();
    const put = (key: string, r: Resource | undefined) =>
      parts.set(key, { version: r?.metadata?.resourceVersion ?? "none", spec: specOf(r) });
    for (const [type, id] of [
      ["tenant", T1],
      ["tenant", T2],
      ["node", POOL_A],
      ["node", POOL_B],
    ] as const) {
      put(`${type} ${id}`, (await this.admin.getResource({ resourceType: type, id })).resource);
    }
    for (const type of ["service", "volume", "network"]) {
      const { resources } = await this.admin.listResources({ resourceType: type, pageSize: 1000 });
      for (const r of resources) put(`${type} ${r.id}`, r);
    }
    const orders = String(await this.ordersOnB());
    parts.set("orders of t1 on t2's node", { version: orders, spec: orders });
    return parts;
  }

  private async policyOf(): Promise<string> {
    const r = (await this.admin.getResource({ resourceType: "tenant", id: T1 })).resource;
    return JSON.stringify(r?.desiredState?.kind.case === "tenant" ? (r.desiredState.kind.value.policy ?? null) : null);
  }
}

function specOf(r: Resource | undefined): string {
  return r
    ? JSON.stringify([r.desiredState, r.metadata?.labels, r.metadata?.annotations], (_k, v) => (typeof v === "bigint" ? String(v) : v))
    : "none";
}

/** The keys whose spec (or version, shown with its move) differs between two states. */
function changes(before: State, after: State, what: "spec" | "version"): string[] {
  return [...new Set([...before.keys(), ...after.keys()])]
    .filter((k) => before.get(k)?.[what] !== after.get(k)?.[what])
    .map((k) => (what === "version" ? `${k} ${before.get(k)?.version ?? "none"} -> ${after.get(k)?.version ?? "none"}` : k));
}

// One key scoped to t1 while t1 has no pool: benign writes work; placement on t2's node, host
// privileges, plugin drivers and its own policy are refused.
async function withoutPool(ctl: ControllerProcess, judge: Judge, who: string, secret: string): Promise<void> {
  const refused = judge.refused.bind(judge);
  const scoped = withBearer(ctl, ResourceService, secret);
  const update = (spec: TenantInit, more: { updateMask?: FieldMask } = {}) =>
    scoped.updateResource({ resourceType: "tenant", id: T1, desiredState: tenant(spec), ...more });
  const service = (id: string, placement?: { targetNodeId?: string; nodeSelector?: Record<string, string> }) =>
    scoped.createResource({
      resourceType: "service",
      resource: {
        id,
        resourceType: "service",
        desiredState: { kind: { case: "service", value: { tenantId: T1, image: "busybox", placement } } },
      },
    });
  await judge.works(
    `${who}: t1's compose file, unprivileged`,
    update({ compose: { composeFile: `${PLAIN}    cap_add: [NET_BIND_SERVICE]\n` } }),
  );
  await judge.works(`${who}: a service of t1 without placement`, service(`scope-svc-${who}`));
  // Placement on t2's node, while t1 has no pool.
  await refused(`${who}: t1 on t2's node`, () => update({ compose: { composeFile: PLAIN }, deploymentPolicy: { targetNodeId: POOL_B } }));
  await refused(`${who}: t1 by t2's pool label`, () =>
    update({ compose: { composeFile: PLAIN }, deploymentPolicy: { nodeSelector: { pool: "b" } } }),
  );
  await refused(`${who}: t1 on t2's node, by update mask`, () =>
    update({ deploymentPolicy: { targetNodeId: POOL_B } }, { updateMask: mask("desired_state.tenant.deployment_policy.target_node_id") }),
  );
  await refused(`${who}: a service of t1 on t2's node`, () => service(`scope-svc-b-${who}`, { targetNodeId: POOL_B }));
  await refused(`${who}: a service of t1 by t2's pool label`, () => service(`scope-svc-pb-${who}`, { nodeSelector: { pool: "b" } }));
  await refused(`${who}: t1's service moved to t2's node`, () =>
    scoped.updateResource({
      resourceType: "service",
      id: `scope-svc-${who}`,
      desiredState: { kind: { case: "service", value: { tenantId: T1, image: "busybox", placement: { targetNodeId: POOL_B } } } },
    }),
  );
  await refused(`${who}: t2's node relabelled`, () =>
    scoped.updateResource({
      resourceType: "node",
      id: POOL_B,
      labels: { pool: "a" },
      desiredState: { kind: { case: "node", value: { labels: { pool: "a" } } } },
    }),
  );
  // Apply names a node: it deploys where t1 is placed, never places it (any refusal will do).
  await refused(`${who}: apply t1 to t2's node`, () => withBearer(ctl, DeploymentService, secret).apply({ tenantId: T1, nodeId: POOL_B }), {
    codes: ["FORBIDDEN", "InvalidArgument", "NotFound"],
  });
  // Host privileges.
  for (const [name, composeFile, env] of PRIVILEGES) await refused(`${who}: ${name}`, () => update({ compose: { composeFile, env } }));
  await refused(`${who}: a volume resource with a plugin driver`, () =>
    scoped.createResource({
      resourceType: "volume",
      resource: {
        id: `scope-vol-${who}`,
        resourceType: "volume",
        desiredState: { kind: { case: "volume", value: { tenantId: T1, driver: "rexray/ebs" } } },
      },
    }),
  );
  await refused(`${who}: a network resource with a plugin driver`, () =>
    scoped.createResource({
      resourceType: "network",
      resource: {
        id: `scope-net-${who}`,
        resourceType: "network",
        desiredState: { kind: { case: "network", value: { tenantId: T1, driver: "weaveworks/net-plugin" } } },
      },
    }),
  );
  // Its own policy.
  await refused(`${who}: t1's policy set to PRIVILEGED`, () =>
    update({ compose: { composeFile: PLAIN }, policy: { compose: { level: ComposePolicyLevel.PRIVILEGED } } }),
  );
  await refused(`${who}: t1's policy set to pool=b`, () =>
    update({ compose: { composeFile: PLAIN }, policy: { nodeSelector: { pool: "b" } } }),
  );
  await refused(`${who}: t1's policy set, by update mask`, () =>
    update({ policy: { compose: { level: ComposePolicyLevel.PRIVILEGED } } }, { updateMask: mask("desired_state.tenant.policy") }),
  );
}

// One key scoped to t1 once an admin gave it a pool: placement inside it works (counted in
// `inside`), outside it, privileges and any change of the admin's policy are refused.
async function withinPool(
  ctl: ControllerProcess,
  judge: Judge,
  role: Role,
  policy: PoolPolicy,
  inside: { ok: number; tried: number },
  adhoc: string[],
): Promise<void> {
  const refused = judge.refused.bind(judge);
  const who = `${Role[role].toLowerCase()} (t1 in pool=a)`;
  const { secret } = await ctl
    .admin(AccessService)
    .createApiKey({ name: `trust-scope-pool-${Role[role].toLowerCase()}`, role, scope: { tenantIds: [T1] } });
  const scoped = withBearer(ctl, ResourceService, secret);
  const update = (spec: TenantInit, more: { updateMask?: FieldMask } = {}) =>
    scoped.updateResource({ resourceType: "tenant", id: T1, desiredState: tenant(spec), ...more });
  const place = (node: string) => update({ compose: { composeFile: PLAIN }, deploymentPolicy: { targetNodeId: node } });
  inside.tried += 2;
  if ((await outcome(place(POOL_A))) === "ok") inside.ok++;
  await refused(`${who}: t1 on t2's node`, () => place(POOL_B));
  const svc = `scope-svc-in-${Role[role].toLowerCase()}`;
  const inPool = await outcome(
    scoped.createResource({
      resourceType: "service",
      resource: {
        id: svc,
        resourceType: "service",
        desiredState: { kind: { case: "service", value: { tenantId: T1, image: "busybox", placement: { targetNodeId: POOL_A } } } },
      },
    }),
  );
  if (inPool === "ok") inside.ok++;
  await refused(`${who}: a service of t1 on t2's node`, () =>
    scoped.createResource({
      resourceType: "service",
      resource: {
        id: `${svc}-b`,
        resourceType: "service",
        desiredState: { kind: { case: "service", value: { tenantId: T1, image: "busybox", placement: { targetNodeId: POOL_B } } } },
      },
    }),
  );
  if (role === Role.OPERATOR) {
    await refused(
      `${who}: apply t1 to t2's node`,
      () => withBearer(ctl, DeploymentService, secret).apply({ tenantId: T1, nodeId: POOL_B }),
      { codes: ["FORBIDDEN", "InvalidArgument", "NotFound"] },
    );
  }
  await refused(`${who}: privileged`, () => update({ compose: { composeFile: `${PLAIN}    privileged: true\n` } }));
  // Changing the policy an admin gave, every way a write can say it.
  await refused(`${who}: policy pool changed to b`, () =>
    update({ compose: { composeFile: PLAIN }, policy: { ...policy, nodeSelector: { pool: "b" } } }),
  );
  await refused(`${who}: policy level changed to PRIVILEGED`, () =>
    update({ compose: { composeFile: PLAIN }, policy: { ...policy, compose: { level: ComposePolicyLevel.PRIVILEGED } } }),
  );
  await refused(`${who}: / added to the policy's host paths`, () =>
    update({ compose: { composeFile: PLAIN }, policy: { ...policy, compose: { ...policy.compose, allowedHostPaths: ["/"] } } }),
  );
  await refused(`${who}: policy written empty`, () => update({ compose: { composeFile: PLAIN }, policy: {} }));
  await refused(
    `${who}: policy cleared by update mask`,
    () => update({ compose: { composeFile: PLAIN } }, { updateMask: mask("desired_state.tenant.policy") }),
    { keeps: "policy" },
  );
  await refused(`${who}: policy's pool changed by update mask`, () =>
    update({ policy: { nodeSelector: { pool: "b" } } }, { updateMask: mask("desired_state.tenant.policy.node_selector") }),
  );
  await refused(
    `${who}: the whole tenant replaced by update mask, no policy`,
    () => update({ compose: { composeFile: PLAIN } }, { updateMask: mask("desired_state.tenant") }),
    { keeps: "policy" },
  );
  adhoc.push(`${who}: ${await adhocOnB(ctl, secret)}`);
  // Put back inside the pool for the next key.
  await place(POOL_A).catch(() => undefined);
}

/** The figures of the probe, with their bars. */
function figuresOf(t: Tally, inside: { ok: number; tried: number }, adhoc: string[]): Figure[] {
  return [
    info(SECTION, "writes by keys scoped to t1 that must be refused (operator and generator)", String(t.attempts)),
    exactly(
      SECTION,
      "wrongful successes: t1 or its service placed on t2's node, host privileges, plugin drivers, its policy set or changed (a write answered, or a spec changed)",
      t.wrongful.length,
      0,
      t.attempts,
    ),
    info(
      SECTION,
      "writes that cleared t1's policy by an update mask: answered, the policy kept",
      `${t.keptNotRefused.length} (the mask's policy path ignored; see the log)`,
    ),
    info(
      SECTION,
      "refusals after which a resource version moved with no spec changed (the reconciler's status writes)",
      String(t.versionOnly.length),
    ),
    exactly(SECTION, "refusals that were not FORBIDDEN (apply: any refusal)", t.otherCode.length, 0, t.attempts),
    exactly(
      SECTION,
      "benign writes by the same keys refused (compose without privileges, a service without placement)",
      t.refusedBenign.length,
      0,
      4,
    ),
    exactly(SECTION, "placements inside the pool an admin gave (tenant and service) refused", inside.tried - inside.ok, 0, inside.tried),
    info(SECTION, "ad-hoc orders naming t1 queued on t2's node by a scoped key (not covered by the pool rule)", adhoc.join("; ")),
  ];
}

// Capability routing and pool orders, the pure rules: the capability vocabulary and what an older
// agent's report implies, which nodes a pool order admits, why one waits, placement that requires
// capabilities, and ListResources' node filters.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ComposeVariant, NodeCapabilitiesSchema, NodeLiveness, ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import {
  capabilitiesOf,
  derivedCapabilities,
  isCapabilityName,
  missingCapabilities,
  orderCapability,
  orderTypesNeeding,
} from "../common/node-capabilities.js";
import { ORDER_TYPES, type OrderType } from "../common/order-kinds.js";
import { SSH_ORDER_TYPES } from "../agent/relay/ssh-executors.js";
import { poolEligibility, poolWait } from "../controller/dispatch/pool-eligibility.js";
import { goesBefore } from "../controller/dispatch/pool-orders.js";
import { placeOn } from "../controller/reconcile/placement.js";
import { nodeFilter } from "../controller/nodes/node-filter.js";
import { agentCapabilities } from "../agent/capabilities.js";
import { poolSelector } from "../cli/commands/order-create.js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";

const OLD_AGENT = {
  dockerAvailable: true,
  composeVariant: ComposeVariant.PLUGIN_V2,
  allowedCommands: ["true", "uptime", "/usr/bin/df"],
  allowedProcessSources: ["/opt/artifacts"],
  systemd: true,
  proxy: "haproxy 2.6.12",
};

function node(
  id: string,
  o: {
    labels?: Record<string, string>;
    caps?: MessageInitShape<typeof NodeCapabilitiesSchema>;
    disabled?: boolean;
    liveness?: NodeLiveness;
  } = {},
): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "node",
    desiredState: { kind: { case: "node", value: { labels: o.labels ?? {}, disabled: o.disabled ?? false } } },
    currentState: {
      kind: {
        case: "node",
        value: { capabilities: create(NodeCapabilitiesSchema, o.caps ?? {}), liveness: o.liveness ?? NodeLiveness.ONLINE },
      },
    },
  });
}

function poolOrder(selector: Record<string, string>, required: string[] = [], argv = ["true"]): WorkOrder {
  return create(WorkOrderSchema, {
    id: "pool-1",
    type: WorkOrderType.EXECUTE_COMMAND,
    status: WorkOrderStatus.PENDING,
    target: { pool: { nodeSelector: selector }, requiredCapabilities: required },
    action: { kind: { case: "executeCommand", value: { command: { argv } } } },
  });
}

describe("capability names", () => {
  it("an older agent's report implies its capabilities; a path-named program gives none", () => {
    expect(derivedCapabilities(create(NodeCapabilitiesSchema, OLD_AGENT))).toEqual([
      "command.true",
      "command.uptime",
      "compose.deploy",
      "compose.rollback",
      "container.deploy",
      "engine.inspect",
      "host.files",
      "host.probe",
      "process.deploy",
      "process.systemd",
      "proxy.haproxy",
    ]);
    expect(derivedCapabilities(create(NodeCapabilitiesSchema, { dockerAvailable: true, composeVariant: ComposeVariant.NONE }))).toEqual([
      "container.deploy",
      "engine.inspect",
      "host.files",
      "host.probe",
    ]);
  });

  it("what an agent reports is taken as it is, over what its fields imply", () => {
    const reported = create(NodeCapabilitiesSchema, { ...OLD_AGENT, capabilities: ["exec.terminal"] });
    expect(capabilitiesOf(reported)).toEqual(["exec.terminal"]);
    expect(missingCapabilities(reported, ["exec.terminal", "compose.deploy"])).toEqual(["compose.deploy"]);
    expect(missingCapabilities(undefined, ["compose.deploy"])).toEqual(["compose.deploy"]);
    expect(missingCapabilities(undefined, [])).toEqual([]);
  });

  it("names are lowercase dotted words", () => {
    for (const ok of ["compose.deploy", "command.true", "command.apt-get", "x.y.z"]) expect(isCapabilityName(ok)).toBe(true);
    for (const bad of ["compose", "Compose.deploy", "command./usr/bin/df", "a. b", ".x", ""]) expect(isCapabilityName(bad)).toBe(false);
  });

  it("the agent reports terminals with an engine, and nothing its executors cannot run", () => {
    const caps = create(NodeCapabilitiesSchema, { dockerAvailable: true, composeVariant: ComposeVariant.PLUGIN_V2 });
    expect(agentCapabilities(caps)).toEqual([
      "compose.deploy",
      "compose.rollback",
      "container.deploy",
      "engine.inspect",
      "exec.terminal",
      "host.files",
      "host.probe",
      "webhook.deliver",
    ]);
    expect(agentCapabilities(caps, (t) => t !== WorkOrderType.ROLLBACK)).not.toContain("compose.rollback");
    // Every agent POSTs from its host; one whose table does not run deliver_webhook does not say so.
    expect(agentCapabilities(caps, (t) => t !== WorkOrderType.DELIVER_WEBHOOK)).not.toContain("webhook.deliver");
    expect(agentCapabilities(caps, (t) => t !== WorkOrderType.READ_STICKER)).not.toContain("host.files");
    expect(agentCapabilities(create(NodeCapabilitiesSchema, {}))).toEqual(["host.files", "host.probe", "webhook.deliver"]);
    const commands = create(NodeCapabilitiesSchema, { allowedCommands: ["true"], allowedProcessSources: ["/opt"], systemd: true });
    expect(agentCapabilities(commands, (t) => t !== WorkOrderType.EXECUTE_COMMAND)).not.toContain("command.true");
    // systemd supervision goes with deploying processes at all.
    expect(agentCapabilities(commands, (t) => t !== WorkOrderType.CONTROL_PROCESS)).not.toContain("process.systemd");
  });

  it("a relay's SSH node, whose table runs engine kinds and process modules, reports neither host files, probes, containers nor commands", () => {
    const caps = create(NodeCapabilitiesSchema, {
      dockerAvailable: true,
      composeVariant: ComposeVariant.PLUGIN_V2,
      allowedCommands: ["true"],
      allowedProcessSources: ["/opt"],
    });
    const reported = agentCapabilities(caps, (t) => SSH_ORDER_TYPES.has(t as OrderType));
    for (const refused of ["host.files", "host.probe", "container.deploy", "command.true", "webhook.deliver"]) {
      expect(reported).not.toContain(refused);
    }
    // Process modules run on the node (agent/relay/ssh-process-executors.ts), from the relay's sources.
    expect(reported).toEqual(expect.arrayContaining(["compose.deploy", "compose.rollback", "engine.inspect", "process.deploy"]));
  });

  it("every order type names the capability its node needs; a command's is its program's", () => {
    for (const type of ORDER_TYPES) expect(orderCapability(type, undefined).why).not.toBe("unknown type");
    const command = (argv: string[]) =>
      create(WorkOrderSchema, { action: { kind: { case: "executeCommand", value: { command: { argv } } } } });
    expect(orderCapability(WorkOrderType.EXECUTE_COMMAND, command(["uptime", "-p"]).action)).toEqual({ name: "command.uptime" });
    expect(orderCapability(WorkOrderType.EXECUTE_COMMAND, command(["/usr/bin/df"]).action)).toEqual({
      name: undefined,
      why: "program path",
    });
    expect(orderCapability(WorkOrderType.DEPLOY_CONTAINER, undefined)).toEqual({ name: "container.deploy" });
    expect(orderCapability(WorkOrderType.UPLOAD_FILES, undefined)).toEqual({ name: "host.files" });
    expect(orderCapability(WorkOrderType.UNSPECIFIED, undefined).why).toBe("unknown type");
    expect(orderTypesNeeding("command.anything")).toEqual([WorkOrderType.EXECUTE_COMMAND]);
  });
});

describe("which nodes a pool order admits", () => {
  const order = poolOrder({ role: "web" }, ["compose.deploy"]);
  const good = { labels: { role: "web" }, caps: OLD_AGENT };

  it("an enabled node of the pool holding the capabilities and permitting the command is eligible", () => {
    expect(poolEligibility(order, node("n1", good))).toEqual({ ok: true });
  });

  it("a disabled, foreign, unregistered or incapable node is not, and says why", () => {
    expect(poolEligibility(order, node("n1", { ...good, disabled: true }))).toMatchObject({ ok: false, reason: "NODE_DISABLED" });
    expect(poolEligibility(order, node("n1", { ...good, labels: { role: "db" } }))).toMatchObject({ ok: false, reason: "NOT_IN_POOL" });
    expect(poolEligibility(order, undefined)).toMatchObject({ ok: false, reason: "NODE_DELETED" });
    const noCompose = { ...good, caps: { ...OLD_AGENT, composeVariant: ComposeVariant.NONE } };
    expect(poolEligibility(order, node("n1", noCompose))).toMatchObject({ ok: false, reason: "CAPABILITY_MISSING" });
    const neverReported = node("n1", { labels: { role: "web" } });
    neverReported.currentState = undefined;
    expect(poolEligibility(order, neverReported)).toMatchObject({ ok: false, reason: "CAPABILITY_MISSING" });
  });

  it("a node whose allow-list lacks the order's program is not eligible (the kind's permits)", () => {
    const other = poolOrder({ role: "web" }, [], ["reboot"]);
    expect(poolEligibility(other, node("n1", good))).toMatchObject({ ok: false, reason: "NOT_PERMITTED" });
  });

  it("a pool order needs its type's capability even when it requires none", () => {
    const pool = { nodeSelector: { role: "web" } };
    const deploy = create(WorkOrderSchema, {
      id: "pool-c",
      type: WorkOrderType.DEPLOY_CONTAINER,
      status: WorkOrderStatus.PENDING,
      target: { pool },
      action: { kind: { case: "deployContainer", value: { spec: { name: "web", image: "nginx" } } } },
    });
    const upload = create(WorkOrderSchema, {
      id: "pool-u",
      type: WorkOrderType.UPLOAD_FILES,
      status: WorkOrderStatus.PENDING,
      target: { pool },
      action: { kind: { case: "uploadFiles", value: { files: [{ path: "/etc/motd", content: new Uint8Array([104]) }] } } },
    });
    expect(poolEligibility(deploy, node("n1", good))).toEqual({ ok: true });
    const noEngine = node("n1", { ...good, caps: { ...OLD_AGENT, dockerAvailable: false } });
    expect(poolEligibility(deploy, noEngine)).toMatchObject({
      ok: false,
      reason: "CAPABILITY_MISSING",
      message: expect.stringContaining("container.deploy"),
    });
    // An SSH node reports what its relay runs there: an engine, no host files.
    const ssh = node("n2", { labels: { role: "web" }, caps: { ...OLD_AGENT, capabilities: ["compose.deploy", "container.deploy"] } });
    expect(poolEligibility(upload, ssh)).toMatchObject({
      ok: false,
      reason: "CAPABILITY_MISSING",
      message: expect.stringContaining("host.files"),
    });
    expect(poolEligibility(upload, node("n1", good))).toEqual({ ok: true });
    expect(poolWait(upload, [ssh]).message).toContain("host.files");
  });

  it("a node that has not reported its capabilities takes no pool order, whatever it requires", () => {
    const silent = node("n1", { labels: { role: "web" } });
    silent.currentState = undefined;
    expect(poolEligibility(poolOrder({ role: "web" }), silent)).toMatchObject({ ok: false, reason: "CAPABILITY_MISSING" });
  });

  it("a command given by its path needs no name: the node's allow-list decides", () => {
    expect(poolEligibility(poolOrder({ role: "web" }, [], ["/usr/bin/df"]), node("n1", good))).toEqual({ ok: true });
    expect(poolEligibility(poolOrder({ role: "web" }, [], ["/usr/bin/du"]), node("n1", good))).toMatchObject({ reason: "NOT_PERMITTED" });
  });

  it("an empty selector is every node; labels an admin trusts count as placement's do", () => {
    expect(poolEligibility(poolOrder({}), node("n1", { caps: OLD_AGENT }))).toEqual({ ok: true });
  });

  it("a pool with no eligible online node waits with NO_ELIGIBLE_NODE, counting why each node fails", () => {
    const wait = poolWait(order, [
      node("a", { ...good, disabled: true }),
      node("b", { ...good, labels: {} }),
      node("c", { ...good, liveness: NodeLiveness.OFFLINE }),
    ]);
    expect(wait.reason).toBe("NO_ELIGIBLE_NODE");
    expect(wait.eligibleNodes).toBe(0);
    expect(wait.message).toContain("compose.deploy");
    expect(wait.message).toContain("1 NODE_DISABLED");
    expect(wait.message).toContain("1 NOT_IN_POOL");
    expect(wait.message).toContain("1 NODE_NOT_ONLINE");
    expect(poolWait(order, []).message).toContain("no node is registered");
    const ready = poolWait(order, [node("a", good), node("b", good)]);
    expect([ready.reason, ready.eligibleNodes]).toEqual(["WAITING_FOR_CLAIM", 2]);
  });

  it("orders go highest priority first, then oldest", () => {
    const mk = (id: string, priority: number, s: number) =>
      create(WorkOrderSchema, { id, priority, createdAt: timestampFromDate(new Date(1_000_000 + s * 1000)) });
    expect(goesBefore(mk("a", 1, 9), mk("b", 0, 1))).toBe(true);
    expect(goesBefore(mk("a", 0, 2), mk("b", 0, 1))).toBe(false);
    expect(goesBefore(mk("a", 0, 1), mk("b", 0, 1))).toBe(true);
  });
});

describe("placement and listings that require capabilities", () => {
  const nodes = [
    node("n1", { labels: { role: "web" }, caps: OLD_AGENT }),
    node("n2", { labels: { role: "web" }, caps: { capabilities: ["container.deploy"] } }),
    node("n3", { labels: { role: "web" }, caps: { ...OLD_AGENT, capabilities: ["compose.deploy"] }, liveness: NodeLiveness.OFFLINE }),
  ];

  it("a placement places only on nodes holding its required capabilities", () => {
    const policy = { nodeSelector: { role: "web" }, requiredCapabilities: ["compose.deploy"] };
    expect(placeOn(undefined, nodes)).toEqual([]);
    expect(placeOn({ $typeName: "skipper.v1.DeploymentPolicy", targetNodeId: "", ...policy }, nodes)).toEqual(["n1", "n3"]);
    expect(
      placeOn(
        { $typeName: "skipper.v1.DeploymentPolicy", targetNodeId: "n2", nodeSelector: {}, requiredCapabilities: ["compose.deploy"] },
        nodes,
      ),
    ).toEqual([]);
  });

  it("nodes are listed by capability and by liveness", () => {
    const by = (capabilities: string[], liveness: NodeLiveness[] = []) =>
      nodes.filter(nodeFilter({ capabilities, liveness })).map((n) => n.id);
    expect(by([])).toEqual(["n1", "n2", "n3"]);
    expect(by(["compose.deploy"])).toEqual(["n1", "n3"]);
    expect(by(["compose.deploy"], [NodeLiveness.ONLINE])).toEqual(["n1"]);
    expect(by(["container.deploy", "command.true"])).toEqual(["n1"]);
    expect(by([], [NodeLiveness.OFFLINE, NodeLiveness.DEGRADED])).toEqual(["n3"]);
    expect(() => nodeFilter({ capabilities: ["Not A Name"], liveness: [] })).toThrow(/capability name/);
  });
});

describe("the CLI's pool selector", () => {
  it("reads key=value pairs, and * or nothing as every node", () => {
    expect(poolSelector("role=web, zone=a")).toEqual({ role: "web", zone: "a" });
    expect(poolSelector("*")).toEqual({});
    expect(() => poolSelector("role!=web")).toThrow(/key=value/);
  });
});

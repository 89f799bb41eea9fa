// The dashboard's pages, each a function of what the API answers now: the fleet, one tenant, one
// node, and the deliveries with each one's matrix (delivery-view.ts). They are rendered again
// whenever an event arrives (main.ts), so what they show follows the controller without a reload;
// the tenant's logs view (logs-view.ts) is the one part that keeps its state, handed in and placed
// again each time (the delivery view keeps only which cells are open and its last action's notice).
import { failureHeadline, resultLine } from "../../common/failure-cause.js";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ExplainStepKind } from "../../gen/skipper/v1/resource_service_pb.js";
import { ConvergenceStatus, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { livenessName } from "../../common/node-liveness-name.js";
import { RolloutNodeState, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { AgentUpdateState } from "../../gen/skipper/v1/agent_update_pb.js";
import type { Api } from "./api.js";
import { h, short, status, table } from "./dom.js";

export type { Caller } from "./delivery-actions.js";
export { deliveriesPage, deliveryPage } from "./delivery-view.js";

// How many of a tenant's latest work orders and events its page shows.
const RECENT = 200;
const when = (t: Timestamp | undefined) => (t ? timestampDate(t).toLocaleString() : "—");
// Not judged yet (unset) is "-", as the CLI shows it; the others by their short names.
const convergenceName = (status: ConvergenceStatus | undefined) => (status ? (ConvergenceStatus[status] ?? String(status)) : "-");
const convergenceOf = (r: Resource) => convergenceName(r.convergence?.status);

/** Every resource of the type, a page of 1,000 at a time (a fleet may hold thousands). */
async function listAll(api: Api, resourceType: "node" | "tenant"): Promise<Resource[]> {
  const all: Resource[] = [];
  let pageToken = "";
  do {
    const page = await api.resources.listResources({ resourceType, pageSize: 1000, pageToken });
    all.push(...page.resources);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return all;
}

/** Every node and tenant, with what needs attention first in mind; `join`: the "Join a host" view (join-view.ts). */
export async function overview(api: Api, join?: HTMLElement): Promise<HTMLElement> {
  const [nodes, tenants] = await Promise.all([listAll(api, "node"), listAll(api, "tenant")]);
  return h(
    "section",
    {},
    h("h1", {}, "Fleet"),
    h("h2", {}, `Nodes (${nodes.length})`),
    join,
    agentVersions(nodes),
    table(
      ["Node", "Liveness", "Agent", "Labels", "Last heartbeat", "Projects"],
      nodes.map((n) => {
        const st = n.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
        const spec = n.desiredState?.kind.case === "node" ? n.desiredState.kind.value : undefined;
        const labels = { ...(spec?.labels ?? {}), ...(st?.labels ?? {}) };
        return [
          h("a", { href: `#/nodes/${encodeURIComponent(n.id)}` }, n.id),
          status(spec?.disabled ? "DISABLED" : livenessName(st?.liveness)),
          agentCell(st),
          Object.entries(labels)
            .map(([k, v]) => `${k}=${v}`)
            .join(", ") || "—",
          when(st?.lastHeartbeatAt),
          String(st?.projects.length ?? 0),
        ];
      }),
      "no nodes registered",
      "nodes",
    ),
    h("h2", {}, `Tenants (${tenants.length})`),
    table(
      ["Tenant", "Convergence", "Why", "Nodes"],
      tenants.map((t) => {
        const st = t.currentState?.kind.case === "tenant" ? t.currentState.kind.value : undefined;
        return [
          h("a", { href: `#/tenants/${encodeURIComponent(t.id)}` }, t.id),
          status(convergenceOf(t)),
          t.convergence?.message ?? "",
          (st?.targets ?? []).map((x) => x.nodeId).join(", ") || "—",
        ];
      }),
      "no tenants",
      "tenants",
    ),
  );
}

/** One tenant: desired against applied per node, its logs (`logs`, kept by main.ts), why, its rollouts, orders and events. */
export async function tenantPage(api: Api, id: string, logs: HTMLElement): Promise<HTMLElement> {
  const [explained, rollouts, orders, events] = await Promise.all([
    api.resources.explainResource({ resourceType: "tenant", id }),
    api.rollouts.listRollouts({ tenantId: id, pageSize: 10 }),
    api.orders.listWorkOrders({ tenantId: id, pageSize: RECENT, newestFirst: true }),
    api.events.listEvents({ tenantId: id, pageSize: RECENT, newestFirst: true }),
  ]);
  const t = explained.resource!;
  const st = t.currentState?.kind.case === "tenant" ? t.currentState.kind.value : undefined;
  const blocking = explained.steps.findLastIndex((s) => s.kind === ExplainStepKind.VERDICT);
  const verdictBad = (explained.convergence?.status ?? 0) !== ConvergenceStatus.CONVERGED;
  return h(
    "section",
    { "data-tenant": id },
    h("p", {}, h("a", { href: "#/" }, "← Fleet")),
    h("h1", {}, `Tenant ${id} `, status(convergenceOf(t))),
    h("p", { class: "muted", "data-testid": "convergence-message" }, t.convergence?.message ?? ""),
    h("h2", {}, "Desired and applied, per node"),
    table(
      ["Node", "State", "Desired spec", "Applied spec", "Last result"],
      (st?.targets ?? []).map((x) => [
        h("a", { href: `#/nodes/${encodeURIComponent(x.nodeId)}` }, x.nodeId),
        status(convergenceName(x.convergence?.status)),
        h("code", {}, short(x.desiredHash)),
        h("code", {}, short(x.appliedHash)),
        x.lastResultCode ? failureHeadline(x.lastResultCode, "", x.lastFailureCause) : "—",
      ]),
      "no node targeted",
      "targets",
    ),
    h("h2", {}, "Logs"),
    logs,
    h("h2", {}, "Why: desired revision → orders → results → observed → verdict"),
    h(
      "ol",
      { class: "steps", "data-testid": "explain" },
      ...explained.steps.map((s, i) =>
        h(
          "li",
          { class: i === blocking && verdictBad ? "blocker" : undefined },
          h("span", { class: "muted" }, `${when(s.at)} · ${ExplainStepKind[s.kind] ?? s.kind} `),
          s.summary,
        ),
      ),
    ),
    h("h2", {}, "Rollouts"),
    rollouts.rollouts.length === 0
      ? h("p", { class: "muted" }, "none")
      : h(
          "div",
          { "data-testid": "rollouts" },
          ...rollouts.rollouts.map((r) =>
            h(
              "div",
              { class: "wave" },
              h("strong", {}, `${short(r.toSpecHash)} `),
              status(RolloutStatus[r.status] ?? "UNKNOWN"),
              ` ${r.message}`,
              ...r.waves.map((w) =>
                h(
                  "div",
                  { class: "muted" },
                  `wave ${w.name}: `,
                  w.nodes.map((n) => `${n.nodeId} ${RolloutNodeState[n.state] ?? n.state}`).join(", ") || "no nodes",
                ),
              ),
            ),
          ),
        ),
    h("h2", {}, "Work orders"),
    table(
      ["Created", "Type", "Node", "Status", "Result"],
      orders.workOrders.map((o) => [
        when(o.createdAt),
        WorkOrderType[o.type] ?? String(o.type),
        o.target?.nodeId ?? "",
        // A superseded order is CANCELLED with code SUPERSEDED: said as such, greyed.
        status(o.result?.code === "SUPERSEDED" ? "SUPERSEDED" : (WorkOrderStatus[o.status] ?? "UNKNOWN")),
        o.result ? resultLine(o.result.code, o.result.message, o.result.cause) : "",
      ]),
      "no work orders",
      "orders",
    ),
    h("h2", {}, "Events"),
    table(
      ["Time", "Event", "Resource", "Node"],
      events.events.map((e) => [when(e.timestamp), e.type, `${e.resourceType}/${e.resourceId}`, e.nodeId]),
      "no events",
      "events",
    ),
  );
}

/** One node: liveness, what it runs (projects, containers, health) and its last heartbeat. */
export async function nodePage(api: Api, id: string): Promise<HTMLElement> {
  const n = (await api.resources.getResource({ resourceType: "node", id })).resource!;
  const st = n.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
  const caps = st?.capabilities;
  return h(
    "section",
    { "data-node": id },
    h("p", {}, h("a", { href: "#/" }, "← Fleet")),
    h("h1", {}, `Node ${id} `, status(livenessName(st?.liveness))),
    h(
      "p",
      { class: "muted" },
      `last heartbeat ${when(st?.lastHeartbeatAt)} · agent ${st?.agentVersion || "—"} · docker ${caps?.dockerVersion || "—"} · compose ${caps?.composeVersion || "—"}`,
    ),
    h("h2", {}, "Projects"),
    table(
      ["Project", "Tenant", "Spec", "Service", "State", "Containers"],
      (st?.projects ?? []).flatMap((p) =>
        p.services.map((s) => [
          p.projectName,
          h("a", { href: `#/tenants/${encodeURIComponent(p.tenantId)}` }, p.tenantId),
          h("code", {}, short(p.specHash)),
          s.service,
          status(s.state.toUpperCase()),
          s.containers.map((c) => `${c.name} ${c.state}${c.health ? ` (${c.health})` : ""}`).join(", ") || "—",
        ]),
      ),
      "no projects",
      "projects",
    ),
  );
}

type NodeStatusOf = Extract<NonNullable<Resource["currentState"]>["kind"], { case: "node" }>["value"];

/** The agent's version, and where its updater is when an update is under way or went back. */
function agentCell(st: NodeStatusOf | undefined): string {
  const v = st?.agentVersion || "—";
  const u = st?.agentUpdate;
  const state = u ? (AgentUpdateState[u.state] ?? "") : "";
  if (!u || state === "IDLE" || state === "CONFIRMED" || state === "UNSPECIFIED") return v;
  return `${v} (${state.toLowerCase().replaceAll("_", " ")}${u.targetVersion ? ` ${u.targetVersion}` : ""})`;
}

/** The agent versions the fleet runs at a glance: "0.2.0 × 3 · 0.1.0 × 1". */
function agentVersions(nodes: readonly Resource[]): HTMLElement {
  const counts = new Map<string, number>();
  for (const n of nodes) {
    const v = (n.currentState?.kind.case === "node" ? n.currentState.kind.value.agentVersion : "") || "unknown";
    counts.set(v, (counts.get(v) ?? 0) + 1);
  }
  const line = [...counts.entries()]
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .map(([v, c]) => `${v} × ${c}`)
    .join(" · ");
  return h("p", { "data-agent-versions": "" }, `Agent versions: ${line || "—"}`);
}

// `skipper get`, `skipper describe` and `skipper nodes`: resources read through ResourceService,
// as tables (columns per type: resource-columns.ts) or as the API's JSON/YAML documents.
import { toJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Command } from "commander";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { calls } from "../command-rpcs.js";
import { stringify } from "yaml";
import {
  ConvergenceStatus,
  NodeLiveness,
  ResourceSpecSchema,
  ResourceStatusSchema,
  ResourceSchema,
  type Resource,
  NodeTransport,
} from "../../gen/skipper/v1/resource_pb.js";
import { redact } from "../../common/logging/redact.js";
import { livenessName } from "../../common/node-liveness-name.js";
import type { ResourceType } from "../../common/ids.js";
import { CliError } from "../errors.js";
import { eventTable } from "../event-lines.js";
import { age, asJson, documents, enumName, labels, outputFormat, table, when, type OutputFormat } from "../output.js";
import { convergence, nodeLabels, resourceTable } from "../resource-columns.js";
import { resourceType } from "../resource-types.js";
import type { CommandContext } from "../command-context.js";

interface GetOptions {
  output?: string;
  selector?: string;
  tenant?: string;
  includeDeleted?: boolean;
  /** Nodes only: every one of these capabilities (--capability, repeatable). */
  capability?: string[];
  /** Nodes only: one of these livenesses (--liveness online,degraded). */
  liveness?: string;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];

// --liveness online,degraded to the contract's values (never_seen is UNSPECIFIED).
function livenessValues(text: string | undefined): NodeLiveness[] {
  if (!text) return [];
  return text.split(",").map((raw) => {
    const name = raw.trim().toUpperCase();
    if (name === "NEVER_SEEN") return NodeLiveness.UNSPECIFIED;
    const v = NodeLiveness[name as keyof typeof NodeLiveness];
    if (typeof v !== "number" || name === "UNSPECIFIED")
      throw new CliError(`--liveness: ${raw} is not online, degraded, offline or never_seen`);
    return v;
  });
}

export function registerGet(program: Command, ctx: CommandContext): void {
  calls(program.command("get"), ResourceService.method.getResource, ResourceService.method.listResources)
    .argument("<type>", "tenant, node, service, secret, network, volume, resource_limits, freeze, deployment or rollout (plurals too)")
    .argument("[id]", "one resource; without it, all of the type")
    .description("list resources of a type, or show one")
    .option("-o, --output <format>", "table, wide, json or yaml", "table")
    .option("-l, --selector <labels>", "only resources whose labels match, e.g. env=prod,region!=us,tier")
    .option("--tenant <id>", "only this tenant and what names it as its tenant")
    .option("--include-deleted", "also show deleted resources (tombstones)")
    .option("--capability <name>", "nodes only: those holding this capability, e.g. compose.deploy (repeatable)", collect)
    .option("--liveness <list>", "nodes only: online, degraded, offline, never_seen (comma-separated)")
    .addHelpText(
      "after",
      `
Secret values never appear: the API does not return them (a secret shows its value names and
versions). json and yaml are the REST API's own documents, and can be applied again.

Examples:
  $ skipper get tenants
  $ skipper get services -l env=prod -o wide
  $ skipper get tenant example-tenant -o yaml
  $ skipper get nodes -o json | jq -r '.[].id'`,
    )
    .action(async (typeName: string, id: string | undefined, opts: GetOptions) => {
      const type = resourceType(typeName);
      const format = outputFormat(opts.output);
      if (id !== undefined && opts.selector) throw new CliError("-l selects among many: give a type without an id, or no -l");
      if (id !== undefined) {
        const r = (await ctx.clients().resources.getResource({ resourceType: type, id, includeDeleted: opts.includeDeleted ?? false }))
          .resource!;
        print(ctx, type, [r], format, false);
        return;
      }
      const items = await listAll(ctx, type, opts);
      if (items.length === 0 && (format === "table" || format === "wide")) {
        ctx.io.err(
          `No ${type === "resource_limits" ? "resource limits" : `${type}s`} found${opts.selector ? ` matching ${opts.selector}` : ""}.`,
        );
        return;
      }
      print(ctx, type, items, format, true);
    });

  calls(program.command("nodes"), ResourceService.method.listResources)
    .description("list the nodes: liveness, labels, agent, last heartbeat (same as `get nodes`)")
    .option("-o, --output <format>", "table, wide, json or yaml", "table")
    .option("-l, --selector <labels>", "only nodes whose labels match, e.g. env=prod")
    .option("--capability <name>", "only nodes holding this capability, e.g. compose.deploy (repeatable)", collect)
    .option("--liveness <list>", "only nodes of these livenesses: online, degraded, offline, never_seen (comma-separated)")
    .addHelpText(
      "after",
      "\nExamples:\n  $ skipper nodes\n  $ skipper nodes -o wide -l env=dev\n  $ skipper nodes --capability compose.deploy --liveness online",
    )
    .action(async (opts: GetOptions) => {
      const format = outputFormat(opts.output);
      const items = await listAll(ctx, "node", opts);
      if (items.length === 0 && (format === "table" || format === "wide")) ctx.io.err("No nodes found.");
      else print(ctx, "node", items, format, true);
    });

  calls(program.command("describe"), ResourceService.method.getResource, EventService.method.listEvents)
    .argument("<type>", "the resource type (tenant, node, service, ...)")
    .argument("<id>", "the resource's id")
    .description("show one resource in detail: labels, convergence, desired and observed state, recent events")
    .option("-o, --output <format>", "json or yaml instead of the description")
    .addHelpText(
      "after",
      `
Values under secret-shaped keys (passwords, tokens, credentials in compose files) are shown as
[REDACTED] in the description; secret resources never carry their values.

Examples:
  $ skipper describe tenant example-tenant
  $ skipper describe node host-1`,
    )
    .action(async (typeName: string, id: string, opts: { output?: string }) => {
      const type = resourceType(typeName);
      const clients = ctx.clients();
      const r = (await clients.resources.getResource({ resourceType: type, id, includeDeleted: true })).resource!;
      if (opts.output !== undefined) {
        print(ctx, type, [r], outputFormat(opts.output, ["json", "yaml"]), false);
        return;
      }
      const since = timestampFromDate(new Date(Date.now() - 24 * 3_600_000));
      const events = [];
      let pageToken = "";
      for (let page = 0; page < 10; page++) {
        const res = await clients.events.listEvents({ resourceId: id, since, pageSize: 1000, pageToken });
        events.push(...res.events.filter((e) => e.resourceType === "" || e.resourceType === type));
        pageToken = res.nextPageToken;
        if (!pageToken) break;
      }
      for (const line of describe(r, ctx)) ctx.io.out(line);
      ctx.io.out("");
      ctx.io.out("Events (last 24 h, newest last):");
      ctx.io.out(events.length > 0 ? indent(eventTable(events.slice(-10))) : "  none");
    });
}

async function listAll(ctx: CommandContext, type: ResourceType, opts: GetOptions): Promise<Resource[]> {
  const items: Resource[] = [];
  let pageToken = "";
  do {
    const res = await ctx.clients().resources.listResources({
      resourceType: type,
      labelSelector: opts.selector ?? "",
      tenantId: opts.tenant ?? "",
      includeDeleted: opts.includeDeleted ?? false,
      capabilities: opts.capability ?? [],
      liveness: livenessValues(opts.liveness),
      pageSize: 1000,
      pageToken,
    });
    items.push(...res.resources);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return items;
}

function print(ctx: CommandContext, type: ResourceType, items: Resource[], format: OutputFormat, list: boolean): void {
  if (format === "json" || format === "yaml") {
    ctx.io.out(
      documents(
        format,
        items.map((r) => asJson(ResourceSchema, r)),
        list,
      ),
    );
    return;
  }
  ctx.io.out(resourceTable(type, items, format === "wide", ctx.io));
}

/** The description's lines. */
function describe(r: Resource, ctx: CommandContext): string[] {
  const c = r.convergence;
  const lines = [
    `Name:         ${r.id}`,
    `Type:         ${r.resourceType}`,
    `Labels:       ${labels(r.resourceType === "node" ? nodeLabels(r) : r.metadata?.labels)}`,
    `Annotations:  ${labels(r.metadata?.annotations)}`,
    `Version:      ${r.metadata?.resourceVersion ?? "-"}`,
    `Created:      ${when(r.createdAt)} (${age(r.createdAt)} ago)`,
    `Updated:      ${when(r.updatedAt)} (${age(r.updatedAt)} ago)`,
  ];
  if (r.deletion)
    lines.push(`Deleted:      ${when(r.deletion.deletedAt)}${r.deletion.cascadedFrom ? ` (with ${r.deletion.cascadedFrom})` : ""}`);
  if (c) {
    lines.push(`Convergence:  ${convergence(r, ctx.io)}${c.message ? ` - ${c.message}` : ""}`);
    const about = [
      c.nodeId && `node ${c.nodeId}`,
      c.workOrderId && `order ${c.workOrderId}`,
      c.checkedAt && `checked ${age(c.checkedAt)} ago`,
    ].filter(Boolean);
    if (about.length > 0) lines.push(`              ${about.join(", ")}`);
    if (c.status !== ConvergenceStatus.CONVERGED && c.status !== ConvergenceStatus.UNSPECIFIED) {
      lines.push(`              (why: skipper explain ${r.resourceType} ${r.id})`);
    }
  }
  lines.push(
    "",
    "Desired state:",
    ...yamlOf(r.desiredState ? toJson(ResourceSpecSchema, r.desiredState, { useProtoFieldName: true }) : {}),
  );
  lines.push("", "Observed:", ...observed(r));
  return lines;
}

function observed(r: Resource): string[] {
  const st = r.currentState?.kind;
  if (!st?.case) return ["  nothing reported yet"];
  if (st.case === "tenant") {
    const rows = st.value.targets.map((t) => [
      t.nodeId,
      t.desiredHash.slice(0, 12) || "-",
      t.appliedHash.slice(0, 12) || "-",
      t.lastWorkOrderId || "-",
      t.lastResultCode || "-",
      enumName(ConvergenceStatus, t.convergence?.status ?? 0),
    ]);
    const out =
      rows.length > 0
        ? indent(table(["NODE", "DESIRED", "APPLIED", "LAST ORDER", "RESULT", "CONVERGENCE"], rows)).split("\n")
        : ["  no nodes"];
    if (st.value.rolloutId) out.push(`  latest rollout: ${st.value.rolloutId} (skipper rollout status ${r.id})`);
    return out;
  }
  if (st.case === "node") {
    const n = st.value;
    const caps = n.capabilities;
    const out = [
      `  Liveness:   ${livenessName(n.liveness)} (last heartbeat ${when(n.lastHeartbeatAt)}, ${age(n.lastHeartbeatAt)} ago)`,
      `  Agent:      ${n.agentVersion || "-"} (up ${n.uptimeSeconds}s, ${transportName(n.transport)}, beats every ${Number(n.heartbeatIntervalMs) / 1000}s)`,
      `  Engine:     docker ${caps?.dockerVersion || "-"}, compose ${caps?.composeVersion || "-"}, ${caps?.os || "?"}/${caps?.arch || "?"}`,
      `  Reported labels: ${labels(n.labels)}`,
      `  Commands:   ${caps?.allowedCommands.join(", ") || "-"}`,
    ];
    const projects = n.projects.map((p) => [
      p.projectName,
      p.tenantId || "-",
      p.specHash.slice(0, 12) || "-",
      p.services.map((s) => `${s.service}=${s.state}`).join(" ") || "-",
    ]);
    if (projects.length > 0) out.push("  Projects:", ...indent(table(["PROJECT", "TENANT", "SPEC", "SERVICES"], projects), 4).split("\n"));
    return out;
  }
  if (st.case === "service") {
    const rows = st.value.containers.map((k) => [k.name, k.state, k.health || "-", k.image, String(k.restartCount)]);
    return [
      `  Node: ${st.value.nodeId || "-"}, state ${st.value.state || "-"}, observed ${when(st.value.observedAt)}`,
      ...(rows.length > 0 ? indent(table(["CONTAINER", "STATE", "HEALTH", "IMAGE", "RESTARTS"], rows)).split("\n") : []),
    ];
  }
  return yamlOf(toJson(ResourceStatusSchema, r.currentState!, { useProtoFieldName: true }));
}

function yamlOf(json: unknown): string[] {
  const obj = json as JsonObject;
  // The kind's own fields: {tenant: {...}} shows as the tenant's fields.
  const keys = Object.keys(obj);
  const inner = keys.length === 1 ? obj[keys[0]!] : obj;
  const text = stringify(redact(inner), { lineWidth: 0 }).trimEnd();
  return text === "{}" || text === "" ? ["  (empty)"] : text.split("\n").map((l) => `  ${l}`);
}

function indent(text: string, n = 2): string {
  return text
    .split("\n")
    .map((l) => `${" ".repeat(n)}${l}`)
    .join("\n");
}

/** How the agent talks to the controller, as `skipper get node` says it. */
function transportName(t: NodeTransport): string {
  if (t === NodeTransport.SESSION) return "on a session";
  if (t === NodeTransport.UNARY) return "polling";
  return "transport unknown";
}

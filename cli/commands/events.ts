// `skipper events` and `skipper orders`: the event feed (EventService) and work orders
// (WorkOrderService), filtered as the API filters them. `events --follow` keeps printing new
// events as the controller records them (EventService.WatchEvents).
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Command } from "commander";
import { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { calls } from "../command-rpcs.js";
import { EventSchema, type Event } from "../../gen/skipper/v1/event_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import type { Clients } from "../connection.js";
import { CliError } from "../errors.js";
import { EVENT_HEAD, eventRow, eventTable } from "../event-lines.js";
import { age, asJson, cut, documents, enumName, outputFormat, table } from "../output.js";
import type { CommandContext } from "../command-context.js";
import { durationFlag } from "../flags.js";

interface EventOptions {
  follow?: boolean;
  tenant?: string;
  type?: string;
  resource?: string;
  order?: string;
  correlationId?: string;
  since: string;
  limit: string;
  output: string;
}

/** `skipper events` and `skipper orders`. */
export function registerEvents(program: Command, ctx: CommandContext): void {
  registerEventList(program, ctx);
  registerOrders(program, ctx);
}

// `events [--follow]`: the recorded events, oldest first, then each new one as it is recorded.
function registerEventList(program: Command, ctx: CommandContext): void {
  calls(program.command("events"), EventService.method.listEvents, EventService.method.watchEvents)
    .description("list recorded events, oldest first; --follow keeps printing new ones")
    .option("-f, --follow", "keep printing events as they are recorded (Ctrl-C stops)")
    .option("--tenant <id>", "only this tenant's events")
    .option("--type <type>", "only events of this type, e.g. work_order_failed, rollout_paused")
    .option("--resource <id>", "only events about this resource")
    .option("--order <id>", "only events about this work order")
    .option("--correlation-id <id>", "only events of this correlation id")
    .option("--since <duration>", "events recorded within this long before now", "1h")
    .option("--limit <n>", "show at most the newest n of them (following prints every new one)", "100")
    .option("-o, --output <format>", "table or json (JSON lines when following)", "table")
    .addHelpText(
      "after",
      `
Examples:
  $ skipper events --tenant example-tenant
  $ skipper events --follow --type work_order_failed
  $ skipper events --since 24h -o json | jq -r '.[].type' | sort | uniq -c`,
    )
    .action(async (opts: EventOptions) => {
      const format = outputFormat(opts.output, ["table", "json"]);
      const sinceMs = durationFlag(opts.since, "--since");
      const limit = parseLimit(opts.limit);
      const filter = {
        type: opts.type ?? "",
        tenantId: opts.tenant ?? "",
        resourceId: opts.resource ?? "",
        workOrderId: opts.order ?? "",
        correlationId: opts.correlationId ?? "",
      };
      const clients = ctx.clients();
      // The newest `limit` events since then, asked for newest first, printed oldest first.
      const latest = async (since: Date): Promise<Event[]> => {
        const out: Event[] = [];
        let pageToken = "";
        do {
          const pageSize = Math.min(1000, limit - out.length);
          const res = await clients.events.listEvents({
            ...filter,
            since: timestampFromDate(since),
            pageSize,
            pageToken,
            newestFirst: true,
          });
          out.push(...res.events);
          pageToken = res.nextPageToken;
        } while (pageToken && out.length < limit);
        return out.slice(0, limit).reverse();
      };
      const listedAt = new Date();
      const first = await latest(new Date(listedAt.getTime() - sinceMs));
      if (!opts.follow) {
        if (format === "json")
          ctx.io.out(
            documents(
              "json",
              first.map((e) => asJson(EventSchema, e)),
              true,
            ),
          );
        else if (first.length === 0) ctx.io.err("No events found.");
        else ctx.io.out(eventTable(first));
        return;
      }
      const line = (e: Event) => (format === "json" ? JSON.stringify(asJson(EventSchema, e)) : followLine(eventRow(e)));
      if (format === "table") ctx.io.out(followLine(EVENT_HEAD));
      for (const e of first) ctx.io.out(line(e));
      // Events at the last time printed may be joined by others at the same time: ids tell them apart.
      let last = first.length > 0 ? timestampDate(first[first.length - 1]!.timestamp!) : listedAt;
      let seen = new Set(first.filter((e) => timestampDate(e.timestamp!).getTime() === last.getTime()).map((e) => e.id));
      const print = (e: Event) => {
        if (seen.has(e.id) || (filter.correlationId && e.correlationId !== filter.correlationId)) return;
        ctx.io.out(line(e));
        const at = timestampDate(e.timestamp!);
        if (at.getTime() !== last.getTime()) {
          last = at;
          seen = new Set();
        }
        seen.add(e.id);
      };
      await followEvents(
        clients,
        filter,
        () => last,
        print,
        (note) => ctx.io.err(note),
      );
    });
}

// `orders`: work orders, newest first.
function registerOrders(program: Command, ctx: CommandContext): void {
  calls(program.command("orders"), WorkOrderService.method.listWorkOrders)
    .description("list work orders, newest first")
    .option("--tenant <id>", "only this tenant's orders")
    .option("--node <id>", "only orders for this node")
    .option("--status <status>", "pending, running, success, failed, cancelled or retry_pending")
    .option("--limit <n>", "at most this many", "50")
    .option("-o, --output <format>", "table, wide, json or yaml", "table")
    .addHelpText(
      "after",
      `
Examples:
  $ skipper orders --tenant example-tenant
  $ skipper orders --node host-1 --status failed -o wide`,
    )
    .action(async (opts: { tenant?: string; node?: string; status?: string; limit: string; output: string }) => {
      const format = outputFormat(opts.output);
      const limit = parseLimit(opts.limit);
      const status = opts.status === undefined ? WorkOrderStatus.UNSPECIFIED : orderStatus(opts.status);
      const res = await ctx
        .clients()
        .orders.listWorkOrders({ tenantId: opts.tenant ?? "", nodeId: opts.node ?? "", status, pageSize: limit, newestFirst: true });
      const orders = res.workOrders;
      if (format === "json" || format === "yaml") {
        ctx.io.out(
          documents(
            format,
            orders.map((o) => asJson(WorkOrderSchema, o)),
            true,
          ),
        );
        return;
      }
      if (orders.length === 0) {
        ctx.io.err("No work orders found.");
        return;
      }
      const wide = format === "wide";
      ctx.io.out(
        table(
          ["ID", "TYPE", "STATUS", "TENANT", "NODE", "RESULT", "AGE", ...(wide ? ["ATTEMPTS", "CORRELATION", "MESSAGE"] : [])],
          orders.map((o) => [
            o.id,
            enumName(WorkOrderType, o.type).toLowerCase(),
            enumName(WorkOrderStatus, o.status),
            o.target?.tenantId || "-",
            o.target?.nodeId || "-",
            o.result?.code || "-",
            age(o.createdAt),
            ...(wide
              ? [
                  String(o.attempts.length),
                  o.correlationId || "-",
                  cut(o.result?.cause?.summary ? `${o.result.cause.summary}: ${o.result.message}` : (o.result?.message ?? ""), 60),
                ]
              : []),
          ]),
        ),
      );
    });
}

/**
 * Prints events as they are recorded, for ever: through the WatchEvents stream from the last
 * time printed (again after a break, once a second), or, from a controller without it, by asking
 * for the events since then once a second.
 */
async function followEvents(
  clients: Clients,
  filter: { type: string; tenantId: string; resourceId: string; workOrderId: string },
  since: () => Date,
  print: (e: Event) => void,
  note: (text: string) => void,
): Promise<never> {
  const { type, tenantId, resourceId, workOrderId } = filter;
  let streams = true;
  let broken = false;
  for (;;) {
    try {
      if (streams) {
        const stream = clients.events.watchEvents(
          { type, tenantId, resourceId, workOrderId, since: timestampFromDate(since()) },
          { timeoutMs: 0 },
        );
        for await (const msg of stream) {
          if (broken) note("event stream back");
          broken = false;
          if (msg.event) print(msg.event);
        }
      } else {
        let pageToken = "";
        do {
          const res = await clients.events.listEvents({
            type,
            tenantId,
            resourceId,
            workOrderId,
            since: timestampFromDate(since()),
            pageSize: 1000,
            pageToken,
          });
          res.events.forEach(print);
          pageToken = res.nextPageToken;
        } while (pageToken);
      }
    } catch (e) {
      if (!(e instanceof ConnectError)) throw e;
      if (e.code === Code.Unimplemented) streams = false;
      else if (e.code === Code.Unavailable || e.code === Code.DeadlineExceeded || e.code === Code.Canceled || e.code === Code.Internal) {
        if (!broken) note(`event stream broken (${e.rawMessage}); reconnecting`);
        broken = true;
      } else throw e;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** A status as typed: pending, PENDING or WORK_ORDER_STATUS_PENDING. */
function orderStatus(text: string): WorkOrderStatus {
  const name = text
    .toUpperCase()
    .replace(/^WORK_ORDER_STATUS_/, "")
    .replace(/-/g, "_");
  const value = (WorkOrderStatus as unknown as Record<string, number>)[name];
  if (value === undefined || value === WorkOrderStatus.UNSPECIFIED) {
    throw new CliError(`unknown work order status ${JSON.stringify(text)}`, {
      hint: "one of pending, running, success, failed, cancelled, retry_pending",
    });
  }
  return value;
}

function followLine(cells: string[]): string {
  const widths = [20, 26, 36, 12, 16];
  return cells
    .map((c, i) => (i < widths.length ? c.padEnd(widths[i]!) : c))
    .join("  ")
    .trimEnd();
}

function parseLimit(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > 1000) throw new CliError("--limit must be a whole number from 1 to 1000");
  return n;
}

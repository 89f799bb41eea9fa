// `skipper logs TENANT [SERVICE...]`: what the tenant's containers printed, fetched from each node
// that runs the project through a read_logs work order (the controller never reaches into a host:
// the node's agent reads the engine and reports the lines, capped and with the project's secret
// values blanked). Every node is asked at once; one whose agent is silent is not asked but named,
// and the command then exits 1. --follow asks again every couple of seconds for the lines since
// the last one.
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Command } from "commander";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { calls } from "../command-rpcs.js";
import { WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import type { Clients } from "../connection.js";
import { CliError } from "../errors.js";
import type { CommandContext } from "../command-context.js";
import { nodeSilence, runOrder, tenantNodes } from "../order-wait.js";
import { durationFlag } from "../flags.js";
import { LogCursor, lineNanos } from "../log-cursor.js";

interface LogsOptions {
  node?: string[];
  since?: string;
  tail: string;
  follow?: boolean;
  timestamps?: boolean;
  claimTimeout: string;
}

export function registerLogs(program: Command, ctx: CommandContext): void {
  calls(
    program.command("logs"),
    ResourceService.method.getResource,
    WorkOrderService.method.createWorkOrder,
    WorkOrderService.method.getWorkOrder,
    WorkOrderService.method.cancelWorkOrder,
  )
    .argument("<tenant>", "the tenant whose containers to read")
    .argument("[services...]", "compose services (default: all of the project's)")
    .description("print what a tenant's containers wrote, from every node that runs it (read_logs orders)")
    .option(
      "--node <id>",
      "only this node; repeat for several (default: every node the tenant runs on)",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option("--since <duration>", "only lines from this long ago, e.g. 10m, 2h")
    .option("--tail <n>", "at most the last n lines of each container", "100")
    .option("-f, --follow", "keep printing new lines (asks again every 2 s; Ctrl-C stops)")
    .option("-t, --timestamps", "print each line's time")
    .option("--claim-timeout <duration>", "give up on a node that has not taken its read_logs order within this", "60s")
    .addHelpText(
      "after",
      `
Each line is prefixed with its node and container. Reading logs needs the operator role.

Examples:
  $ skipper logs example-tenant
  $ skipper logs example-tenant web --since 15m --tail 500
  $ skipper logs example-tenant -f --timestamps`,
    )
    .action(async (tenant: string, services: string[], opts: LogsOptions) => {
      const tail = Number(opts.tail);
      if (!Number.isInteger(tail) || tail < 1 || tail > 5000) throw new CliError("--tail must be a whole number from 1 to 5000");
      let since: Date | undefined;
      if (opts.since !== undefined) {
        since = new Date(Date.now() - durationFlag(opts.since, "--since", 1, "use e.g. 30s, 10m or 2h"));
      }
      const claimWithinMs = durationFlag(opts.claimTimeout, "--claim-timeout");
      const clients = ctx.clients();
      const nodes = opts.node ? [...new Set(opts.node)].sort() : await tenantNodes(clients, tenant);
      if (nodes.length === 0) throw new CliError(`tenant ${tenant} runs on no node`, { hint: `skipper explain ${tenant} says why` });
      // Per node: the time of the newest line printed, so a follow asks only for newer ones.
      const newest = new Map<string, Date | undefined>(nodes.map((n) => [n, since]));
      const cursors = new Map(nodes.map((n) => [n, new LogCursor()]));
      let printed = 0;
      const lastFailure = new Map<string, string>();
      for (;;) {
        let failures = 0;
        // Every node at once (a silent one is not asked: it could not answer), printed in order.
        const answers = await Promise.all(
          nodes.map(async (node) => {
            const silence = await nodeSilence(clients, node);
            if (silence) return { node, failure: `${node}: ${silence}; its logs cannot be read until its agent is back` };
            const { order, untaken } = await readLogs(
              clients,
              { tenantId: tenant, nodeId: node, services, tailLines: tail, since: newest.get(node) },
              claimWithinMs,
            );
            if (untaken) return { node, failure: `${node}: ${untaken}` };
            if (order.status !== WorkOrderStatus.SUCCESS)
              return {
                node,
                failure: `${node}: ${order.result?.code ?? WorkOrderStatus[order.status]}: ${order.result?.message ?? "no result"}`,
              };
            return { node, order };
          }),
        );
        for (const { node, failure, order } of answers) {
          if (failure !== undefined) {
            failures++;
            // Said once while it stays so (a follow asks every round).
            if (lastFailure.get(node) !== failure) ctx.io.err(failure);
            lastFailure.set(node, failure);
            continue;
          }
          lastFailure.delete(node);
          const lines = (order?.result?.details?.logs ?? []).flatMap((c) => c.lines.map((l) => ({ container: c.container, l })));
          lines.sort((a, b) => (lineNanos(a.l) < lineNanos(b.l) ? -1 : lineNanos(a.l) > lineNanos(b.l) ? 1 : 0));
          for (const { container, l } of lines) {
            // The engine's --since is inclusive: lines printed last round come again.
            if (!cursors.get(node)!.take(container, l)) continue;
            const at = opts.timestamps && l.time ? `${timestampDate(l.time).toISOString()} ` : "";
            (l.stream === "stderr" ? ctx.io.err : ctx.io.out)(`${node}/${container} | ${at}${l.text}`);
            printed++;
            if (l.time) newest.set(node, timestampDate(l.time));
          }
        }
        if (!opts.follow) {
          if (failures > 0) ctx.exitCode = 1;
          else if (printed === 0) ctx.io.err(`No log lines${since ? ` since ${since.toISOString()}` : ""}.`);
          return;
        }
        await new Promise((r) => setTimeout(r, 2000));
      }
    });
}

interface LogsAsk {
  tenantId: string;
  nodeId: string;
  services: string[];
  tailLines: number;
  since: Date | undefined;
}

// A read_logs order for the node, run to its end.
function readLogs(clients: Clients, ask: LogsAsk, claimWithinMs: number) {
  const { tenantId, nodeId, services, tailLines, since } = ask;
  return runOrder(
    clients,
    {
      type: WorkOrderType.READ_LOGS,
      target: { tenantId, nodeId },
      action: { kind: { case: "readLogs", value: { services, tailLines, since: since ? timestampFromDate(since) : undefined } } },
    },
    claimWithinMs,
  );
}

// `skipper order create TYPE (--node NODE | --pool SELECTOR) [--require CAP]... [-- ARGV]`: queues an
// ad-hoc host order (inspect, health-check, execute-command) for one node or for a pool of nodes, of
// which the first eligible one to ask claims it (WorkOrderTarget.pool). It prints the order and, for
// a pool order nobody can take yet, why it waits; `skipper order get ID` follows it.
import { durationFromMs, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Command } from "commander";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { WorkOrderActionSchema } from "../../gen/skipper/v1/order_action_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { CliError } from "../errors.js";
import { durationFlag } from "../flags.js";
import { enumName } from "../output.js";

interface CreateOptions {
  node?: string;
  pool?: string;
  require?: string[];
  timeout?: string;
  expiresIn?: string;
  priority?: string;
}

type ActionKind = MessageInitShape<typeof WorkOrderActionSchema>["kind"];

const collect = (v: string, prev: string[] = []) => [...prev, v];

// The order types this command queues, with their action from the arguments after --.
const TYPES: Record<string, { type: WorkOrderType; action: (argv: string[], timeoutMs?: number) => ActionKind }> = {
  inspect: { type: WorkOrderType.INSPECT, action: () => ({ case: "inspect", value: {} }) },
  "health-check": { type: WorkOrderType.HEALTH_CHECK, action: () => ({ case: "healthCheck", value: {} }) },
  "execute-command": {
    type: WorkOrderType.EXECUTE_COMMAND,
    action: (argv, timeoutMs) => {
      if (argv.length === 0) throw new CliError("execute-command needs the program and its arguments after --");
      return { case: "executeCommand", value: { command: { argv, timeout: timeoutMs ? durationFromMs(timeoutMs) : undefined } } };
    },
  },
};

/** "role=web,zone=a" to an equality selector ("" or "*": every node). */
export function poolSelector(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (text.trim() === "" || text.trim() === "*") return out;
  for (const part of text.split(",")) {
    const m = /^\s*([A-Za-z0-9][A-Za-z0-9._/-]*)\s*=\s*(\S*)\s*$/.exec(part);
    if (!m) throw new CliError(`--pool: ${JSON.stringify(part)} is not key=value (a pool selects by label equality)`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

/** `order create`, under `skipper order`. */
export function registerOrderCreate(order: Command, ctx: CommandContext): void {
  calls(order.command("create"), WorkOrderService.method.createWorkOrder)
    .argument("<type>", Object.keys(TYPES).join(", "))
    .argument("[argv...]", "execute-command: the program and its arguments (after --)")
    .description("queue an order for one node (--node) or for a pool of nodes (--pool): the first eligible one claims it")
    .option("--node <id>", "the node to run it on")
    .option("--pool <selector>", 'a pool: nodes whose labels match, e.g. role=web,zone=a ("*": every node)')
    .option("--require <capability>", "only a node holding this capability, e.g. compose.deploy (repeatable)", collect)
    .option("--timeout <duration>", "stop the command after this long (execute-command)")
    .option("--expires-in <duration>", "fail it (EXPIRED) if no node has claimed it within this")
    .option("--priority <n>", "higher goes first among a node's pending orders", "0")
    .addHelpText(
      "after",
      `
A pool order goes to one node: enabled, in the pool, holding every --require capability and
permitting what it asks (the program on its allow-list). While none can take it, it waits and
says why (skipper order get ID: wait). List capabilities with skipper nodes --capability NAME.

Examples:
  $ skipper order create inspect --pool role=web
  $ skipper order create execute-command --pool role=web --require command.uptime -- uptime
  $ skipper order create inspect --node host-1 --require compose.deploy`,
    )
    .action(async (typeName: string, argv: string[], opts: CreateOptions) => {
      const kind = TYPES[typeName];
      if (!kind) throw new CliError(`unknown order type ${typeName}: ${Object.keys(TYPES).join(", ")}`);
      if ((opts.node === undefined) === (opts.pool === undefined)) throw new CliError("give one of --node NODE or --pool SELECTOR");
      const timeoutMs = opts.timeout ? durationFlag(opts.timeout, "--timeout") : undefined;
      const expiresMs = opts.expiresIn ? durationFlag(opts.expiresIn, "--expires-in") : undefined;
      const priority = Number(opts.priority ?? "0");
      if (!Number.isInteger(priority)) throw new CliError("--priority must be an integer");
      const { workOrder: o } = await ctx.clients().orders.createWorkOrder({
        type: kind.type,
        target: {
          nodeId: opts.node ?? "",
          pool: opts.pool === undefined ? undefined : { nodeSelector: poolSelector(opts.pool) },
          requiredCapabilities: opts.require ?? [],
        },
        action: { kind: kind.action(argv, timeoutMs) },
        expiresAt: expiresMs ? timestampFromDate(new Date(Date.now() + expiresMs)) : undefined,
        priority,
        maxAttempts: 1,
      });
      const target = o!.target?.pool ? `pool ${opts.pool}` : `node ${o!.target?.nodeId}`;
      ctx.io.out(`order ${o!.id} (${typeName} on ${target}) ${enumName(WorkOrderStatus, o!.status)}`);
      if (o!.wait) ctx.io.out(`  ${o!.wait.reason}: ${o!.wait.message}`);
    });
}

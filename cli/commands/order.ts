// `skipper order get|cancel ID`: one work order (WorkOrderService); `skipper orders` lists them;
// `skipper order create` queues one for a node or a pool (order-create.ts).
// A cancel ends a pending order at once; a running one is stopped by its agent, which reports
// CANCELLED (the answer then says the cancel was asked). Cancelled orders are not retried until
// the desired state changes or the tenant is deployed again.
import type { Command } from "commander";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { asJson, documents, enumName, outputFormat } from "../output.js";
import { registerOrderCreate } from "./order-create.js";

/** `skipper order` (get, cancel). */
export function registerOrder(program: Command, ctx: CommandContext): void {
  const order = program.command("order").description("one work order: show it, cancel it (list them with `skipper orders`)");

  const get = order
    .command("get")
    .argument("<id>", "the order's id")
    .description("show one work order: its action, status, attempts and result")
    .option("-o, --output <format>", "yaml or json", "yaml")
    .addHelpText("after", "\nExample:\n  $ skipper order get 0193f7c2-...")
    .action(async (id: string, opts: { output: string }) => {
      const format = outputFormat(opts.output, ["json", "yaml"]);
      const res = await ctx.clients().orders.getWorkOrder({ id });
      ctx.io.out(documents(format, [asJson(WorkOrderSchema, res.workOrder!)], false));
    });
  calls(get, WorkOrderService.method.getWorkOrder);

  const cancel = order
    .command("cancel")
    .argument("<id...>", "the orders' ids")
    .description("cancel work orders: a pending one at once, a running one by its agent")
    .option("--reason <text>", "why, for the record (at most 512 characters)")
    .addHelpText(
      "after",
      `
Cancelling an order that has ended is refused (WORK_ORDER_NOT_CLAIMABLE); a second cancel of
one still running changes nothing.

Examples:
  $ skipper orders --tenant example-tenant --status pending
  $ skipper order cancel 0193f7c2-... --reason "wrong release"`,
    )
    .action(async (ids: string[], opts: { reason?: string }) => {
      for (const id of ids) {
        const o = (await ctx.clients().orders.cancelWorkOrder({ id, reason: opts.reason ?? "" })).workOrder!;
        const what = `order ${o.id} (${enumName(WorkOrderType, o.type).toLowerCase()} on ${o.target?.nodeId || "-"})`;
        ctx.io.out(
          o.status === WorkOrderStatus.CANCELLED
            ? `${what} cancelled.`
            : `${what} is ${enumName(WorkOrderStatus, o.status)}: its agent was asked to stop it and will report CANCELLED.`,
        );
      }
    });
  calls(cancel, WorkOrderService.method.cancelWorkOrder);
  registerOrderCreate(order, ctx);
}

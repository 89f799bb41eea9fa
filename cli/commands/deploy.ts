// `skipper deploy TENANT`: Apply, "deploy now" (DeploymentService.Apply): a deployment and a
// deploy_service order for the tenant's node even when it looks converged (while an order for
// the same desired state is in flight, that order is the answer). --wait follows that order, the
// one the Apply made or returned, to its end: the tenant's convergence may still say CONVERGED
// while it runs, so the order is what tells when the deploy is done.
import type { Command } from "commander";
import { DeploymentService } from "../../gen/skipper/v1/deployment_service_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { isFinishedStatus } from "../../common/order-status.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { CliError, EXIT_BLOCKED } from "../errors.js";
import { durationFlag } from "../flags.js";
import { paint } from "../io.js";
import { enumName } from "../output.js";

/** `skipper deploy`. */
export function registerDeploy(program: Command, ctx: CommandContext): void {
  const cmd = program
    .command("deploy")
    .argument("<tenant>", "the tenant to deploy now")
    .description("deploy a tenant now (Apply): a new deploy order for its node, even when it looks converged")
    .option("--node <id>", "deploy to this node instead of the tenant's target_node_id")
    .option("--idempotency-key <key>", "a retry with the same key returns the first answer and creates nothing")
    .option("-w, --wait", "wait for the order to end: exit 0 when it succeeded, 2 when it failed or was cancelled")
    .option("--timeout <duration>", "with --wait: give up after this long (exit 1; the order goes on)", "10m")
    .addHelpText(
      "after",
      `
It is also what runs a spec again after it failed or was rolled back: the reconciler leaves such
a spec alone until the desired state changes or someone deploys it. Cancel the order with
\`skipper order cancel ID\`.

Examples:
  $ skipper deploy example-tenant
  $ skipper deploy example-tenant --wait --timeout 5m`,
    )
    .action(async (tenantId: string, opts: { node?: string; idempotencyKey?: string; wait?: boolean; timeout: string }) => {
      const timeoutMs = durationFlag(opts.timeout, "--timeout", 1);
      const clients = ctx.clients();
      const res = await clients.deployments.apply(
        { tenantId, nodeId: opts.node ?? "" },
        opts.idempotencyKey ? { headers: { "x-idempotency-key": opts.idempotencyKey } } : {},
      );
      const order = res.workOrder!;
      ctx.io.out(
        `deployment ${res.deployment?.id ?? "-"}: order ${order.id} (deploy_service on ${order.target?.nodeId || "-"}) ${enumName(WorkOrderStatus, order.status)}`,
      );
      if (!opts.wait) return;
      const end = await followOrder(ctx, order, timeoutMs);
      const code = end.result?.code ? ` ${end.result.code}` : "";
      const message = end.result?.message ? `: ${end.result.message}` : "";
      if (end.status === WorkOrderStatus.SUCCESS) ctx.io.out(paint(ctx.io, "green", `deployed: order ${end.id} SUCCESS${code}`));
      else {
        ctx.io.out(paint(ctx.io, "red", `not deployed: order ${end.id} ${enumName(WorkOrderStatus, end.status)}${code}${message}`));
        ctx.io.err(`hint: see why with \`skipper explain tenant ${tenantId}\``);
        ctx.exitCode = EXIT_BLOCKED;
      }
    });
  calls(cmd, DeploymentService.method.apply, WorkOrderService.method.getWorkOrder);
}

/** Reads the order once a second until it has ended, printing each status it passes. */
async function followOrder(ctx: CommandContext, first: WorkOrder, timeoutMs: number): Promise<WorkOrder> {
  const deadline = Date.now() + timeoutMs;
  let order = first;
  let shown = order.status;
  while (!isFinishedStatus(order.status)) {
    if (Date.now() + 1000 > deadline) {
      throw new CliError(`timed out: order ${order.id} is still ${enumName(WorkOrderStatus, order.status)}`, {
        hint: `follow it with \`skipper order get ${order.id}\`; it goes on without this command`,
      });
    }
    await new Promise((r) => setTimeout(r, 1000));
    order = (await ctx.clients().orders.getWorkOrder({ id: order.id })).workOrder ?? order;
    if (order.status !== shown) {
      shown = order.status;
      ctx.io.err(`order ${order.id} ${enumName(WorkOrderStatus, order.status)}`);
    }
  }
  return order;
}

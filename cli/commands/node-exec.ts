// `skipper node exec NODE -- PROGRAM [ARGS...]`: one command on a host, as an execute_command work
// order (`skipper exec` runs a command in a tenant's service container instead: exec.ts). The program must be on the node's allow-list (skippy --allow-command); arguments go to it
// as they are (no shell). Its output is printed as the agent reported it (capped, secrets blanked)
// and the CLI exits with the command's own exit code.
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { Command } from "commander";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { calls } from "../command-rpcs.js";
import { WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { CliError } from "../errors.js";
import type { CommandContext } from "../command-context.js";
import { nodeSilence, runOrder } from "../order-wait.js";
import { durationFlag } from "../flags.js";

/** `node exec`, under `skipper node`. */
export function registerNodeExec(node: Command, ctx: CommandContext): void {
  calls(
    node.command("exec"),
    ResourceService.method.getResource,
    WorkOrderService.method.createWorkOrder,
    WorkOrderService.method.getWorkOrder,
    WorkOrderService.method.cancelWorkOrder,
  )
    .argument("<node>", "the node to run it on")
    .argument("<argv...>", "the program and its arguments (after --)")
    .description("run one allow-listed command on a node (an execute_command order) and print its output")
    .option("--timeout <duration>", "stop it after this long (at most 1h)", "60s")
    .option("--cwd <dir>", "absolute directory to run in (default: the agent's work directory)")
    .option("--claim-timeout <duration>", "cancel the order if the node has not taken it within this", "60s")
    .addHelpText(
      "after",
      `
The program must be on the node's allow-list (skippy --allow-command PROG); nothing goes through
a shell. The exit code is the command's own (1 when it could not run). Needs the operator role.
For a command inside a tenant's container: skipper exec TENANT SERVICE -- CMD.

Examples:
  $ skipper node exec host-1 -- uptime
  $ skipper node exec host-1 --timeout 10s -- df -h /`,
    )
    .action(async (node: string, argv: string[], opts: { timeout: string; cwd?: string; claimTimeout: string }) => {
      const timeoutMs = durationFlag(opts.timeout, "--timeout");
      const claimWithinMs = durationFlag(opts.claimTimeout, "--claim-timeout");
      const clients = ctx.clients();
      const silence = await nodeSilence(clients, node);
      if (silence) throw new CliError(`${node} is ${silence}: it cannot run a command now`, { hint: `skipper get node ${node}` });
      const { order, untaken } = await runOrder(
        clients,
        {
          type: WorkOrderType.EXECUTE_COMMAND,
          target: { nodeId: node },
          action: {
            kind: { case: "executeCommand", value: { command: { argv, timeout: durationFromMs(timeoutMs), workingDir: opts.cwd ?? "" } } },
          },
        },
        claimWithinMs,
      );
      if (untaken) throw new CliError(`${node}: ${untaken}`, { hint: `skipper get node ${node}` });
      const result = order.result;
      const run = result?.details?.command;
      if (run?.stdout) ctx.io.out(run.stdout.replace(/\n$/, ""));
      if (run?.stderr) ctx.io.err(run.stderr.replace(/\n$/, ""));
      if (result?.code === "COMMAND_OK") return;
      if (result?.code === "COMMAND_FAILED" && run) {
        ctx.exitCode = run.exitCode > 0 && run.exitCode < 256 ? run.exitCode : 1;
        return;
      }
      throw new CliError(`${result?.code ?? WorkOrderStatus[order.status]}: ${result?.message ?? "no result"}`, {
        hint: result?.code === "COMMAND_NOT_ALLOWED" ? `start skippy on ${node} with --allow-command ${argv[0] ?? ""}` : undefined,
      });
    });
}

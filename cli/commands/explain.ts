// `skipper explain`: why a resource is (not) converged, as a tree (explain-tree.ts). Exits 2 when
// what is in the way will not clear by waiting (BLOCKING_CONVERGENCE), so a script can tell.
import type { Command } from "commander";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { calls } from "../command-rpcs.js";
import { ConvergenceStatus } from "../../gen/skipper/v1/resource_pb.js";
import { ExplainResourceResponseSchema } from "../../gen/skipper/v1/resource_service_pb.js";
import { EXIT_BLOCKED } from "../errors.js";
import { explainTree } from "../explain-tree.js";
import { asJson, documents, outputFormat } from "../output.js";
import { BLOCKING_CONVERGENCE } from "../resource-columns.js";
import { resourceType } from "../resource-types.js";
import type { CommandContext } from "../command-context.js";

export function registerExplain(program: Command, ctx: CommandContext): void {
  calls(program.command("explain"), ResourceService.method.explainResource)
    .argument("<type-or-tenant>", "a resource type, or a tenant id alone")
    .argument("[id]", "the resource's id (after its type)")
    .description("show why a resource is or is not converged: desired state -> orders -> claims -> results -> observed -> verdict")
    .option("-o, --output <format>", "json or yaml: the ExplainResource answer as it is")
    .addHelpText(
      "after",
      `
The step in the way is marked "<- blocking". Exits 2 when the resource is blocked by something
waiting will not fix (no matching node, a failed order, a rollback, a missing reference, an
offline or disabled node), else 0.

Examples:
  $ skipper explain example-tenant
  $ skipper explain service service-web
  $ skipper explain tenant example-tenant -o json`,
    )
    .action(async (first: string, second: string | undefined, opts: { output?: string }) => {
      const [type, id] = second === undefined ? (["tenant", first] as const) : ([resourceType(first), second] as const);
      const res = await ctx.clients().resources.explainResource({ resourceType: type, id });
      if (opts.output !== undefined) {
        ctx.io.out(documents(outputFormat(opts.output, ["json", "yaml"]), [asJson(ExplainResourceResponseSchema, res)], false));
      } else {
        for (const line of explainTree(res, ctx.io)) ctx.io.out(line);
      }
      const status = res.convergence?.status ?? ConvergenceStatus.UNSPECIFIED;
      if (BLOCKING_CONVERGENCE.has(status)) ctx.exitCode = EXIT_BLOCKED;
    });
}

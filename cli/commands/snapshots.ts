// `skipper snapshot tenant|system`: the latest point-in-time copy of resources with their diffs
// (SnapshotService; secrets redacted): as a table of what is in sync, or the whole document.
import type { Command } from "commander";
import { ConvergenceStatus } from "../../gen/skipper/v1/resource_pb.js";
import { SnapshotSchema, type Snapshot } from "../../gen/skipper/v1/snapshot_pb.js";
import { SnapshotService } from "../../gen/skipper/v1/snapshot_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { asJson, documents, enumName, outputFormat, table, when } from "../output.js";

/** `skipper snapshot` (tenant, system). */
export function registerSnapshots(program: Command, ctx: CommandContext): void {
  const snapshot = program
    .command("snapshot")
    .alias("snapshots")
    .description("the latest snapshot of a tenant or of the whole system: resources, their diffs and convergence");

  const tenant = snapshot
    .command("tenant")
    .argument("<tenant>", "the tenant")
    .description("the tenant's latest snapshot (written after each change and order end)")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText("after", "\nExamples:\n  $ skipper snapshot tenant example-tenant\n  $ skipper snapshot tenant example-tenant -o yaml")
    .action(async (tenantId: string, opts: { output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      print(ctx, (await ctx.clients().snapshots.getTenantSnapshot({ tenantId })).snapshot!, format);
    });
  calls(tenant, SnapshotService.method.getTenantSnapshot);

  const system = snapshot
    .command("system")
    .description("the latest snapshot of every resource (an unscoped caller's)")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText("after", "\nExamples:\n  $ skipper snapshot system\n  $ skipper snapshot system -o json | jq '.resources | length'")
    .action(async (opts: { output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      print(ctx, (await ctx.clients().snapshots.getSystemSnapshot({})).snapshot!, format);
    });
  calls(system, SnapshotService.method.getSystemSnapshot);
}

function print(ctx: CommandContext, s: Snapshot, format: "table" | "json" | "yaml"): void {
  if (format !== "table") {
    ctx.io.out(documents(format, [asJson(SnapshotSchema, s)], false));
    return;
  }
  ctx.io.out(`snapshot ${s.snapshotId} (${s.scope}${s.tenantId ? ` ${s.tenantId}` : ""}) taken ${when(s.createdAt)}`);
  if (s.diffs.length === 0) {
    ctx.io.out("no resources");
    return;
  }
  ctx.io.out(
    table(
      ["RESOURCE", "IN SYNC", "CONVERGENCE", "CHANGES", "DIFFERS FROM WHAT RUNS"],
      s.diffs.map((d) => [
        `${d.resourceType}/${d.resourceId}`,
        d.inSync ? "yes" : "no",
        enumName(ConvergenceStatus, d.convergence?.status ?? 0),
        d.changes.map((c) => c.path).join(",") || "-",
        d.currentChanges.map((c) => c.path).join(",") || "-",
      ]),
    ),
  );
}

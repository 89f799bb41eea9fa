// `skipper git sync NAME [--reapply]`: sync a Git source now instead of waiting for its interval
// (CI runs it after a push). The source itself is a resource: `skipper apply` / `skipper get
// git-sources`. A sync that stops (a bad document, an unreachable repository) prints its
// sync_error and exits 1; what it found drifted or orphaned is listed either way.
import type { Command } from "commander";
import { GitSourceService } from "../../gen/skipper/v1/git_source_service_pb.js";
import { ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { CliError } from "../errors.js";
import { asJson, documents, outputFormat } from "../output.js";

/** `skipper git` and its commands. */
export function registerGit(program: Command, ctx: CommandContext): void {
  const git = program.command("git").description("Git sources: sync one now");
  calls(git.command("sync"), GitSourceService.method.syncGitSource)
    .argument("<git-source>", "the git source")
    .description("fetch the source's branch and apply its manifests now; exits 1 when the sync stops at a document")
    .option("--reapply", "write every document again, not only those changed since the last sync (undoes drift)")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText("after", "\nExamples:\n  $ skipper git sync platform\n  $ skipper git sync platform --reapply")
    .action(async (id: string, opts: { reapply?: boolean; output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      const res = await ctx.clients().gitSources.syncGitSource({ id, reapply: opts.reapply ?? false });
      const source = res.gitSource;
      const status = source?.currentState?.kind.case === "gitSource" ? source.currentState.kind.value : undefined;
      if (format !== "table") ctx.io.out(documents(format, source ? [asJson(ResourceSchema, source)] : [], false));
      else {
        ctx.io.out(`git_source/${id}: synced commit ${status?.syncedCommit || "(none)"}, fetched ${status?.fetchedCommit || "(none)"}`);
        for (const r of status?.resources ?? []) {
          if (r.drift || r.orphaned) ctx.io.out(`  ${r.drift ? "drift" : "orphaned"} ${r.resourceType}/${r.id} (${r.path})`);
        }
      }
      if (status?.syncError) throw new CliError(`git_source/${id}: the sync stopped: ${status.syncError}`);
    });
}

// `skipper artifact`: an artifact's versions (list; add one, as CI does; mark one bad, or take the
// mark back). Artifacts themselves are resources: `skipper apply` / `skipper get artifacts`.
import type { Command } from "commander";
import { DeliveryService } from "../../gen/skipper/v1/delivery_service_pb.js";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { CliError } from "../errors.js";
import { asJson, documents, outputFormat } from "../output.js";
import { resourceTable } from "../resource-columns.js";

/** `skipper artifact` and its commands. */
export function registerArtifact(program: Command, ctx: CommandContext): void {
  const artifact = program.command("artifact").description("an artifact's versions: list, add (for CI), mark bad");
  calls(artifact.command("versions"), DeliveryService.method.listArtifactVersions)
    .argument("<artifact>", "the artifact")
    .description("the artifact's versions, newest first")
    .option("--include-bad", "list versions marked bad too")
    .option("-o, --output <format>", "table, wide, json or yaml", "table")
    .addHelpText("after", "\nExample:\n  $ skipper artifact versions web --include-bad -o wide")
    .action(async (artifactId: string, opts: { includeBad?: boolean; output: string }) => {
      const format = outputFormat(opts.output, ["table", "wide", "json", "yaml"]);
      const clients = ctx.clients();
      const versions: Resource[] = [];
      let pageToken = "";
      do {
        const page = await clients.delivery.listArtifactVersions({ artifactId, includeBad: opts.includeBad ?? false, pageToken });
        versions.push(...page.versions);
        pageToken = page.nextPageToken;
      } while (pageToken !== "");
      if (format === "json" || format === "yaml")
        return ctx.io.out(
          documents(
            format,
            versions.map((v) => asJson(ResourceSchema, v)),
            true,
          ),
        );
      ctx.io.out(resourceTable("artifact_version", versions, format === "wide", ctx.io));
    });
  calls(artifact.command("add-version"), DeliveryService.method.createArtifactVersion)
    .argument("<artifact>", "the artifact")
    .argument("<version>", "the version, as its registry tag spells it")
    .requiredOption("--digest <digest>", "the image's digest (sha256:...)")
    .option("--meta <key=value...>", "what CI says of it (commit=..., build_url=...)")
    .description("record a version of the artifact (CI does this after a build); the same version and digest again changes nothing")
    .addHelpText("after", "\nExample:\n  $ skipper artifact add-version web 1.4.2 --digest sha256:... --meta commit=3f2a9c1")
    .action(async (artifactId: string, version: string, opts: { digest: string; meta?: string[] }) => {
      const metadata: Record<string, string> = {};
      for (const m of opts.meta ?? []) {
        const eq = m.indexOf("=");
        if (eq <= 0) throw new CliError(`--meta ${JSON.stringify(m)} is not key=value`);
        metadata[m.slice(0, eq)] = m.slice(eq + 1);
      }
      const res = await ctx.clients().delivery.createArtifactVersion({ artifactId, version, digest: opts.digest, metadata });
      ctx.io.out(`${res.version?.id ?? ""} ${res.created ? "recorded" : "was recorded already (same digest)"}`);
    });
  for (const [name, bad] of [
    ["mark-bad", true],
    ["unmark-bad", false],
  ] as const)
    calls(artifact.command(name), bad ? DeliveryService.method.markVersionBad : DeliveryService.method.unmarkVersionBad)
      .argument("<artifact>", "the artifact")
      .argument("<version>", "the version")
      .requiredOption("--reason <text>", "why, recorded with who did it")
      .description(
        bad
          ? "mark a version bad everywhere: never promoted again; environments running it go back to their last good release"
          : "take a mark-bad back (admin): the version may be promoted again",
      )
      .addHelpText("after", `\nExample:\n  $ skipper artifact ${name} web 1.1.0 --reason "memory leak"`)
      .action(async (artifactId: string, version: string, opts: { reason: string }) => {
        const req = { artifactId, version, reason: opts.reason };
        const c = ctx.clients().delivery;
        const res = bad ? await c.markVersionBad(req) : await c.unmarkVersionBad(req);
        ctx.io.out(`${res.version?.id ?? ""} ${bad ? "marked bad" : "no longer marked bad"}`);
      });
}

// `skipper agent-bundle`: the agent bundle the controller serves to joining hosts (its version,
// SHA-256 and signature), the Ed25519 key that signs it and the pin of the controller's
// certificate (AgentBundleService.GetAgentBundle).
import type { Command } from "commander";
import { AgentBundleService, GetAgentBundleResponseSchema } from "../../gen/skipper/v1/agent_bundle_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { asJson, outputFormat } from "../output.js";

/** `skipper agent-bundle`. */
export function registerAgentBundle(program: Command, ctx: CommandContext): void {
  const cmd = program
    .command("agent-bundle")
    .description("show the agent bundle served to joining hosts, the key that signs it and the controller's certificate pin")
    .option("-o, --output <format>", "table or json", "table")
    .addHelpText(
      "after",
      `
Hosts download the bundle at /v1/agent-bundle/skippy.mjs and check it against this manifest and
key before running it (\`skipper node join-command\` prints the line that does).

Example:
  $ skipper agent-bundle`,
    )
    .action(async (opts: { output: string }) => {
      const format = outputFormat(opts.output, ["table", "json"] as const);
      const res = await ctx.clients().agentBundles.getAgentBundle({});
      if (format === "json") {
        ctx.io.out(JSON.stringify(asJson(GetAgentBundleResponseSchema, res), null, 2));
        return;
      }
      const m = res.manifest;
      ctx.io.out(
        [
          `bundle:          ${m ? `skippy ${m.version}, ${m.size} bytes` : "none served (start the controller with --agent-bundle)"}`,
          ...(m ? [`sha256:          ${m.sha256}`, `signature:       ${m.signature}`] : []),
          `signing key:     ${res.signingPublicKey} (Ed25519, ${res.signingKeyFingerprint})`,
          `certificate pin: ${res.tlsPin || "none (plain HTTP)"}`,
        ].join("\n"),
      );
    });
  calls(cmd, AgentBundleService.method.getAgentBundle);
}

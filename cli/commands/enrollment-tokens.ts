// `skipper enrollment-token`: the tokens hosts enroll with (EnrollmentService). create prints the
// token's text once on stdout (the controller keeps a hash); list shows them, never their text;
// revoke refuses one from now on. `skipper node enroll-token NODE` is create bound to a node.
import type { Command } from "commander";
import { EnrollmentService, EnrollmentTokenSchema } from "../../gen/skipper/v1/enrollment_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { asJson, cut, documents, labels, outputFormat, table, when } from "../output.js";
import { createEnrollmentToken, enrollOptions } from "./node.js";

/** `skipper enrollment-token` (create, list, revoke). */
export function registerEnrollmentTokens(program: Command, ctx: CommandContext): void {
  const tokens = program
    .command("enrollment-token")
    .alias("enrollment-tokens")
    .description("manage the tokens hosts enroll with: create, list, revoke (admin)");

  const create = enrollOptions(
    tokens
      .command("create")
      .description("create an enrollment token; its text is printed once, on stdout")
      .option("--node <id>", "only this node id may enroll with it (default: any id)"),
  )
    .addHelpText(
      "after",
      `
A host enrolls with \`skippy --enroll-token-file FILE --node-id ID ...\` (\`skipper node
join-command NODE\` prints the whole command).

Examples:
  $ skipper enrollment-token create --uses 10 --ttl 2h --label env=dev --description "rack 4" > rack4.enroll
  $ skipper enrollment-token create --node host-9 > host-9.enroll`,
    )
    .action(async (opts: Parameters<typeof createEnrollmentToken>[2] & { node?: string }) => {
      const res = await createEnrollmentToken(ctx, opts.node ?? "", opts);
      const t = res.enrollmentToken!;
      ctx.io.err(
        `Enrollment token ${t.id}${t.nodeId ? ` for node ${t.nodeId}` : ""} created: ${t.uses} use(s), valid until ${when(t.expiresAt)}.`,
      );
      ctx.io.err("Its text follows on stdout, shown only now: the controller keeps a hash.");
      ctx.io.out(res.token);
    });
  calls(create, EnrollmentService.method.createEnrollmentToken);

  const list = tokens
    .command("list")
    .alias("ls")
    .description("list enrollment tokens, newest first (never their text)")
    .option("--all", "also used, expired and revoked tokens")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText("after", "\nExamples:\n  $ skipper enrollment-token list\n  $ skipper enrollment-token list --all -o yaml")
    .action(async (opts: { all?: boolean; output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      const res = await ctx.clients().enrollment.listEnrollmentTokens({ includeInactive: opts.all ?? false });
      const items = res.enrollmentTokens;
      if (format !== "table") {
        ctx.io.out(
          documents(
            format,
            items.map((t) => asJson(EnrollmentTokenSchema, t)),
            true,
          ),
        );
        return;
      }
      if (items.length === 0) {
        ctx.io.err(opts.all ? "No enrollment tokens." : "No active enrollment tokens (--all shows the others).");
        return;
      }
      ctx.io.out(
        table(
          ["ID", "STATUS", "NODE", "USES LEFT", "LABELS", "EXPIRES", "ENROLLED", "DESCRIPTION"],
          items.map((t) => [
            t.id,
            t.status,
            t.nodeId || "-",
            `${t.remainingUses}/${t.uses}`,
            labels(t.labels),
            when(t.expiresAt),
            t.enrolledNodes.join(",") || "-",
            cut(t.description, 40) || "-",
          ]),
        ),
      );
    });
  calls(list, EnrollmentService.method.listEnrollmentTokens);

  const revoke = tokens
    .command("revoke")
    .argument("<id...>", "the tokens' ids (a token text ske_<id>_... names its id)")
    .description("refuse enrollment tokens from now on (idempotent)")
    .addHelpText("after", "\nExample:\n  $ skipper enrollment-token revoke 3f9c2a1b")
    .action(async (ids: string[]) => {
      for (const given of ids) {
        const id = /^ske_([^_]+)_/.exec(given)?.[1] ?? given;
        const t = (await ctx.clients().enrollment.revokeEnrollmentToken({ id })).enrollmentToken!;
        ctx.io.out(`Enrollment token ${t.id} revoked (${t.status}).`);
      }
    });
  calls(revoke, EnrollmentService.method.revokeEnrollmentToken);
}

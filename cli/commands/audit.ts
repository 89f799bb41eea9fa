// `skipper audit`: the audit trail (AuditService, admins): list entries, verify the hash chain,
// export a range with its head signed by the controller. `export --dir` writes the files
// docs/audit.md checks with openssl (entries.jsonl, head.txt, head.sig, controller.crt).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Command } from "commander";
import { ActorKind, Role } from "../../gen/skipper/v1/access_pb.js";
import { AuditEntrySchema, AuditService, VerifyAuditTrailResponseSchema, type AuditEntry } from "../../gen/skipper/v1/audit_service_pb.js";
import { calls } from "../command-rpcs.js";
import type { CommandContext } from "../command-context.js";
import { CliError, EXIT_ERROR } from "../errors.js";
import { countFlag, durationFlag } from "../flags.js";
import { paint } from "../io.js";
import { asJson, documents, enumName, outputFormat, table, when } from "../output.js";

/** `skipper audit` (list, verify, export). */
export function registerAudit(program: Command, ctx: CommandContext): void {
  const audit = program.command("audit").description("the audit trail: list entries, verify the chain, export a signed range (admin)");
  registerList(audit, ctx);
  registerVerify(audit, ctx);
  registerExport(audit, ctx);
}

/** --since and --until (durations before now) as the request's bounds. */
function range(opts: { since?: string; until?: string }) {
  const at = (text: string, flag: string) => timestampFromDate(new Date(Date.now() - durationFlag(text, flag, 0)));
  return { ...(opts.since ? { since: at(opts.since, "--since") } : {}), ...(opts.until ? { until: at(opts.until, "--until") } : {}) };
}

function registerList(audit: Command, ctx: CommandContext): void {
  const cmd = audit
    .command("list")
    .alias("ls")
    .description("list audit entries, oldest first")
    .option("--since <duration>", "entries written within this long before now", "24h")
    .option("--until <duration>", "entries written before this long ago")
    .option("--limit <n>", "at most the first n of them", "100")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText(
      "after",
      "\nExamples:\n  $ skipper audit list --since 1h\n  $ skipper audit list --since 7d -o json | jq -r '.[].rpc' | sort | uniq -c",
    )
    .action(async (opts: { since: string; until?: string; limit: string; output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      const limit = countFlag(opts.limit, "--limit", 1, 10_000);
      const entries: AuditEntry[] = [];
      let pageToken = "";
      do {
        const res = await ctx
          .clients()
          .audit.listAuditEntries({ ...range(opts), pageSize: Math.min(1000, limit - entries.length), pageToken });
        entries.push(...res.entries);
        pageToken = res.nextPageToken;
      } while (pageToken && entries.length < limit);
      if (format !== "table")
        return ctx.io.out(
          documents(
            format,
            entries.map((e) => asJson(AuditEntrySchema, e)),
            true,
          ),
        );
      if (entries.length === 0) return ctx.io.err(`No audit entries since ${opts.since} ago.`);
      ctx.io.out(
        table(
          ["SEQ", "TIME", "ACTOR", "ROLE", "RPC", "TARGET", "TENANT", "OUTCOME"],
          entries.map((e) => [
            String(e.sequence),
            when(e.time),
            actorText(e),
            enumName(Role, e.actor?.role ?? 0).toLowerCase(),
            e.rpc.replace(/^skipper\.v1\./, ""),
            e.target || "-",
            e.tenantId || "-",
            e.outcome,
          ]),
        ),
      );
    });
  calls(cmd, AuditService.method.listAuditEntries);
}

function actorText(e: AuditEntry): string {
  const a = e.actor;
  if (!a) return "-";
  const kind = enumName(ActorKind, a.kind).toLowerCase();
  return a.name || a.id ? `${kind} ${a.name || a.id}` : kind;
}

function registerVerify(audit: Command, ctx: CommandContext): void {
  const cmd = audit
    .command("verify")
    .description("recompute the hash chain of every kept entry; exit 1 and name the first broken link if one was edited or removed")
    .option("-o, --output <format>", "text, json or yaml", "text")
    .addHelpText("after", "\nExample:\n  $ skipper audit verify")
    .action(async (opts: { output: string }) => {
      const res = await ctx.clients().audit.verifyAuditTrail({});
      if (opts.output !== "text") {
        const format = outputFormat(opts.output, ["json", "yaml"]);
        const { meta: _meta, ...doc } = asJson(VerifyAuditTrailResponseSchema, res) as Record<string, JsonValue>;
        ctx.io.out(documents(format, [doc], false));
      } else if (res.intact) {
        ctx.io.out(
          paint(
            ctx.io,
            "green",
            `intact: ${res.entriesChecked} entries (${res.firstSequence}..${res.lastSequence}), head ${res.headHash || "-"}`,
          ),
        );
      } else {
        const b = res.firstBreak;
        ctx.io.out(paint(ctx.io, "red", `broken at entry ${b?.sequence ?? "?"} (${b?.location || "?"}): ${b?.reason || "?"}`));
        ctx.io.out(`checked ${res.entriesChecked} entries (${res.firstSequence}..${res.lastSequence})`);
      }
      if (!res.intact) ctx.exitCode = EXIT_ERROR;
    });
  calls(cmd, AuditService.method.verifyAuditTrail);
}

function registerExport(audit: Command, ctx: CommandContext): void {
  const cmd = audit
    .command("export")
    .description("export a range of entries with the chain head signed by the controller's TLS key")
    .option("--since <duration>", "entries written within this long before now (default: all kept)")
    .option("--until <duration>", "entries written before this long ago")
    .option("--dir <dir>", "write entries.jsonl, head.txt, head.sig and controller.crt there (else the entries go to stdout)")
    .addHelpText(
      "after",
      `
docs/audit.md checks what --dir writes with openssl (the signature over head.txt, the
certificate against the controller's CA) and the chain with a short script.

Examples:
  $ skipper audit export --since 30d --dir audit-2026-11
  $ skipper audit export --since 1h > entries.jsonl`,
    )
    .action(async (opts: { since?: string; until?: string; dir?: string }) => {
      const res = await ctx.clients().audit.exportAuditTrail(range(opts));
      const jsonl = Buffer.from(res.entriesJsonl).toString("utf8");
      if (!opts.dir) {
        if (jsonl) ctx.io.out(jsonl.replace(/\n$/, ""));
      } else {
        try {
          mkdirSync(opts.dir, { recursive: true });
          writeFileSync(join(opts.dir, "entries.jsonl"), res.entriesJsonl);
          writeFileSync(join(opts.dir, "head.txt"), res.headHash);
          writeFileSync(join(opts.dir, "head.sig"), Buffer.from(res.headSignature, "base64"));
          writeFileSync(join(opts.dir, "controller.crt"), res.signerCertificate);
        } catch (e) {
          throw new CliError(`cannot write the export to ${opts.dir}: ${(e as Error).message}`);
        }
      }
      ctx.io.err(`Exported ${res.entryCount} entries, head ${res.headHash || "-"}${opts.dir ? ` to ${opts.dir}` : ""}.`);
    });
  calls(cmd, AuditService.method.exportAuditTrail);
}

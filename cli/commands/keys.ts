// `skipper keys` (AccessService: API keys with a role and a tenant scope). A new key's text is the
// one thing printed on stdout, once (the controller keeps only its hash), so it can go straight
// to a file; what was made is said on stderr.
import { durationFromMs, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Command } from "commander";
import { ApiKeySchema, Role, type ApiKey } from "../../gen/skipper/v1/access_pb.js";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { calls } from "../command-rpcs.js";
import { CliError } from "../errors.js";
import { asJson, documents, enumName, outputFormat, table, when } from "../output.js";
import type { CommandContext } from "../command-context.js";
import { collect, durationFlag } from "../flags.js";

const ROLES: Record<string, Role> = { admin: Role.ADMIN, operator: Role.OPERATOR, generator: Role.GENERATOR, viewer: Role.VIEWER };

/** `skipper keys` (create, list, get, rotate, revoke). */
export function registerKeys(program: Command, ctx: CommandContext): void {
  const keys = program.command("keys").description("manage API keys: create, list, get, rotate, revoke (admin)");
  registerCreate(keys, ctx);
  registerList(keys, ctx);
  registerGet(keys, ctx);
  registerRotate(keys, ctx);
  registerRevoke(keys, ctx);
}

// `keys create`: a new key, its text once on stdout.
function registerCreate(keys: Command, ctx: CommandContext): void {
  const cmd = keys
    .command("create")
    .argument("<name>", "a name for the key, e.g. ci-web (unique among live keys)")
    .description("create an API key; its text is printed once, on stdout")
    .requiredOption("--role <role>", "admin, operator, generator or viewer")
    .option("--tenant <id>", "limit the key to this tenant (repeatable)", collect, [])
    .option("--tenant-selector <labels>", "limit the key to tenants whose labels match, e.g. team=web")
    .option("--expires-in <duration>", "the key stops working after this long, e.g. 30d (default: never)")
    .addHelpText(
      "after",
      `
Roles: admin (everything), operator (read, write tenants and services, apply, rollouts),
generator (read, write desired state), viewer (read, secrets hidden).

Examples:
  $ skipper keys create ci-example --role operator --tenant example-tenant > ci.key
  $ skipper keys create grafana --role viewer --expires-in 90d > grafana.key`,
    )
    .action(async (name: string, opts: { role: string; tenant: string[]; tenantSelector?: string; expiresIn?: string }) => {
      const role = ROLES[opts.role.toLowerCase()];
      if (role === undefined)
        throw new CliError(`unknown role ${JSON.stringify(opts.role)}`, { hint: `one of ${Object.keys(ROLES).join(", ")}` });
      const expiresAt = opts.expiresIn
        ? timestampFromDate(new Date(Date.now() + durationFlag(opts.expiresIn, "--expires-in", 1000)))
        : undefined;
      const res = await ctx.clients().access.createApiKey({
        name,
        role,
        scope: { tenantIds: opts.tenant, tenantSelector: opts.tenantSelector ?? "" },
        ...(expiresAt ? { expiresAt } : {}),
      });
      const k = res.apiKey!;
      ctx.io.err(
        `API key ${k.id} (${k.name}, ${enumName(Role, k.role).toLowerCase()}${scopeText(k) === "all tenants" ? "" : `, ${scopeText(k)}`}) created.`,
      );
      ctx.io.err("Its text follows on stdout, shown only now: the controller keeps a hash.");
      ctx.io.out(res.secret);
    });
  calls(cmd, AccessService.method.createApiKey);
}

// `keys list`: the keys, never their secrets.
function registerList(keys: Command, ctx: CommandContext): void {
  const cmd = keys
    .command("list")
    .alias("ls")
    .description("list API keys (never their secrets)")
    .option("--all", "also revoked and expired keys")
    .option("-o, --output <format>", "table, json or yaml", "table")
    .addHelpText("after", "\nExamples:\n  $ skipper keys list\n  $ skipper keys list --all -o yaml")
    .action(async (opts: { all?: boolean; output: string }) => {
      const format = outputFormat(opts.output, ["table", "json", "yaml"]);
      const res = await ctx.clients().access.listApiKeys({ includeInactive: opts.all ?? false });
      if (format !== "table") {
        ctx.io.out(
          documents(
            format,
            res.apiKeys.map((k) => asJson(ApiKeySchema, k)),
            true,
          ),
        );
        return;
      }
      if (res.apiKeys.length === 0) {
        ctx.io.err("No API keys.");
        return;
      }
      ctx.io.out(
        table(
          ["ID", "NAME", "ROLE", "SCOPE", "STATUS", "CREATED", "EXPIRES"],
          res.apiKeys.map((k) => [
            k.id,
            k.name,
            enumName(Role, k.role).toLowerCase(),
            scopeText(k),
            k.status,
            when(k.createdAt),
            when(k.expiresAt),
          ]),
        ),
      );
    });
  calls(cmd, AccessService.method.listApiKeys);
}

// `keys get`: one key (never its secret).
function registerGet(keys: Command, ctx: CommandContext): void {
  const cmd = keys
    .command("get")
    .argument("<key>", "the key's id or name (a key text skk_<id>_... names its id)")
    .description("show one API key: role, scope, status, last use (never its secret)")
    .option("-o, --output <format>", "yaml or json", "yaml")
    .addHelpText("after", "\nExample:\n  $ skipper keys get ci-example")
    .action(async (key: string, opts: { output: string }) => {
      const format = outputFormat(opts.output, ["json", "yaml"]);
      const id = await keyId(ctx, /^skk_([^_]+)_/.exec(key)?.[1] ?? key);
      const res = await ctx.clients().access.getApiKey({ id });
      ctx.io.out(documents(format, [asJson(ApiKeySchema, res.apiKey!)], false));
    });
  calls(cmd, AccessService.method.getApiKey, AccessService.method.listApiKeys);
}

// `keys rotate`: a new secret, once on stdout; the old one works for the grace period.
function registerRotate(keys: Command, ctx: CommandContext): void {
  const cmd = keys
    .command("rotate")
    .argument("<key>", "the key's id or name (a key text skk_<id>_... names its id)")
    .description("give a key a new secret, printed once on stdout; the old secret works for the grace period")
    .option("--grace-period <duration>", "how long the old secret keeps working (at most 30d)", "24h")
    .addHelpText("after", "\nExample:\n  $ skipper keys rotate ci-example --grace-period 1h > ci.key")
    .action(async (key: string, opts: { gracePeriod: string }) => {
      const id = await keyId(ctx, /^skk_([^_]+)_/.exec(key)?.[1] ?? key);
      const gracePeriod = durationFromMs(durationFlag(opts.gracePeriod, "--grace-period", 0));
      const res = await ctx.clients().access.rotateApiKey({ id, gracePeriod });
      ctx.io.err(`API key ${res.apiKey!.id} (${res.apiKey!.name}) rotated: the old secret works ${opts.gracePeriod} more.`);
      ctx.io.err("Its new text follows on stdout, shown only now: the controller keeps a hash.");
      ctx.io.out(res.secret);
    });
  calls(cmd, AccessService.method.rotateApiKey, AccessService.method.getApiKey, AccessService.method.listApiKeys);
}

// `keys revoke`: refuse a key from its next call on.
function registerRevoke(keys: Command, ctx: CommandContext): void {
  const cmd = keys
    .command("revoke")
    .argument("<key>", "the key's id or name (a key text skk_<id>_... names its id)")
    .description("refuse a key from its next call on, on every controller")
    .option("--reason <text>", "why, recorded in the audit trail")
    .addHelpText("after", '\nExamples:\n  $ skipper keys revoke ci-example --reason "left the team"\n  $ skipper keys revoke 3f9c2a1b')
    .action(async (key: string, opts: { reason?: string }) => {
      const clients = ctx.clients();
      const id = await keyId(ctx, /^skk_([^_]+)_/.exec(key)?.[1] ?? key);
      const res = await clients.access.revokeApiKey({ id, reason: opts.reason ?? "" });
      ctx.io.out(`API key ${res.apiKey!.id} (${res.apiKey!.name}) revoked.`);
    });
  calls(cmd, AccessService.method.revokeApiKey, AccessService.method.getApiKey, AccessService.method.listApiKeys);
}

async function keyId(ctx: CommandContext, idOrName: string): Promise<string> {
  const access = ctx.clients().access;
  try {
    return (await access.getApiKey({ id: idOrName })).apiKey!.id;
  } catch (e) {
    if (!(e instanceof ConnectError) || (e.code !== Code.NotFound && e.code !== Code.InvalidArgument)) throw e;
  }
  const live = (await access.listApiKeys({ includeInactive: false })).apiKeys.filter((k) => k.name === idOrName);
  if (live.length === 1) return live[0]!.id;
  throw new CliError(`no live API key with the id or name ${JSON.stringify(idOrName)}`, { hint: "see them with `skipper keys list`" });
}

function scopeText(k: ApiKey): string {
  const parts = [
    ...(k.scope?.tenantIds.length ? [`tenants ${k.scope.tenantIds.join(",")}`] : []),
    ...(k.scope?.tenantSelector ? [`tenants ${k.scope.tenantSelector}`] : []),
  ];
  return parts.length > 0 ? parts.join(" or ") : "all tenants";
}

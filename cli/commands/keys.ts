// `skipper keys` (AccessService: API keys with a role and a tenant scope) and `skipper node
// enroll-token` (EnrollmentService). A new key's or token's text is the one thing printed on
// stdout, once (the controller keeps only its hash), so it can go straight to a file; what was
// made is said on stderr.
import { durationFromMs, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Command } from "commander";
import { ApiKeySchema, Role, type ApiKey } from "../../gen/skipper/v1/access_pb.js";
import { CliError } from "../errors.js";
import { asJson, documents, enumName, outputFormat, table, when } from "../output.js";
import type { CommandContext } from "../command-context.js";
import { durationFlag } from "../flags.js";

const ROLES: Record<string, Role> = { admin: Role.ADMIN, operator: Role.OPERATOR, generator: Role.GENERATOR, viewer: Role.VIEWER };
const collect = (value: string, previous: string[]) => [...previous, value];

/** `skipper keys` (create, list, revoke) and `skipper node enroll-token`. */
export function registerKeys(program: Command, ctx: CommandContext): void {
  const keys = program.command("keys").description("manage API keys: create, list, revoke (admin)");
  registerCreate(keys, ctx);
  registerList(keys, ctx);
  registerRevoke(keys, ctx);
  registerEnrollToken(program, ctx);
}

// `keys create`: a new key, its text once on stdout.
function registerCreate(keys: Command, ctx: CommandContext): void {
  keys
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
}

// `keys list`: the keys, never their secrets.
function registerList(keys: Command, ctx: CommandContext): void {
  keys
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
}

// `keys revoke`: refuse a key from its next call on.
function registerRevoke(keys: Command, ctx: CommandContext): void {
  keys
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
}

// `node enroll-token`: a token a host enrolls with, its text once on stdout.
function registerEnrollToken(program: Command, ctx: CommandContext): void {
  const node = program.command("node").description("node administration");
  node
    .command("enroll-token")
    .argument("<node>", "the node id the token may enroll")
    .description("create an enrollment token for a host; its text is printed once, on stdout")
    .option("--uses <n>", "enrollments it allows", "1")
    .option("--ttl <duration>", "how long it stays valid", "24h")
    .option("--label <key=value>", "a label for the node it enrolls (repeatable)", collect, [])
    .option("--certificate-ttl <duration>", "lifetime of the node's client certificates (default 24h)")
    .option("--description <text>", "a note for people")
    .addHelpText(
      "after",
      `
On the host, skippy makes its key pair, sends a certificate signing request with the token,
and from then on authenticates with its client certificate:
  skippy --controller https://CONTROLLER:8443 --ca-file ca.crt --node-id NODE --enroll-token-file host.enroll

Example:
  $ skipper node enroll-token host-9 --label env=dev > host-9.enroll`,
    )
    .action(async (nodeId: string, opts: { uses: string; ttl: string; label: string[]; certificateTtl?: string; description?: string }) => {
      const uses = Number(opts.uses);
      if (!Number.isInteger(uses) || uses < 1) throw new CliError("--uses must be a whole number of at least 1");
      const labels: Record<string, string> = {};
      for (const l of opts.label) {
        const eq = l.indexOf("=");
        if (eq <= 0) throw new CliError(`--label ${JSON.stringify(l)} must be key=value`);
        labels[l.slice(0, eq)] = l.slice(eq + 1);
      }
      const res = await ctx.clients().enrollment.createEnrollmentToken({
        nodeId,
        uses,
        ttl: durationFromMs(durationFlag(opts.ttl, "--ttl", 1000)),
        labels,
        ...(opts.certificateTtl ? { certificateTtl: durationFromMs(durationFlag(opts.certificateTtl, "--certificate-ttl", 1000)) } : {}),
        description: opts.description ?? "",
      });
      const t = res.enrollmentToken!;
      ctx.io.err(`Enrollment token ${t.id} for node ${nodeId} created: ${t.uses} use(s), valid until ${when(t.expiresAt)}.`);
      ctx.io.err("Its text follows on stdout, shown only now: the controller keeps a hash.");
      ctx.io.out(res.token);
    });
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

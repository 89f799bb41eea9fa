// `skipper login` and `skipper context`: the contexts of the config file (config-file.ts). Login
// checks the credential with the controller (AccessService.WhoAmI) before it saves anything. The
// credential is never printed: listings say which kind it is (an API key by its id).
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import type { Command } from "commander";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { calls } from "../command-rpcs.js";
import { ActorKind, Role } from "../../gen/skipper/v1/access_pb.js";
import { configPath, readConfig, writeConfig } from "../config-file.js";
import { connect, normalizeServer } from "../connection.js";
import { CliError } from "../errors.js";
import { enumName, table } from "../output.js";
import type { CommandContext } from "../command-context.js";

export function registerLogin(program: Command, ctx: CommandContext): void {
  calls(program.command("login"), AccessService.method.whoAmI)
    .description("check a credential with a controller and save it as a context (made current)")
    .option("--token-file <file>", "read the admin token or API key from this file")
    .option("--token-stdin", "read the admin token or API key from stdin")
    .addHelpText(
      "after",
      `
The server and CA file come from the global --server and --ca-file (or SKIPPER_SERVER,
SKIPPER_CA_FILE); --context NAME names the context (default: the server's host and port).
The token is checked with the controller, then saved in the config file (mode 0600); it is
never printed.

Examples:
  $ skipper login --server https://127.0.0.1:8443 --ca-file data/tls/ca.crt --token-stdin <<< "$SKIPPER_ADMIN_TOKEN"
  $ skipper login --server https://skipper.example:8443 --token-file ci.key --context prod`,
    )
    .action(async (opts: { tokenFile?: string; tokenStdin?: boolean }) => {
      const g = ctx.globals();
      const env = ctx.io.env;
      const rawServer = g.server ?? env.SKIPPER_SERVER;
      if (!rawServer) throw new CliError("login needs the controller's URL", { hint: "pass --server https://HOST:8443" });
      const server = normalizeServer(rawServer);
      const caOpt = g.caFile ?? env.SKIPPER_CA_FILE;
      const caFile = caOpt ? resolve(caOpt) : undefined;
      if (opts.tokenFile && opts.tokenStdin) throw new CliError("give --token-file or --token-stdin, not both");
      const token = opts.tokenFile
        ? readToken(opts.tokenFile)
        : opts.tokenStdin
          ? (await ctx.io.readStdin()).trim()
          : (g.token ?? env.SKIPPER_TOKEN);
      if (!token)
        throw new CliError("login needs a credential", { hint: "pass --token-file FILE or --token-stdin (the admin token or an API key)" });
      const clients = connect({ server, token, ...(caFile ? { caFile } : {}) });
      let who: Awaited<ReturnType<typeof clients.access.whoAmI>>;
      try {
        who = await clients.access.whoAmI({});
      } finally {
        clients.close();
      }
      const actor = who.actor;
      if (!actor || actor.kind === ActorKind.ANONYMOUS || actor.kind === ActorKind.UNSPECIFIED) {
        throw new CliError(`the controller at ${server} did not accept the credential`, {
          hint: "check the token (an admin token or an skk_ API key)",
        });
      }
      const name = g.context ?? env.SKIPPER_CONTEXT ?? contextName(server);
      const path = configPath(env);
      const config = readConfig(path);
      config.contexts[name] = { server, token, ...(caFile ? { caFile } : {}) };
      config.currentContext = name;
      writeConfig(path, config);
      const who_ =
        actor.kind === ActorKind.API_KEY
          ? `API key ${actor.name || actor.id}`
          : enumName(ActorKind, actor.kind).toLowerCase().replace("_", " ");
      ctx.io.out(`Logged in to ${server} as ${who_} (role ${enumName(Role, actor.role).toLowerCase()}).`);
      ctx.io.out(`Context "${name}" saved in ${path} and made current.`);
    });

  const context = program.command("context").description("list the saved contexts, or choose the current one");
  context
    .command("list")
    .alias("ls")
    .description("list the contexts (the credential is never shown, only its kind)")
    .addHelpText("after", "\nExample:\n  $ skipper context list")
    .action(() => {
      const path = configPath(ctx.io.env);
      const config = readConfig(path);
      const names = Object.keys(config.contexts).sort();
      if (names.length === 0) {
        ctx.io.err(`no contexts in ${path}: create one with \`skipper login\``);
        return;
      }
      ctx.io.out(
        table(
          ["CURRENT", "NAME", "SERVER", "CA FILE", "CREDENTIAL"],
          names.map((n) => {
            const c = config.contexts[n]!;
            return [n === config.currentContext ? "*" : "", n, c.server, c.caFile ?? "(system CAs)", credentialKind(c.token)];
          }),
        ),
      );
    });
  context
    .command("use")
    .argument("<name>", "the context to make current")
    .description("make a context the current one")
    .addHelpText("after", "\nExample:\n  $ skipper context use prod")
    .action((name: string) => {
      const path = configPath(ctx.io.env);
      const config = readConfig(path);
      if (!config.contexts[name]) throw unknownContext(name, Object.keys(config.contexts), path);
      config.currentContext = name;
      writeConfig(path, config);
      ctx.io.out(`Current context: ${name} (${config.contexts[name]!.server}).`);
    });
  context
    .command("delete")
    .alias("rm")
    .argument("<name>", "the context to remove")
    .description("remove a context (and the credential saved with it)")
    .addHelpText("after", "\nExample:\n  $ skipper context delete old-lab")
    .action((name: string) => {
      const path = configPath(ctx.io.env);
      const config = readConfig(path);
      if (!config.contexts[name]) throw unknownContext(name, Object.keys(config.contexts), path);
      delete config.contexts[name];
      if (config.currentContext === name) delete config.currentContext;
      writeConfig(path, config);
      ctx.io.out(`Context ${name} removed.`);
    });
}

function readToken(file: string): string {
  try {
    return readFileSync(file, "utf8").trim();
  } catch (e) {
    throw new CliError(`cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/** What kind of credential a context holds, without showing it. */
function credentialKind(token: string | undefined): string {
  if (!token) return "none";
  const key = /^skk_([^_]+)_/.exec(token);
  return key ? `API key ${key[1]}` : "admin token";
}

function contextName(server: string): string {
  return new URL(server).host.replace(/[^A-Za-z0-9._-]/g, "-");
}

function unknownContext(name: string, known: string[], path: string): CliError {
  return new CliError(`no context named ${JSON.stringify(name)} in ${path}`, {
    hint: known.length > 0 ? `known contexts: ${known.sort().join(", ")}` : "create one with `skipper login`",
  });
}

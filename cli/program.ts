// The `skipper` command line: a commander program whose commands (cli/commands/*.ts) each call
// the controller through the generated typed clients. `run` parses argv, runs one command and
// returns its exit code (0 done, 2 blocked, 1 error; see errors.ts), printing errors with what to
// do; it never exits the process, so tests run it in-process too.
import { Command, CommanderError, Option } from "commander";
import { registerAdmin } from "./commands/admin.js";
import { registerApply } from "./commands/apply.js";
import { registerAudit } from "./commands/audit.js";
import { registerDeploy } from "./commands/deploy.js";
import { registerEnrollmentTokens } from "./commands/enrollment-tokens.js";
import { registerNode } from "./commands/node.js";
import { registerAgentBundle } from "./commands/agent-bundle.js";
import { registerAgentVersion } from "./commands/agent-version.js";
import { registerOrder } from "./commands/order.js";
import { registerSnapshots } from "./commands/snapshots.js";
import { registerWebhooks } from "./commands/webhooks.js";
import { registerCompletion } from "./commands/completion.js";
import { registerEvents } from "./commands/events.js";
import { registerExplain } from "./commands/explain.js";
import { registerGet } from "./commands/get.js";
import { registerKeys } from "./commands/keys.js";
import { registerLogin } from "./commands/login.js";
import { registerLogs } from "./commands/logs.js";
import { registerExec } from "./commands/exec.js";
import { registerContainer } from "./commands/container.js";
import { registerRollout } from "./commands/rollout.js";
import { registerDelivery } from "./commands/delivery.js";
import { registerArtifact } from "./commands/artifact.js";
import { registerGit } from "./commands/git.js";
import type { CommandContext } from "./command-context.js";
import { callsLine } from "./command-rpcs.js";
import { connect, resolveTarget, type Clients, type GlobalOptions } from "./connection.js";
import { describeError, EXIT_ERROR, EXIT_OK } from "./errors.js";
import { paint, type Io } from "./io.js";

export const VERSION = "0.1.0";

/** The program with every command, writing to `io`. */
export function buildProgram(ctx: CommandContext): Command {
  const program = new Command("skipper")
    .description(
      "Operate a Skipper controller: apply manifests, deploy, read resources, follow rollouts and events, administer nodes, keys, webhooks and the audit trail.",
    )
    .version(VERSION, "-V, --version")
    .addOption(new Option("--server <url>", "controller URL, e.g. https://127.0.0.1:8443 (env SKIPPER_SERVER)"))
    .addOption(new Option("--ca-file <file>", "CA certificate the controller's is signed by (env SKIPPER_CA_FILE)"))
    .addOption(new Option("--token <token>", "admin token or API key; prefer the context or SKIPPER_TOKEN (env SKIPPER_TOKEN)"))
    .addOption(new Option("--context <name>", "use this context of the config file instead of the current one (env SKIPPER_CONTEXT)"))
    .showHelpAfterError("(add --help for usage)")
    .showSuggestionAfterError(true)
    .exitOverride()
    .configureOutput({
      writeOut: (s) => ctx.io.out(s.replace(/\n$/, "")),
      writeErr: (s) => ctx.io.err(s.replace(/\n$/, "")),
      outputError: (s, write) => write(paint({ color: ctx.io.color }, "red", s)),
    })
    .addHelpText(
      "after",
      `
Connection: flags win over the environment, which wins over the context (\`skipper login\` saves
one in $XDG_CONFIG_HOME/skipper/config.yaml, else ~/.config/skipper/config.yaml, mode 0600).

Exit codes: 0 done, 2 blocked (paused, failed, rolled back, nowhere to run), 1 any error.

Examples:
  $ skipper login --server https://127.0.0.1:8443 --ca-file data/tls/ca.crt --token-stdin <<< "$SKIPPER_ADMIN_TOKEN"
  $ skipper apply -f deploy/
  $ skipper rollout status example-tenant --wait --timeout 5m
  $ skipper get tenants -o wide`,
    );
  for (const register of [
    registerLogin,
    registerApply,
    registerDeploy,
    registerGet,
    registerExplain,
    registerRollout,
    registerDelivery,
    registerArtifact,
    registerGit,
    registerEvents,
    registerOrder,
    registerLogs,
    registerExec,
    registerContainer,
    registerNode,
    registerEnrollmentTokens,
    registerAgentBundle,
    registerAgentVersion,
    registerKeys,
    registerAdmin,
    registerWebhooks,
    registerAudit,
    registerSnapshots,
    registerCompletion,
  ]) {
    register(program, ctx);
  }
  // Every subcommand reports its errors the same way as the program.
  const inherit = (c: Command) => {
    for (const sub of c.commands) {
      sub.exitOverride().configureOutput(program.configureOutput()).showHelpAfterError("(add --help for usage)");
      const api = callsLine(sub);
      if (api) sub.addHelpText("after", api);
      inherit(sub);
    }
  };
  inherit(program);
  return program;
}

/** Runs one command line (without the node and script arguments); resolves with its exit code. */
export async function run(argv: string[], io: Io): Promise<number> {
  let clients: Clients | undefined;
  let program: Command | undefined;
  const ctx: CommandContext = {
    io,
    exitCode: EXIT_OK,
    globals: () => (program?.opts() ?? {}) as GlobalOptions,
    clients: () => {
      clients ??= connect(resolveTarget(ctx.globals(), io.env));
      return clients;
    },
  };
  program = buildProgram(ctx);
  try {
    await program.parseAsync(argv, { from: "user" });
    return ctx.exitCode;
  } catch (e) {
    if (e instanceof CommanderError) {
      // Help and version end with code 0; a usage error was printed by commander already.
      return e.exitCode === 0 ? EXIT_OK : EXIT_ERROR;
    }
    let server: string | undefined;
    try {
      server = clients?.target.server ?? resolveTarget(ctx.globals(), io.env).server;
    } catch {
      // no controller known: the error says so
    }
    const d = describeError(e, server);
    io.err(paint(io, "red", `error: ${d.message}`));
    if (d.hint) io.err(`hint: ${d.hint}`);
    return d.exitCode;
  } finally {
    clients?.close();
  }
}

// `skipper exec TENANT SERVICE -- CMD [ARGS...]`: a command inside the running container of a
// tenant's compose service, on every node the tenant runs on (or the --node ones), through one
// exec_service work order per node: the controller never reaches into a host, the node's agent
// runs `docker exec` and reports the exit code and output (capped, the project's secret values
// blanked). Each node's stdout goes to stdout and its stderr to stderr, prefixed with the node
// when there are several; the CLI exits with the command's exit code (the first non-zero one in
// node order across several; 1 for a node whose order ended without running it).
//
// -t (a terminal, `-it` with input) opens a terminal instead, on one node (TerminalService.Attach,
// relayed by the controller over the node's session; cli/terminal.ts): input streams as it is
// read (held back while the controller has a window of it in flight), output as it comes, no cap.
// -i without -t stays an order per node, which a polling agent without a session runs too; its
// stdin goes with the order, so it is read only up to the order's cap and refused when larger.
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { Command } from "commander";
import { readFile, stat } from "node:fs/promises";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { EXEC_LIMITS } from "../../common/action-rules.js";
import type { CommandContext } from "../command-context.js";
import { calls } from "../command-rpcs.js";
import type { Clients } from "../connection.js";
import { CliError } from "../errors.js";
import { collect, durationFlag, labelFlags } from "../flags.js";
import { nodeSilence, runOrder, tenantNodes } from "../order-wait.js";
import { TerminalService } from "../../gen/skipper/v1/terminal_service_pb.js";
import { runTerminal } from "../terminal.js";

interface ExecOptions {
  node: string[];
  user?: string;
  workdir?: string;
  env: string[];
  stdinFile?: string;
  stdin?: boolean;
  tty?: boolean;
  replica: string;
  timeout: string;
  claimTimeout: string;
}

/** What one node answered: the command ran (its exit code and output), or why it did not. */
type NodeAnswer = { node: string; order: WorkOrder } | { node: string; failure: string };

export function registerExec(program: Command, ctx: CommandContext): void {
  calls(
    program.command("exec"),
    ResourceService.method.getResource,
    WorkOrderService.method.createWorkOrder,
    WorkOrderService.method.getWorkOrder,
    WorkOrderService.method.cancelWorkOrder,
    TerminalService.method.attach,
  )
    .argument("<tenant>", "the tenant whose service it is")
    .argument("<service>", "the compose service whose running container runs it")
    .argument("[command...]", "the command and its arguments, after --")
    .description("run a command in a tenant's service container on each node it runs on (exec_service orders)")
    .option("--node <id>", "only this node; repeat for several (default: every node the tenant runs on)", collect, [])
    .option("-u, --user <user>", "run as this user in the container: name or uid, optionally :group")
    .option("-w, --workdir <dir>", "absolute directory in the container to run in")
    .option("-e, --env <KEY=VALUE>", "set a variable for the command; repeat for several", collect, [])
    .option("--stdin-file <file>", `write this file to the command's stdin (at most ${EXEC_LIMITS.stdinBytes / 1024} KiB)`)
    .option(
      "-i, --stdin",
      `give this command's stdin to the command's (at most ${EXEC_LIMITS.stdinBytes / 1024} KiB with the order; -it: streamed)`,
    )
    .option("-t, --tty", "a live terminal in the container on one node (with -i: interactive, `-it`)")
    .option("--replica <n>", "which replica when the service runs several on a node (compose's number; default the lowest)", "0")
    .option("--timeout <duration>", "stop it after this long", "60s")
    .option("--claim-timeout <duration>", "give up on a node that has not taken its order within this", "60s")
    .addHelpText(
      "after",
      `
The command runs as given, without a shell (name one to use its syntax). Without -t, it runs as
a work order per node: output capped at 1 MiB per stream, the project's secret values blanked,
stdin (-i, --stdin-file) at most ${EXEC_LIMITS.stdinBytes / 1024} KiB. With -t it is a live terminal through the
controller and the node's own session: stdin streams in, output streams out uncapped and not
blanked (the operator in the shell may read the secrets there anyway), --timeout does not apply
(an idle terminal is closed after 4 min). The exit code
is the command's own; with several nodes the first non-zero one, and each line is prefixed with
its node. An operator's right; every run is a work order, in the audit trail.

Examples:
  $ skipper exec example-tenant web -- cat /etc/hostname
  $ skipper exec example-tenant web --node host-1 -e LEVEL=debug -- sh -c 'echo $LEVEL'
  $ skipper exec example-tenant db -i -- psql -U app < query.sql
  $ skipper exec -it example-tenant web --node host-1 -- sh`,
    )
    .action(async (tenant: string, service: string, argv: string[], opts: ExecOptions) => {
      if (argv.length === 0)
        throw new CliError("no command: skipper exec TENANT SERVICE -- CMD [ARGS...]", {
          hint: "a program on a host (not in a container) is skipper node exec NODE -- PROGRAM",
        });
      const terminal = await terminalNode(ctx, tenant, opts);
      if (terminal !== undefined) return openTerminal(ctx, tenant, terminal, service, argv, opts);
      const action = await actionOf(ctx, service, argv, opts);
      const timeoutMs = durationFlag(opts.timeout, "--timeout");
      const claimWithinMs = durationFlag(opts.claimTimeout, "--claim-timeout");
      const clients = ctx.clients();
      const nodes = opts.node.length > 0 ? [...new Set(opts.node)].sort() : await tenantNodes(clients, tenant);
      if (nodes.length === 0) throw new CliError(`tenant ${tenant} runs on no node`, { hint: `skipper explain ${tenant} says why` });
      const answers = await Promise.all(nodes.map((node) => askNode(clients, { tenant, node, action, timeoutMs, claimWithinMs })));
      if (answers.length === 1) return printOne(ctx, answers[0]!);
      for (const a of answers) printPrefixed(ctx, a);
      ctx.exitCode = answers.map(exitCodeOf).find((c) => c !== 0) ?? 0;
    });
}

// The node of a terminal (-t), or undefined for orders (-i without -t included).
async function terminalNode(ctx: CommandContext, tenant: string, opts: ExecOptions): Promise<string | undefined> {
  if (!opts.tty) return undefined;
  if (opts.stdinFile !== undefined) throw new CliError("give --stdin-file or -t, not both");
  const named = [...new Set(opts.node)];
  if (named.length > 1) throw new CliError("-t opens one terminal: name one node with --node");
  if (named.length === 1) return named[0];
  const nodes = await tenantNodes(ctx.clients(), tenant);
  if (nodes.length === 1) return nodes[0];
  throw new CliError(`tenant ${tenant} runs on ${nodes.length === 0 ? "no node" : nodes.join(", ")}: -t needs one node`, {
    hint: "name it with --node",
  });
}

// A terminal on `node`; the exit code is its command's.
async function openTerminal(ctx: CommandContext, tenant: string, node: string, service: string, argv: string[], opts: ExecOptions) {
  const { replica, user, workdir, env } = await actionOf(ctx, service, argv, { ...opts, stdin: false });
  const open = { tenantId: tenant, service, nodeId: node, replica, argv, user, workdir, env, tty: Boolean(opts.tty) };
  const streams = { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr, env: ctx.io.env };
  const end = await runTerminal(ctx.clients().terminals, open, streams);
  ctx.exitCode = end.exitCode;
}

type ExecValue = {
  service: string;
  argv: string[];
  user: string;
  workdir: string;
  env: Record<string, string>;
  stdin: Uint8Array;
  replica: number;
};

// The order's action from the flags; the controller checks it again (INVALID_REQUEST naming the field).
async function actionOf(ctx: CommandContext, service: string, argv: string[], opts: ExecOptions): Promise<ExecValue> {
  if (opts.stdinFile !== undefined && opts.stdin) throw new CliError("give --stdin-file or -i/--stdin, not both");
  const cap = EXEC_LIMITS.stdinBytes;
  const over = (what: string) =>
    new CliError(`${what} is over ${cap / 1024} KiB: at most ${cap} bytes of stdin go with an exec order`, {
      hint: "stream it through a terminal (-it, one node), or copy it into the container another way (an upload_files order to a mounted directory)",
    });
  let stdin: Uint8Array = new Uint8Array();
  if (opts.stdinFile !== undefined) {
    if ((await stat(opts.stdinFile)).size > cap) throw over(opts.stdinFile);
    stdin = await readFile(opts.stdinFile);
  } else if (opts.stdin) {
    // Read no further than the cap: larger input is refused, never held whole.
    stdin = ctx.io.readStdinBytes ? await ctx.io.readStdinBytes(cap) : new TextEncoder().encode(await ctx.io.readStdin());
  }
  if (stdin.length > cap) throw over(opts.stdinFile ?? "stdin");
  const replica = Number(opts.replica);
  if (!Number.isInteger(replica) || replica < 0 || replica > 1000) throw new CliError("--replica must be a whole number from 0 to 1000");
  return {
    service,
    argv,
    user: opts.user ?? "",
    workdir: opts.workdir ?? "",
    env: labelFlags(opts.env, "--env"),
    stdin,
    replica,
  };
}

interface Ask {
  tenant: string;
  node: string;
  action: ExecValue;
  timeoutMs: number;
  claimWithinMs: number;
}

// One node's exec_service order, run to its end; a node whose agent is silent is not asked.
async function askNode(clients: Clients, ask: Ask): Promise<NodeAnswer> {
  const { tenant, node, action } = ask;
  const silence = await nodeSilence(clients, node);
  if (silence) return { node, failure: `${node} is ${silence}: it cannot run a command now` };
  const { order, untaken } = await runOrder(
    clients,
    {
      type: WorkOrderType.EXEC_SERVICE,
      target: { tenantId: tenant, nodeId: node },
      action: { kind: { case: "execService", value: action } },
      timeout: durationFromMs(ask.timeoutMs),
    },
    ask.claimWithinMs,
  );
  if (untaken) return { node, failure: `${node}: ${untaken}` };
  return { node, order };
}

// Ran: the command's exit code (1 when the agent reported none); did not run: 1.
function exitCodeOf(a: NodeAnswer): number {
  if ("failure" in a) return 1;
  const code = a.order.result?.code;
  if (code === "EXEC_OK") return 0;
  const exit = a.order.result?.details?.exec?.exitCode ?? 0;
  return code === "EXEC_FAILED" && exit > 0 && exit < 256 ? exit : 1;
}

// Why a node's order did not run the command, or undefined when it ran (whatever its exit code).
function notRun(a: NodeAnswer): string | undefined {
  if ("failure" in a) return a.failure;
  const r = a.order.result;
  if (r?.code === "EXEC_OK" || r?.code === "EXEC_FAILED") return undefined;
  return `${r?.code ?? WorkOrderStatus[a.order.status]}: ${r?.message ?? "no result"}`;
}

function printOne(ctx: CommandContext, a: NodeAnswer): void {
  const exec = "order" in a ? a.order.result?.details?.exec : undefined;
  if (exec?.stdout) ctx.io.out(exec.stdout.replace(/\n$/, ""));
  if (exec?.stderr) ctx.io.err(exec.stderr.replace(/\n$/, ""));
  if (exec?.truncated) ctx.io.err(`(${a.node}: output cut at 1 MiB per stream)`);
  const why = notRun(a);
  if (why) throw new CliError(why.startsWith(`${a.node}`) ? why : `${a.node}: ${why}`, { hint: hintFor(a) });
  ctx.exitCode = exitCodeOf(a);
}

function printPrefixed(ctx: CommandContext, a: NodeAnswer): void {
  const exec = "order" in a ? a.order.result?.details?.exec : undefined;
  const lines = (text: string) => (text === "" ? [] : text.replace(/\n$/, "").split("\n"));
  for (const l of lines(exec?.stdout ?? "")) ctx.io.out(`${a.node} | ${l}`);
  for (const l of lines(exec?.stderr ?? "")) ctx.io.err(`${a.node} | ${l}`);
  if (exec?.truncated) ctx.io.err(`${a.node} | (output cut at 1 MiB per stream)`);
  const why = notRun(a);
  if (why) ctx.io.err(why.startsWith(`${a.node}`) ? why : `${a.node}: ${why}`);
  else if (exitCodeOf(a) !== 0) ctx.io.err(`${a.node}: exit code ${exitCodeOf(a)}`);
}

function hintFor(a: NodeAnswer): string | undefined {
  if ("failure" in a) return `skipper get node ${a.node}`;
  const code = a.order.result?.code;
  if (code === "SERVICE_NOT_RUNNING" || code === "PROJECT_NOT_FOUND")
    return `skipper explain ${a.order.target?.tenantId ?? ""} shows what runs where`;
  return undefined;
}

// The execute_command executor: runs one program from the node's allow-list with the order's
// arguments, never through a shell, and reports its exit code and (capped, scrubbed) output.
// The checks (allow-list, working dir, env, timeout) are engine/command-spec.ts's, shared with
// the deploy hooks.
//
//   the order carries a command with an argv                           else COMMAND_INVALID
//   argv[0] is on the operator's allow-list (matched exactly)           else COMMAND_NOT_ALLOWED
//   working dir, env names and timeout acceptable                       else COMMAND_INVALID
//   COMMAND_OK (exit 0), COMMAND_FAILED (exit code in details.command), TIMEOUT, CANCELLED,
//   COMMAND_NOT_FOUND.
import { describeRun, runCommandSpec } from "../engine/command-spec.js";
import { abortReason, commandResult, executorOf, orderOutcome } from "./executor.js";

/** Runs the order's allow-listed command; never throws for a failure of the command itself. */
export const executeCommand = executorOf("executeCommand", async (action, _order, ctx) => {
  const started = performance.now();
  const done = (code: string, message: string) => orderOutcome(code, message, started, { success: false });
  const spec = action?.command;
  if (!spec || spec.argv.length === 0) return done("COMMAND_INVALID", "the order carries no command (action.execute_command.command.argv)");
  if (ctx.signal.aborted) return done("CANCELLED", `cancelled before the command ran: ${abortReason(ctx.signal) || "no reason given"}`);
  const r = await runCommandSpec(spec, ctx.config.allowCommands, { defaultCwd: ctx.config.workDir, signal: ctx.signal });
  if (r.kind === "not_allowed") return done("COMMAND_NOT_ALLOWED", `not run: ${r.reason}`);
  if (r.kind === "invalid") return done("COMMAND_INVALID", r.reason);
  const { run } = r;
  const ran = (code: string, success = false) =>
    orderOutcome(code, describeRun(r), started, { success, details: { command: commandResult(run) } });
  if (run.cancelled || ctx.signal.aborted)
    return orderOutcome("CANCELLED", `stopped: ${abortReason(ctx.signal) || "cancelled"}`, started, {
      success: false,
      details: { command: commandResult(run) },
    });
  if (run.timedOut) return ran("TIMEOUT");
  if (run.notFound) return ran("COMMAND_NOT_FOUND");
  return run.exitCode === 0 ? ran("COMMAND_OK", true) : ran("COMMAND_FAILED");
});

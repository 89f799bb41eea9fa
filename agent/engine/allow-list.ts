// The node's command allow-list: the programs that execute_command orders and deploy hooks may
// run on this host, set locally by the operator (--allow-command), never by the controller. A
// command is allowed when its argv[0] equals an entry exactly: "uptime" allows the program found
// as `uptime` on PATH, "/usr/bin/uptime" only that path. Arguments are passed to the program as
// they are, without a shell, so they cannot start anything else.
import { isAbsolute } from "node:path";
import { PROGRAM } from "../../common/action-rules.js";

export interface AllowCheck {
  allowed: boolean;
  /** Why not, for the result message. */
  reason?: string;
}

/** Checks one allow-list entry when the agent starts. */
export function validAllowEntry(entry: string): boolean {
  return PROGRAM.test(entry) && !entry.split("/").includes("..");
}

export function checkCommand(argv: readonly string[], allowList: readonly string[]): AllowCheck {
  const program = argv[0] ?? "";
  if (program === "") return { allowed: false, reason: "the command has no argv[0]" };
  if (argv.some((a) => a.includes("\0"))) return { allowed: false, reason: "an argument contains a NUL byte" };
  if (!PROGRAM.test(program) || (isAbsolute(program) && program.split("/").includes(".."))) {
    return { allowed: false, reason: `${JSON.stringify(program)} is not a program name or absolute path` };
  }
  if (!allowList.includes(program)) {
    return {
      allowed: false,
      reason: `${JSON.stringify(program)} is not on this node's allow-list (${allowList.length === 0 ? "empty" : allowList.join(", ")})`,
    };
  }
  return { allowed: true };
}

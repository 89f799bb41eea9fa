// Which RPCs of the contract each command calls, declared where the command is registered
// (`calls(cmd, Service.method.x, ...)`), so one place says what the CLI covers: `--help` shows a
// command's RPCs (its last line, "API: ..."), and test/cli-coverage.test.ts reads them back from the program to check that
// every RPC meant for people has a command or is listed in api-only.ts.
import type { DescMethod } from "@bufbuild/protobuf";
import type { Command } from "commander";

const declared = new WeakMap<Command, DescMethod[]>();

/** An RPC's full name as the audit trail and the README write it: `skipper.v1.DeploymentService/Apply`. */
export function rpcName(m: DescMethod): string {
  return `${m.parent.typeName}/${m.name}`;
}

/** Declares the RPCs `cmd` calls (its help says them: program.ts); returns `cmd`. */
export function calls(cmd: Command, ...methods: DescMethod[]): Command {
  declared.set(cmd, [...(declared.get(cmd) ?? []), ...methods]);
  return cmd;
}

/** The help line naming the RPCs `cmd` calls, or undefined when it declares none. */
export function callsLine(cmd: Command): string | undefined {
  const methods = declared.get(cmd);
  if (!methods?.length) return undefined;
  return `\nAPI: ${[...new Set(methods.map((m) => `${m.parent.name}.${m.name}`))].join(", ")}`;
}

/** Every RPC the program's commands declare, with the commands (`node delete`) that call it. */
export function declaredRpcs(program: Command): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const walk = (c: Command, path: string[]) => {
    for (const m of declared.get(c) ?? []) out.set(rpcName(m), [...(out.get(rpcName(m)) ?? []), path.join(" ")]);
    for (const sub of c.commands) walk(sub, [...path, sub.name()]);
  };
  walk(program, []);
  return out;
}

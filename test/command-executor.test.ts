// The execute_command executor with real processes: only allow-listed programs run, arguments
// stay literal (no shell ever sees them), and timeouts and cancels stop what runs.
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import type { CommandSpecSchema } from "../gen/skipper/v1/safety_pb.js";
import { WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { AgentConfig } from "../agent/config.js";
import { executeCommand } from "../agent/executors/execute-command.js";
import type { ExecContext } from "../agent/executors/executor.js";
import { waitFor } from "./helpers/processes.js";

type Spec = MessageInitShape<typeof CommandSpecSchema>;

/** Resolves once a child process of this one runs `program` (read from /proc). */
function childRunning(program: string): Promise<true> {
  return waitFor(
    `${program} to run`,
    async () => {
      for (const pid of await readdir("/proc")) {
        if (!/^\d+$/.test(pid)) continue;
        // "pid (comm) state ppid …"
        const stat = /^\d+ \((.*)\) \S+ (\d+) /.exec(await readFile(`/proc/${pid}/stat`, "utf8").catch(() => ""));
        if (stat?.[1] === program && Number(stat[2]) === process.pid) return true;
      }
      return undefined;
    },
    30_000,
    10,
  );
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "skippy-cmd-"));
});
afterEach(async () => rm(dir, { recursive: true, force: true }));

const ctx = (allowCommands: string[], signal = new AbortController().signal): ExecContext => ({
  config: { nodeId: "n1", workDir: dir, allowCommands } as AgentConfig,
  host: { capabilities: create(NodeCapabilitiesSchema, {}) },
  log: pino({ level: "silent" }),
  signal,
});
const order = (command: Spec) =>
  create(WorkOrderSchema, {
    id: "o-1",
    type: WorkOrderType.EXECUTE_COMMAND,
    action: { kind: { case: "executeCommand", value: { command } } },
  });
const run = (command: Spec, allow: string[], signal?: AbortSignal) => executeCommand(order(command), ctx(allow, signal));

describe("execute_command: the allow-list", () => {
  it("a program off the allow-list does not run and gives COMMAND_NOT_ALLOWED", async () => {
    const r = (await run({ argv: ["touch", join(dir, "made")] }, ["echo"])).result;
    expect(r).toMatchObject({ success: false, retriable: false, code: "COMMAND_NOT_ALLOWED" });
    expect(r.message).toMatch(/allow-list/);
    expect(r.details?.command).toBeUndefined();
    expect(existsSync(join(dir, "made"))).toBe(false);
  });

  it("sh and bash cannot be used when they are not on the list, by name or by path", async () => {
    for (const argv of [
      ["sh", "-c", `touch ${dir}/sh`],
      ["bash", "-c", `touch ${dir}/bash`],
      ["/bin/sh", "-c", `touch ${dir}/binsh`],
      ["/usr/bin/bash", "-c", `touch ${dir}/usrbash`],
    ]) {
      expect((await run({ argv }, ["echo", "touch", "/bin/echo"])).result.code).toBe("COMMAND_NOT_ALLOWED");
    }
    expect(await readdir(dir)).toEqual([]);
  });

  it("an argv[0] with shell syntax, spaces or a climbing path is refused even when its start is allowed", async () => {
    for (const program of ["echo;id", "echo id", "../bin/sh", "/bin/../bin/sh", "./echo", "$(id)", ""]) {
      const r = (await run({ argv: [program, "x"] }, ["echo", "/bin/echo", "sh"])).result;
      expect([program, r.code]).toEqual([program, "COMMAND_NOT_ALLOWED"]);
    }
    // An allowed bare name does not allow the same program by path, nor the other way round.
    expect((await run({ argv: ["/bin/echo", "x"] }, ["echo"])).result.code).toBe("COMMAND_NOT_ALLOWED");
    expect((await run({ argv: ["echo", "x"] }, ["/bin/echo"])).result.code).toBe("COMMAND_NOT_ALLOWED");
  });
});

describe("execute_command: arguments are literal", () => {
  it("echo prints shell metacharacters as they are and starts nothing", async () => {
    const x = join(dir, "x");
    const args = [
      `a; touch ${x}`,
      `$(touch ${dir}/y)`,
      `\`touch ${dir}/z\``,
      "&& rm -rf /",
      "| tee /tmp/skippy-never",
      "> /tmp/skippy-never2",
    ];
    for (const echo of ["echo", "/bin/echo"]) {
      const r = (await run({ argv: [echo, ...args] }, [echo])).result;
      expect(r).toMatchObject({ success: true, code: "COMMAND_OK" });
      expect(r.details?.command?.stdout).toBe(`${args.join(" ")}\n`);
      expect(r.details?.command).toMatchObject({ program: echo, args, exitCode: 0, timedOut: false });
    }
    expect(await readdir(dir)).toEqual([]);
    expect(existsSync("/tmp/skippy-never") || existsSync("/tmp/skippy-never2")).toBe(false);
  });

  it("touch with `; touch` in its argument makes exactly one file, named with it", async () => {
    const r = (await run({ argv: ["touch", `${dir}/f; touch g`], workingDir: dir }, ["touch"])).result;
    expect(r.code).toBe("COMMAND_OK");
    const names = await readdir(dir);
    expect(names).toEqual(["f; touch g"]);
    expect(existsSync(join(dir, "g"))).toBe(false);
  });
});

describe("execute_command: how runs end", () => {
  it("a non-zero exit is COMMAND_FAILED with the exit code; a missing program is COMMAND_NOT_FOUND", async () => {
    const failed = (await run({ argv: ["ls", join(dir, "nothing-here")] }, ["ls"])).result;
    expect(failed).toMatchObject({ success: false, retriable: false, code: "COMMAND_FAILED" });
    expect(failed.details?.command?.exitCode).toBe(2);
    expect(failed.details?.command?.stderr).toMatch(/nothing-here/);
    // What the command printed stays in details.command, out of the message (events, logs).
    expect(failed.message).toBe("ls exited 2 (output in details.command)");
    for (const p of ["definitely-not-a-program-xyz", "/nonexistent/bin/prog"]) {
      const r = (await run({ argv: [p] }, [p])).result;
      expect(r.code).toBe("COMMAND_NOT_FOUND");
      expect(r.details?.command?.program).toBe(p);
    }
  });

  it("a timeout stops `sleep 30` with TIMEOUT, not retried", async () => {
    const r = (await run({ argv: ["sleep", "30"], timeout: durationFromMs(300) }, ["sleep"])).result;
    expect(r).toMatchObject({ success: false, retriable: false, code: "TIMEOUT" });
    expect(r.details?.command?.timedOut).toBe(true);
    // Stopped, not waited out: killed by a signal (no exit code) rather than exiting 0 after 30 s.
    expect(r.details?.command?.exitCode).toBe(-1);
  });

  it("aborting the order's signal stops `sleep 30` with CANCELLED", async () => {
    const ac = new AbortController();
    // Aborted once `sleep` is seen running (a child of this process).
    void childRunning("sleep").then(
      () => ac.abort("admin said stop"),
      () => ac.abort("admin said stop"),
    );
    const r = (await run({ argv: ["sleep", "30"] }, ["sleep"], ac.signal)).result;
    expect(r).toMatchObject({ success: false, code: "CANCELLED" });
    expect(r.message).toContain("admin said stop");
    expect(r.details?.command?.program).toBe("sleep");
    expect(r.details?.command?.exitCode).toBe(-1);
    // Already cancelled: nothing starts.
    const before = (await run({ argv: ["touch", join(dir, "late")] }, ["touch"], ac.signal)).result;
    expect(before.code).toBe("CANCELLED");
    expect(existsSync(join(dir, "late"))).toBe(false);
  });
});

describe("execute_command: directory, environment and secrets", () => {
  it("runs in the work dir by default, or in an absolute working_dir that exists", async () => {
    expect((await run({ argv: ["pwd"] }, ["pwd"])).result.details?.command?.stdout).toBe(`${dir}\n`);
    expect((await run({ argv: ["pwd"], workingDir: "/" }, ["pwd"])).result.details?.command?.stdout).toBe("/\n");
  });

  it("refuses a bad order with COMMAND_INVALID before running anything", async () => {
    const none = await executeCommand(create(WorkOrderSchema, { id: "o-2", type: WorkOrderType.EXECUTE_COMMAND }), ctx(["touch"]));
    expect(none.result.code).toBe("COMMAND_INVALID");
    const touch = (extra: Spec) => run({ argv: ["touch", join(dir, "bad")], ...extra }, ["touch"]);
    for (const extra of [
      { workingDir: "relative/dir" },
      { workingDir: join(dir, "missing") },
      { env: { "BAD KEY": "x" } },
      { env: { PATH: dir } },
      { env: { LD_PRELOAD: join(dir, "evil.so") } },
      { timeout: durationFromMs(2 * 60 * 60_000) },
    ] as Spec[]) {
      expect((await touch(extra)).result.code).toBe("COMMAND_INVALID");
    }
    expect(await readdir(dir)).toEqual([]);
  });

  it("passes the order's env, blanks secret-shaped values from output, and hides the agent's token", async () => {
    const saved = process.env.SKIPPY_NODE_TOKEN;
    process.env.SKIPPY_NODE_TOKEN = "skn.agent.private-token";
    try {
      const r = (
        await run({ argv: ["printenv", "GREETING", "API_TOKEN"], env: { GREETING: "hello", API_TOKEN: "hunter2-secret" } }, ["printenv"])
      ).result;
      expect(r.details?.command?.stdout).toBe("hello\n[REDACTED]\n");
      const agentToken = (await run({ argv: ["printenv", "SKIPPY_NODE_TOKEN"] }, ["printenv"])).result;
      expect(agentToken.code).toBe("COMMAND_FAILED"); // printenv exits 1 for an unset variable
      expect(agentToken.details?.command?.stdout).toBe("");
    } finally {
      if (saved === undefined) delete process.env.SKIPPY_NODE_TOKEN;
      else process.env.SKIPPY_NODE_TOKEN = saved;
    }
  });
});

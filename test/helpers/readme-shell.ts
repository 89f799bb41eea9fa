// One bash process that runs README blocks one after another, as a reader's shell does: the
// variables, functions and background jobs a block leaves are there for the blocks after it.
//
// The test writes each block to a file and sends bash, on its standard input, one line per
// block: `set -euo pipefail; . <file> < /dev/null; <done marker>`. The block's commands read
// /dev/null, never the command stream. A command that fails ends the shell (errexit), so a failed
// block is the last one; as the shell exits, an EXIT trap runs the cleanup blocks that have not
// run yet (best effort, errexit off), so what the examples started is taken down. stdout and
// stderr are one stream; a marker line (`@@readme-…`) says where each block's output ends.
import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ReadmeBlock } from "./readme-blocks.js";

/** How one block went. */
export interface BlockRun {
  ok: boolean;
  /** The shell's exit status when the block ended it. */
  exitCode?: number;
  /** What the block wrote (stdout and stderr, interleaved as written). */
  output: string;
  /** The output of the cleanup blocks the exiting shell ran after this block failed. */
  cleanupOutput?: string;
}

const DONE = "@@readme-block-done";
const CLEANUP = "@@readme-cleanup";
const EXIT = "@@readme-shell-exit";

const shellQuote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;
const blockFile = (dir: string, b: ReadmeBlock) => join(dir, `block-${b.index}.sh`);
const ranFlag = (b: ReadmeBlock) => `__readme_ran_${b.index}`;

/** The shell's first lines: one output stream, and the EXIT trap that runs pending cleanup blocks. */
function preamble(dir: string, cleanups: ReadmeBlock[]): string {
  const pending = cleanups.map(
    (b) =>
      `  [ -n "\${${ranFlag(b)}:-}" ] || { printf '\\n${CLEANUP} README.md:%s\\n' ${b.line}; . ${shellQuote(blockFile(dir, b))} < /dev/null; }`,
  );
  return [
    "exec 2>&1",
    // An HTTP error answer fails curl, so an example whose call is refused fails its block.
    'curl() { command curl --fail-with-body "$@"; }',
    "__readme_exit() {",
    "  local rc=$?",
    "  set +euo pipefail",
    ...pending,
    `  printf '\\n${EXIT} %s\\n' "$rc"`,
    "}",
    "trap __readme_exit EXIT",
    "trap 'exit 143' TERM",
    "",
  ].join("\n");
}

/** A bash process running README blocks in `cwd`, with the blocks' files in `dir`. */
export class ReadmeShell {
  private output = "";
  /** All the shell will write is in `output`: its EXIT trap's marker came, its streams closed, or it was killed outright. */
  private ended = false;
  private onChange = () => {};

  private constructor(
    private readonly child: ChildProcess,
    private readonly dir: string,
  ) {
    const take = (d: Buffer) => {
      this.output += d.toString("utf8");
      if (this.output.includes(`\n${EXIT} `)) this.end();
      else this.onChange();
    };
    child.stdout!.on("data", take);
    child.stderr!.on("data", take);
    // 'exit' may come before the last output: wait for the marker, unless nothing can write it.
    child.once("exit", (_code, signal) => signal === "SIGKILL" && this.end());
    child.once("close", () => this.end());
    child.stdin!.on("error", () => {}); // EPIPE: the shell has exited, which `ended` reports
  }

  /** Starts bash in its own process group (so its background jobs can be stopped with it). */
  static start(opts: { cwd: string; dir: string; env: NodeJS.ProcessEnv; blocks: ReadmeBlock[] }): ReadmeShell {
    for (const b of opts.blocks) writeFileSync(blockFile(opts.dir, b), b.text);
    const child = spawn("bash", ["--noprofile", "--norc", "-s"], {
      cwd: opts.cwd,
      env: opts.env,
      stdio: ["pipe", "pipe", "pipe"],
      detached: true,
    });
    const shell = new ReadmeShell(child, opts.dir);
    child.stdin!.write(
      preamble(
        opts.dir,
        opts.blocks.filter((b) => b.cleanup),
      ),
    );
    return shell;
  }

  /** Runs one block; resolves when it is done, or when it ended the shell (or `timeoutMs` passed: a hang). */
  async run(block: ReadmeBlock, timeoutMs: number): Promise<BlockRun> {
    if (this.ended) throw new Error("the shell has exited");
    const from = this.output.length;
    const done = `\n${DONE} ${block.index}\n`;
    const ran = block.cleanup ? `${ranFlag(block)}=1; ` : "";
    this.child.stdin!.write(
      `set -euo pipefail; . ${shellQuote(blockFile(this.dir, block))} < /dev/null; ${ran}printf '\\n${DONE} %s\\n' ${block.index}\n`,
    );
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.signal("SIGTERM");
    }, timeoutMs);
    await this.until(() => this.output.indexOf(done, from) >= 0 || this.ended);
    clearTimeout(timer);
    const end = this.output.indexOf(done, from);
    if (end >= 0) return { ok: true, output: this.output.slice(from, end) };
    const text = this.output.slice(from);
    const exit = new RegExp(`\\n${EXIT} (\\d+)\\n`).exec(text);
    const cleanupAt = text.indexOf(`\n${CLEANUP} `);
    const ownEnd = cleanupAt >= 0 ? cleanupAt : (exit?.index ?? text.length);
    return {
      ok: false,
      exitCode: exit ? Number(exit[1]) : (this.child.exitCode ?? undefined),
      output: text.slice(0, ownEnd) + (timedOut ? `\n(no end after ${timeoutMs / 1000} s: the shell was stopped)` : ""),
      cleanupOutput: cleanupAt >= 0 ? text.slice(cleanupAt, exit?.index).replaceAll(`${CLEANUP} `, "the block at ") : undefined,
    };
  }

  /** Ends the shell (its EXIT trap runs the cleanup blocks not yet run), then stops what is left of its process group; returns the trap's output. */
  async close(): Promise<string> {
    const from = this.output.length;
    this.child.stdin!.end();
    const kill = setTimeout(() => this.signal("SIGKILL"), 120_000);
    await this.until(() => this.ended);
    clearTimeout(kill);
    this.signal("SIGTERM"); // background jobs a failed block left, if any
    return this.output
      .slice(from)
      .replace(new RegExp(`\\n${EXIT} \\d+\\n`), "")
      .trim();
  }

  private end(): void {
    this.ended = true;
    this.onChange();
  }

  private until(condition: () => boolean): Promise<void> {
    return new Promise((resolve) => {
      this.onChange = () => condition() && resolve();
      this.onChange();
    });
  }

  private signal(sig: NodeJS.Signals): void {
    try {
      process.kill(-this.child.pid!, sig);
    } catch {
      // the group is gone
    }
  }
}

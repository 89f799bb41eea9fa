// Terminals the controller opens on this agent's session (`skipper exec -it`, relayed by the
// controller's TerminalService): each is an exec in a tenant's service container through the
// Engine API (engine/engine-exec.ts), its output sent back on the session as exec_output
// messages, its input taken from exec_input messages in order. Each ends with one message: the
// exit code (exited), or why it did not open or broke (error). A session that ends closes the
// terminals opened on it (the controller's side is gone with it). Flow control: when the open
// gives an output window, the command's output is not read while more than the window of it is
// sent and not yet acknowledged by the controller (output_acked, sent as its client takes it), so
// a command that floods (`yes`) waits in the container instead of filling this agent's memory and
// its session (whose control messages go first anyway: session-link.ts). Unlike an exec_service
// order, the output is not capped and the project's secret values are not blanked: it is a live
// stream to an operator holding a shell in the container, who may read them there anyway.
import type { Logger } from "pino";
import type { SessionExecInput, SessionExecOpen } from "../../gen/skipper/v1/node_service_pb.js";
import { execActionProblem } from "../../common/action-rules.js";
import { ID_PATTERN } from "../../common/ids.js";
import { EngineExec, engineAddress } from "../engine/engine-exec.js";
import { serviceContainerOf } from "../engine/service-container.js";
import type { SessionLink } from "./session-link.js";

/** Terminals open at once on this agent; one more is refused (TERMINAL_LIMIT). */
export const MAX_TERMINALS = 16;
/** Largest exec_output payload: the engine's reads are split to this. */
export const OUTPUT_FRAME_BYTES = 64 * 1024;
/** Looks for the exit code after the output ended (the engine records it a moment later). */
const EXIT_CODE_LOOKS = 20;

interface Terminal {
  link: SessionLink;
  /** The exec once it started. */
  exec?: EngineExec;
  /** Inputs run one after another, after the open. */
  chain: Promise<void>;
  done: boolean;
  /** Bytes of stdin the exec's connection took (told to the controller: its flow control). */
  taken: bigint;
  /** Output: bytes sent, bytes the controller acknowledged, the window between them (0: none). */
  output: OutputWindow;
}

/** A terminal's output in flight: read from the engine while at most `window` bytes are unacknowledged. */
export class OutputWindow {
  sent = 0;
  acked = 0;
  paused = false;

  constructor(readonly window: number) {}

  /** `n` bytes were sent: true when reading must stop now. */
  onSent(n: number): boolean {
    this.sent += n;
    if (this.paused || this.window === 0 || this.sent - this.acked <= this.window) return false;
    this.paused = true;
    return true;
  }

  /** The controller acknowledged `total` bytes: true when reading may go on now. */
  onAcked(total: number): boolean {
    if (total <= this.acked) return false;
    this.acked = Math.min(total, this.sent);
    if (!this.paused || this.sent - this.acked > this.window) return false;
    this.paused = false;
    return true;
  }
}

export class Terminals {
  private readonly open = new Map<string, Terminal>();

  constructor(
    private readonly workDir: string,
    private readonly log: Logger,
  ) {}

  /** An exec_open from the controller: starts it, answering on `link`. */
  opened(link: SessionLink, o: SessionExecOpen): void {
    if (this.open.has(o.execId)) return;
    if (this.open.size >= MAX_TERMINALS) {
      this.fail(link, o.execId, "TERMINAL_LIMIT", `this node has ${MAX_TERMINALS} terminals open already`);
      return;
    }
    const t: Terminal = { link, chain: Promise.resolve(), done: false, taken: 0n, output: new OutputWindow(o.outputWindow) };
    this.open.set(o.execId, t);
    t.chain = this.start(t, o).catch((e: unknown) => this.end(o.execId, { error: ["EXEC_FAILED", (e as Error).message] }));
  }

  /** An exec_input from the controller: input, a resize, the end of stdin or the end. */
  input(i: SessionExecInput): void {
    const t = this.open.get(i.execId);
    if (!t) return;
    // Not behind the stdin chain: an acknowledgement must get through while a write waits.
    if (t.output.onAcked(Number(i.outputAcked))) t.exec?.resumeOutput();
    if (i.close) {
      this.end(i.execId, undefined);
      void this.stop(t.exec, i.execId, "the terminal's client went");
      return;
    }
    t.chain = t.chain.then(async () => {
      if (!t.exec || t.done) return;
      if (i.data.length > 0) {
        await t.exec.write(i.data);
        t.taken += BigInt(i.data.length);
        if (!t.done) t.link.send({ case: "execOutput", value: { execId: i.execId, stdinTaken: t.taken } });
      }
      if (i.resize) await t.exec.resize(i.resize.rows, i.resize.cols).catch(() => undefined);
      if (i.closeStdin) t.exec.closeStdin();
    });
  }

  /** The session they were opened on ended: every terminal of `link` closes. */
  closeAll(link: SessionLink): void {
    for (const [id, t] of this.open) {
      if (t.link !== link) continue;
      this.end(id, undefined);
      void this.stop(t.exec, id, "the session the terminal rode ended");
    }
  }

  // Ends a terminal's command (its client or session went), saying how.
  private async stop(exec: EngineExec | undefined, execId: string, why: string): Promise<void> {
    const how = exec ? await exec.stop().catch(() => "unreachable" as const) : "ended";
    const message = how === "unreachable" ? `${why}; the command could not be signalled and may go on in the container` : why;
    this.log.info({ action: "terminal_closed", result: how, metadata: { exec_id: execId } }, message);
  }

  private async start(t: Terminal, o: SessionExecOpen): Promise<void> {
    if (!ID_PATTERN.test(o.tenantId)) return this.end(o.execId, { error: ["EXEC_INVALID", `tenant id ${o.tenantId} names no project`] });
    const problem = execActionProblem({ ...o, stdin: new Uint8Array() });
    if (problem)
      return this.end(o.execId, { error: ["EXEC_INVALID", `${problem.field.replace("action.exec_service.", "")} ${problem.problem}`] });
    const found = await serviceContainerOf(this.workDir, o.tenantId, o.service, o.replica);
    if (!("container" in found)) return this.end(o.execId, { error: [found.code, found.message] });
    if (t.done) return;
    const sink = {
      output: (data: Buffer, stderr: boolean) => this.output(t, o.execId, data, stderr),
      ended: () => void this.exited(t, o.execId),
    };
    const spec = {
      containerId: found.container.id,
      argv: o.argv,
      user: o.user,
      workdir: o.workdir,
      env: o.env,
      tty: o.tty,
      rows: o.rows,
      cols: o.cols,
    };
    t.exec = await EngineExec.start(engineAddress(), spec, sink);
    if (t.done) return void this.stop(t.exec, o.execId, "the terminal was closed while it opened");
    if (t.output.paused) t.exec.pauseOutput();
    if (o.tty) await t.exec.resize(o.rows, o.cols).catch(() => undefined);
    this.log.info(
      {
        action: "terminal_opened",
        result: "ok",
        tenant_id: o.tenantId,
        metadata: { exec_id: o.execId, service: o.service, container: found.container.name, tty: o.tty, program: o.argv[0] },
      },
      `terminal opened in ${found.container.name}`,
    );
  }

  private output(t: Terminal, execId: string, data: Buffer, isStderr: boolean): void {
    if (t.done) return;
    for (let at = 0; at < data.length; at += OUTPUT_FRAME_BYTES) {
      t.link.send({ case: "execOutput", value: { execId, data: data.subarray(at, at + OUTPUT_FRAME_BYTES), isStderr } });
    }
    if (t.output.onSent(data.length)) t.exec?.pauseOutput();
  }

  // The output ended: the command's exit code, once the engine has it.
  private async exited(t: Terminal, execId: string): Promise<void> {
    if (t.done || !t.exec) return;
    for (let look = 0; look < EXIT_CODE_LOOKS; look++) {
      const code = await t.exec.exitCode().catch(() => undefined);
      if (code !== undefined) return this.end(execId, { exited: code });
      await new Promise((r) => setTimeout(r, 50 * (look + 1)));
    }
    this.end(execId, { error: ["TERMINAL_CLOSED", "the command's output ended and the engine reported no exit code"] });
  }

  // The terminal's last message (none when the controller closed it).
  private end(execId: string, last: { exited: number } | { error: [string, string] } | undefined): void {
    const t = this.open.get(execId);
    if (!t || t.done) return;
    t.done = true;
    this.open.delete(execId);
    if (!last) return;
    if ("exited" in last) t.link.send({ case: "execOutput", value: { execId, exited: { code: last.exited } } });
    else this.fail(t.link, execId, ...last.error);
  }

  private fail(link: SessionLink, execId: string, code: string, message: string): void {
    link.send({ case: "execOutput", value: { execId, error: { code, message } } });
  }
}

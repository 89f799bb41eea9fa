// A terminal in a service's container, through the controller (TerminalService.Attach, which
// relays it over the node's session): this process's stdin goes to the command as it is read,
// the command's output to stdout and stderr as it comes, and the exit code is the command's.
// With a tty and a terminal on stdin, the terminal is put in raw mode (keys go as typed, Ctrl-C
// included) and restored on every way out, signals too; its size goes with the open and with
// every SIGWINCH. Without a terminal on stdout the size is LINES x COLUMNS when both are set.
// Stdin is read only while less than QUEUED_STDIN_BYTES of it waits to be sent: the controller
// takes more only as the command takes it (a window in flight), so piping a large file in never
// holds more than that here.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { AttachRequestSchema, TerminalService } from "../gen/skipper/v1/terminal_service_pb.js";

/** Largest stdin message (the controller's cap). */
export const STDIN_FRAME_BYTES = 64 * 1024;
/** Stdin read and not yet sent at most (reading pauses above it, goes on below half of it). */
export const QUEUED_STDIN_BYTES = 1024 * 1024;

type Request = MessageInitShape<typeof AttachRequestSchema>;
type Size = { rows: number; cols: number };

/** The process streams a terminal uses (tests may give their own). */
export interface TerminalStreams {
  stdin: NodeJS.ReadableStream & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown };
  stdout: NodeJS.WritableStream & { isTTY?: boolean; rows?: number; columns?: number };
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

/** What to run where (TerminalService's AttachOpen without the size, which is read here). */
export interface TerminalOpen {
  tenantId: string;
  service: string;
  nodeId: string;
  replica: number;
  argv: string[];
  user: string;
  workdir: string;
  env: Record<string, string>;
  tty: boolean;
}

/** The opened terminal's node, for the caller to mention. */
export interface TerminalEnd {
  exitCode: number;
  nodeId: string;
}

/** Runs the terminal `open` describes until its command exits; resolves with its exit code. */
export async function runTerminal(client: Client<typeof TerminalService>, open: TerminalOpen, io: TerminalStreams): Promise<TerminalEnd> {
  const requests = new RequestQueue(() => io.stdin.resume());
  const size = sizeOf(io);
  requests.push({ kind: { case: "open", value: { ...open, ...(size ? { size } : {}) } } });
  const raw = Boolean(open.tty && io.stdin.isTTY && io.stdin.setRawMode);
  const restore = () => {
    if (raw) io.stdin.setRawMode?.(false);
  };
  const onSignal = (signal: NodeJS.Signals) => {
    restore();
    process.kill(process.pid, signal);
  };
  const onResize = () => {
    const s = sizeOf(io);
    if (s) requests.push({ kind: { case: "resize", value: s } });
  };
  const signals: NodeJS.Signals[] = ["SIGTERM", "SIGHUP"];
  for (const s of signals) process.once(s, onSignal);
  process.on("SIGWINCH", onResize);
  if (raw) io.stdin.setRawMode?.(true);
  const onData = (chunk: Buffer) => {
    for (let at = 0; at < chunk.length; at += STDIN_FRAME_BYTES)
      requests.push({ kind: { case: "stdin", value: chunk.subarray(at, at + STDIN_FRAME_BYTES) } });
    if (requests.stdinBytes > QUEUED_STDIN_BYTES) io.stdin.pause();
  };
  const onEnd = () => requests.push({ kind: { case: "closeStdin", value: true } });
  io.stdin.on("data", onData);
  io.stdin.once("end", onEnd);
  let nodeId = open.nodeId;
  let exitCode = 1;
  try {
    for await (const m of client.attach(requests.iterate(), { timeoutMs: 0 })) {
      const { kind } = m;
      if (kind.case === "opened") nodeId = kind.value.nodeId;
      else if (kind.case === "stdout") await written(io.stdout, kind.value);
      else if (kind.case === "stderr") await written(io.stderr, kind.value);
      else if (kind.case === "exitCode") exitCode = kind.value;
    }
  } finally {
    requests.end();
    restore();
    for (const s of signals) process.off(s, onSignal);
    process.off("SIGWINCH", onResize);
    io.stdin.off("data", onData);
    io.stdin.off("end", onEnd);
    io.stdin.pause();
    (io.stdin as { unref?: () => void }).unref?.();
  }
  return { exitCode, nodeId };
}

function sizeOf(io: TerminalStreams): Size | undefined {
  if (io.stdout.isTTY && io.stdout.rows && io.stdout.columns) return { rows: io.stdout.rows, cols: io.stdout.columns };
  const rows = Number(io.env.LINES);
  const cols = Number(io.env.COLUMNS);
  return rows > 0 && cols > 0 ? { rows, cols } : undefined;
}

// Resolves once `stream` took `data` (so a large output is not all held here).
function written(stream: NodeJS.WritableStream, data: Uint8Array): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.write(data, (e) => (e ? reject(e) : resolve()));
  });
}

/** The request stream: messages as they are pushed, until end(). */
class RequestQueue {
  private readonly queue: Request[] = [];
  private wake: (() => void) | undefined;
  private ended = false;
  /** Stdin bytes queued and not yet taken by the stream. */
  stdinBytes = 0;

  /** `drained` is called when the queued stdin falls under half of QUEUED_STDIN_BYTES. */
  constructor(private readonly drained: () => void) {}

  push(r: Request): void {
    if (this.ended) return;
    this.queue.push(r);
    if (r.kind?.case === "stdin") this.stdinBytes += r.kind.value.length;
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  async *iterate(): AsyncGenerator<Request> {
    for (;;) {
      const next = this.queue.shift();
      if (next) {
        if (next.kind?.case === "stdin") {
          const before = this.stdinBytes;
          this.stdinBytes -= next.kind.value.length;
          if (before > QUEUED_STDIN_BYTES / 2 && this.stdinBytes <= QUEUED_STDIN_BYTES / 2) this.drained();
        }
        yield next;
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      this.wake = undefined;
    }
  }
}

// An exec in a container through the Docker Engine API itself, for a terminal whose input comes
// as it is typed (agent/session/terminals.ts). The `docker` CLI wants a tty on its own stdin for
// `exec -t`, which the agent does not have; the API takes the tty request as a field:
//   POST /containers/{id}/exec   {Cmd, AttachStdin/Stdout/Stderr, Tty, User, WorkingDir, Env}
//   POST /exec/{id}/start        with `Connection: Upgrade`, `Upgrade: tcp`: the engine answers
//                                101 and the connection becomes the exec's stdin and output
//   POST /exec/{id}/resize?h=&w= the tty's size
//   GET  /exec/{id}/json         ExitCode, once the output has ended
// Without a tty the output is multiplexed: frames of an 8-byte header (stream 1 stdout, 2 stderr;
// 3 bytes of padding; a 4-byte big-endian length) and the payload. Ending stdin half-closes the
// connection (the engine closes the command's stdin). The engine is reached as DOCKER_HOST says:
// unix:// (the default socket when unset) or tcp:// without TLS; anything else is refused.
// Every call, and the start until the engine upgrades the connection, has a deadline
// (ENGINE_CALL_TIMEOUT_MS): an engine that hangs fails the terminal saying which call it did not
// answer, instead of holding it (and its slot) open with nothing said.
import { readFile } from "node:fs/promises";
import { request, type ClientRequest, type IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import { engineEnv } from "./engine-env.js";

/** How long one call to the engine (create, start until upgraded, resize, inspect) may take. */
export const ENGINE_CALL_TIMEOUT_MS = 15_000;

/** Where the engine listens: a unix socket, or a plain TCP host and port. */
export type EngineAddress = { socketPath: string } | { host: string; port: number };

/** The engine's address from DOCKER_HOST; throws when it is one this module cannot reach. */
export function engineAddress(dockerHost = engineEnv()?.DOCKER_HOST ?? process.env.DOCKER_HOST ?? ""): EngineAddress {
  if (dockerHost === "") return { socketPath: "/var/run/docker.sock" };
  if (dockerHost.startsWith("unix://")) return { socketPath: dockerHost.slice("unix://".length) };
  const tcp = /^tcp:\/\/([^:/]+):(\d+)\/?$/.exec(dockerHost);
  if (tcp && process.env.DOCKER_TLS_VERIFY === undefined) return { host: tcp[1]!, port: Number(tcp[2]) };
  throw new Error(`DOCKER_HOST ${dockerHost}: a terminal reaches the engine over unix:// or tcp:// without TLS only`);
}

/** What to run. */
export interface ExecSpec {
  containerId: string;
  argv: string[];
  user: string;
  workdir: string;
  env: Record<string, string>;
  tty: boolean;
  rows: number;
  cols: number;
}

/** The output side of a running exec. */
export interface ExecSink {
  output(data: Buffer, stderr: boolean): void;
  /** The output ended (the command exited, or the connection broke). */
  ended(): void;
}

/** One exec started in a container: its input, size, exit code and end. */
export class EngineExec {
  private closed = false;

  private constructor(
    private readonly address: EngineAddress,
    readonly execId: string,
    private readonly containerId: string,
    private readonly socket: Socket,
    private readonly timeoutMs: number,
  ) {}

  /**
   * Creates and starts the exec; its output goes to `sink`. Rejects when the engine refuses, or
   * does not answer a call within `timeoutMs`.
   */
  static async start(address: EngineAddress, spec: ExecSpec, sink: ExecSink, timeoutMs = ENGINE_CALL_TIMEOUT_MS): Promise<EngineExec> {
    const env = Object.entries(spec.env).map(([k, v]) => `${k}=${v}`);
    const created = await call(address, timeoutMs, "POST", `/containers/${encodeURIComponent(spec.containerId)}/exec`, {
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: spec.tty,
      Cmd: spec.argv,
      ...(spec.user ? { User: spec.user } : {}),
      ...(spec.workdir ? { WorkingDir: spec.workdir } : {}),
      Env: env,
    });
    const execId = (JSON.parse(created) as { Id: string }).Id;
    const size = spec.tty && spec.rows > 0 && spec.cols > 0 ? { ConsoleSize: [spec.rows, spec.cols] } : {};
    // The size goes with the start too (API 1.42+): the tty has it before the command runs.
    const socket = await hijack(address, timeoutMs, `/exec/${execId}/start`, { Detach: false, Tty: spec.tty, ...size });
    const exec = new EngineExec(address, execId, spec.containerId, socket, timeoutMs);
    const demux = spec.tty ? undefined : new Demultiplexer(sink);
    socket.on("data", (chunk: Buffer) => (demux ? demux.push(chunk) : sink.output(chunk, false)));
    socket.once("close", () => sink.ended());
    socket.on("error", () => socket.destroy());
    return exec;
  }

  /** Writes to the command's stdin; resolves when the socket took it (backpressure). */
  write(data: Uint8Array): Promise<void> {
    if (this.closed || this.socket.writableEnded) return Promise.resolve();
    return new Promise((resolve) => {
      if (this.socket.write(data)) resolve();
      else this.socket.once("drain", () => resolve());
    });
  }

  /** Stops reading the command's output (the engine, then the command, is held back). */
  pauseOutput(): void {
    this.socket.pause();
  }

  /** Reads the command's output again. */
  resumeOutput(): void {
    this.socket.resume();
  }

  /** The command's stdin ends (EOF). */
  closeStdin(): void {
    if (!this.socket.writableEnded) this.socket.end();
  }

  /** Sets the tty's size. */
  async resize(rows: number, cols: number): Promise<void> {
    if (rows <= 0 || cols <= 0) return;
    await call(this.address, this.timeoutMs, "POST", `/exec/${this.execId}/resize?h=${rows}&w=${cols}`);
  }

  /** The command's exit code once it ended; undefined while the engine says it runs. */
  async exitCode(): Promise<number | undefined> {
    const doc = JSON.parse(await call(this.address, this.timeoutMs, "GET", `/exec/${this.execId}/json`)) as {
      Running?: boolean;
      ExitCode?: number | null;
    };
    return doc.Running || typeof doc.ExitCode !== "number" ? undefined : doc.ExitCode;
  }

  /** Drops the connection (the command's stdin ends; the engine leaves the command running). */
  close(): void {
    this.closed = true;
    this.socket.destroy();
  }

  /**
   * Ends the command: the engine has no call for it and keeps an exec running when its client
   * goes, so its process (the engine's Pid, seen in this host's /proc) gets SIGHUP, as a closed
   * terminal would send, then SIGKILL when it is still there after `graceMs`. Only a process
   * whose cgroup names the container is signalled (an agent in another pid namespace sees other
   * processes under those numbers): "unreachable" then, and the command may go on.
   */
  async stop(graceMs = 5000): Promise<"ended" | "stopped" | "unreachable"> {
    this.close();
    const pid = await this.runningPid();
    if (pid === undefined) return "ended";
    const cgroup = await readFile(`/proc/${pid}/cgroup`, "utf8").catch(() => "");
    if (!cgroup.includes(this.containerId)) return "unreachable";
    if (!signal(pid, "SIGHUP")) return "unreachable";
    const until = performance.now() + graceMs;
    while (performance.now() < until) {
      if ((await this.runningPid()) === undefined) return "stopped";
      await new Promise((r) => setTimeout(r, 100));
    }
    signal(pid, "SIGKILL");
    return "stopped";
  }

  private async runningPid(): Promise<number | undefined> {
    const doc = JSON.parse(await call(this.address, this.timeoutMs, "GET", `/exec/${this.execId}/json`).catch(() => "{}")) as {
      Running?: boolean;
      Pid?: number;
    };
    return doc.Running && doc.Pid ? doc.Pid : undefined;
  }
}

// Signals the process group `pid` leads (a tty's session), else the process alone; false when not allowed.
function signal(pid: number, sig: NodeJS.Signals): boolean {
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, sig);
      return true;
    } catch {
      // not a group leader, gone, or not ours to signal
    }
  }
  return false;
}

// One request to the engine; resolves with the body of a 2xx answer, rejects with the engine's
// words, or when it has not answered in full within `timeoutMs`.
function call(address: EngineAddress, timeoutMs: number, method: string, path: string, body?: unknown): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = open(address, method, path, body);
    deadline(req, timeoutMs, `${method} ${path.split("?")[0]}`, reject);
    req.once("response", (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.once("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        if ((res.statusCode ?? 500) < 300) resolve(text);
        else reject(new Error(`engine: ${method} ${path.split("?")[0]}: ${res.statusCode} ${engineMessage(text)}`));
      });
      res.once("error", reject);
    });
    req.once("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

// Starts the exec with the connection upgraded: resolves with the raw socket (the deadline runs
// until the upgrade; the exec's connection itself lasts as long as its command).
function hijack(address: EngineAddress, timeoutMs: number, path: string, body: unknown): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const req = open(address, "POST", path, body, { Connection: "Upgrade", Upgrade: "tcp" });
    const stop = deadline(req, timeoutMs, "start exec", reject);
    req.once("upgrade", (_res: IncomingMessage, socket: Socket, head: Buffer) => {
      stop();
      if (head.length > 0) socket.unshift(head);
      resolve(socket);
    });
    req.once("response", (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.once("end", () =>
        reject(new Error(`engine: start exec: ${res.statusCode} ${engineMessage(Buffer.concat(chunks).toString("utf8"))}`)),
      );
    });
    req.once("error", reject);
    req.end(JSON.stringify(body));
  });
}

// Fails `req` when it has not settled within `ms`, naming the call; returns what cancels the deadline.
function deadline(req: ClientRequest, ms: number, what: string, reject: (e: Error) => void): () => void {
  const timer = setTimeout(() => {
    reject(new Error(`engine: ${what}: no answer within ${ms / 1000} s (the Docker engine may be hung)`));
    req.destroy();
  }, ms);
  timer.unref();
  const stop = () => clearTimeout(timer);
  req.once("close", stop);
  return stop;
}

function open(address: EngineAddress, method: string, path: string, body: unknown, extra: Record<string, string> = {}): ClientRequest {
  const headers: Record<string, string> = { ...extra };
  if (body !== undefined) headers["content-type"] = "application/json";
  return request({ ...address, method, path, headers, agent: false });
}

function engineMessage(text: string): string {
  try {
    return (JSON.parse(text) as { message?: string }).message ?? text.trim();
  } catch {
    return text.trim();
  }
}

/** Splits the engine's multiplexed output (no tty) into stdout and stderr. */
export class Demultiplexer {
  // Bytes not yet part of a whole frame, kept as they came (joined once a frame is whole).
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly sink: Pick<ExecSink, "output">) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size >= 8) {
      const head = this.first(8);
      const length = head.readUInt32BE(4);
      if (this.size < 8 + length) return;
      const whole = this.first(8 + length);
      this.drop(8 + length);
      if (length > 0) this.sink.output(Buffer.from(whole.subarray(8)), head[0] === 2);
    }
  }

  // The first `n` buffered bytes (joined into the first chunk when they span several).
  private first(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!.subarray(0, n);
  }

  private drop(n: number): void {
    this.chunks[0] = this.chunks[0]!.subarray(n);
    this.size -= n;
    if (this.chunks[0].length === 0) this.chunks.shift();
  }
}

// One terminal relayed between a client's Attach stream and a node's session (session-terminals.ts):
// the client's stdin, resizes and end of stdin go to the agent as they come; the agent's output
// comes back as answers, the exit code last. Caps: bytes per input message, output held for a
// client that does not read, an idle timeout (no byte either way), and at most a window of stdin
// in flight to the agent (which says what the command's connection took). Output has a window too:
// the agent reads the command's output while at most outputWindowBytes of it are unacknowledged,
// and the relay acknowledges what the client's stream has taken (a quarter window at a time), so
// a client that does not read holds a flooding command back instead of filling memory here, on
// the agent, or the session it shares with lease renewals. The client going (its stream reset,
// cancelled), its request stream failing, or its credential ending closes the terminal on the agent.
import { create } from "@bufbuild/protobuf";
import type { SessionExecOutput } from "../../gen/skipper/v1/node_service_pb.js";
import { AttachResponseSchema, type AttachRequest, type AttachResponse } from "../../gen/skipper/v1/terminal_service_pb.js";
import { SkipperError, invalid } from "../base/errors.js";
import type { SessionTerminals, TerminalEnd } from "./session-terminals.js";

export interface RelayLimits {
  /** Largest stdin message. */
  frameBytes: number;
  /** Output held for a client that does not read before the terminal is closed. */
  heldBytes: number;
  /** Closed after this long without a byte either way. */
  idleMs: number;
  /** Stdin bytes sent to the agent and not yet taken by the command's connection. */
  stdinWindowBytes: number;
  /** Output bytes the agent may send before the relay acknowledges them (exec_open's output_window). */
  outputWindowBytes: number;
}

// Idle: under the listener's own limits for a stream with nothing moving (server/listener.ts:
// streamIdleMs 10 min, and 5 min for a connection without stream activity), so that the
// terminal is closed here, with a reason, before the listener cuts the stream without one.
export const DEFAULT_RELAY_LIMITS: RelayLimits = {
  frameBytes: 64 * 1024,
  heldBytes: 8 * 1024 * 1024,
  idleMs: 4 * 60_000,
  stdinWindowBytes: 1024 * 1024,
  outputWindowBytes: 256 * 1024,
};

// What the agent's error codes mean to the client.
const AGENT_CODES: Record<string, SkipperError["code"]> = {
  PROJECT_NOT_FOUND: "RESOURCE_NOT_FOUND",
  SERVICE_NOT_RUNNING: "RESOURCE_NOT_FOUND",
  EXEC_INVALID: "INVALID_REQUEST",
  EXEC_FAILED: "INVALID_REQUEST",
  TERMINAL_LIMIT: "RESOURCE_EXHAUSTED",
};

/** The end of a relay: the exit code, or why it stopped. */
export interface RelayEnd {
  exitCode?: number;
  failure?: SkipperError;
  /** Bytes relayed each way (for the log; never their content). */
  bytesIn: number;
  bytesOut: number;
}

export class TerminalRelay implements TerminalEnd {
  private readonly queue: AttachResponse[] = [];
  private held = 0;
  private wake: (() => void) | undefined;
  private finished: RelayEnd | undefined;
  private idle: NodeJS.Timeout | undefined;
  bytesIn = 0;
  bytesOut = 0;
  /** Stdin bytes the agent says the command's connection took. */
  private taken = 0n;
  private wakeInput: (() => void) | undefined;
  /** Output bytes the client's stream has taken, and how many of them the agent was told of. */
  private forwarded = 0;
  private acked = 0;

  constructor(
    private readonly terminals: SessionTerminals,
    private readonly execId: string,
    private readonly limits: RelayLimits,
  ) {}

  deliver(o: SessionExecOutput): void {
    this.touch();
    if (o.stdinTaken > this.taken) {
      this.taken = o.stdinTaken;
      this.wakeInput?.();
    }
    if (o.data.length > 0) {
      this.bytesOut += o.data.length;
      this.held += o.data.length;
      this.push({ case: o.isStderr ? "stderr" : "stdout", value: o.data });
      if (this.held > this.limits.heldBytes) {
        this.terminals.close(this.execId);
        this.stop(new SkipperError("RESOURCE_EXHAUSTED", `the client read no output while ${this.held} bytes waited: terminal closed`));
      }
    }
    if (o.exited) this.stop(undefined, o.exited.code);
    else if (o.error) this.stop(new SkipperError(AGENT_CODES[o.error.code] ?? "UNAVAILABLE", `${o.error.code}: ${o.error.message}`));
  }

  sessionEnded(): void {
    this.stop(new SkipperError("UNAVAILABLE", "the node's session ended: the terminal is gone with it"));
  }

  /** The answers for the client until the terminal ends; reads `requests` (after the open) meanwhile. */
  async *answers(requests: AsyncIterator<AttachRequest>): AsyncGenerator<AttachResponse> {
    this.touch();
    void this.forward(requests);
    try {
      for (;;) {
        const next = this.queue.shift();
        if (next) {
          const output = next.kind.case === "stdout" || next.kind.case === "stderr" ? next.kind.value.length : 0;
          this.held -= output;
          yield next;
          // Resumed: the client's stream took it (Connect writes the next answer only then).
          if (output > 0) this.acknowledge(output);
          continue;
        }
        if (this.finished) break;
        await new Promise<void>((resolve) => {
          this.wake = resolve;
        });
        this.wake = undefined;
      }
      if (this.finished.failure) throw this.finished.failure;
      yield create(AttachResponseSchema, { kind: { case: "exitCode", value: this.finished.exitCode ?? 0 } });
    } finally {
      // The client went (the generator returned early) or the terminal ended: the agent is told
      // to close it (nothing is sent for one that ended already).
      this.terminals.close(this.execId);
      this.stop(new SkipperError("UNAVAILABLE", "the client went"));
    }
  }

  /**
   * Ends the terminal from this side with `failure` (the client left before its answers were
   * read, its credential ended): its slot is freed and the agent told to stop it. Idempotent.
   */
  abandon(failure: SkipperError): void {
    this.terminals.close(this.execId);
    this.stop(failure);
  }

  /** How it ended (once it has). */
  get end(): RelayEnd | undefined {
    return this.finished;
  }

  // The client's messages after the open, to the agent; its stream ending is the end of stdin.
  private async forward(requests: AsyncIterator<AttachRequest>): Promise<void> {
    try {
      for (;;) {
        // Flow control: the client's stream is not read while a window of stdin is in flight
        // (HTTP/2 then holds the client back), so neither side queues a fast writer's input.
        while (!this.finished && BigInt(this.bytesIn) - this.taken > BigInt(this.limits.stdinWindowBytes)) {
          await new Promise<void>((resolve) => {
            this.wakeInput = resolve;
          });
          this.wakeInput = undefined;
        }
        if (this.finished) return;
        const next = await requests.next();
        if (this.finished) return;
        if (next.done) {
          this.terminals.input(this.execId, { closeStdin: true });
          return;
        }
        this.touch();
        const { kind } = next.value;
        if (kind.case === "stdin") {
          if (kind.value.length > this.limits.frameBytes)
            throw invalid(`a stdin message is over ${this.limits.frameBytes} bytes`, { field: "stdin" });
          this.bytesIn += kind.value.length;
          this.terminals.input(this.execId, { data: kind.value });
        } else if (kind.case === "resize") this.terminals.input(this.execId, { resize: kind.value });
        else if (kind.case === "closeStdin") this.terminals.input(this.execId, { closeStdin: true });
        else if (kind.case === "open") throw invalid("a terminal is opened once, by the first message", { field: "open" });
      }
    } catch (e) {
      this.terminals.close(this.execId);
      this.stop(e instanceof SkipperError ? e : new SkipperError("UNAVAILABLE", "the client's stream broke: terminal closed"));
    }
  }

  // `n` more output bytes reached the client: the agent is told once a quarter window piled up.
  private acknowledge(n: number): void {
    this.forwarded += n;
    if (this.forwarded - this.acked < Math.max(1, this.limits.outputWindowBytes / 4)) return;
    this.acked = this.forwarded;
    this.terminals.input(this.execId, { outputAcked: BigInt(this.forwarded) });
  }

  private push(kind: AttachResponse["kind"]): void {
    this.queue.push(create(AttachResponseSchema, { kind }));
    this.wake?.();
  }

  private touch(): void {
    if (this.finished) return;
    clearTimeout(this.idle);
    this.idle = setTimeout(() => {
      this.terminals.close(this.execId);
      this.stop(new SkipperError("UNAVAILABLE", `no byte either way for ${Math.round(this.limits.idleMs / 1000)} s: terminal closed`));
    }, this.limits.idleMs);
    this.idle.unref();
  }

  private stop(failure: SkipperError | undefined, exitCode?: number): void {
    if (this.finished) return;
    clearTimeout(this.idle);
    this.finished = { failure, exitCode, bytesIn: this.bytesIn, bytesOut: this.bytesOut };
    this.wake?.();
    this.wakeInput?.();
  }
}

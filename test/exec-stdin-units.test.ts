// How `skipper exec` reads its stdin, both ways bounded: -i without -t (a work order, its stdin
// capped) reads no further than the cap and refuses larger input before anything is queued; -it
// (a terminal, cli/terminal.ts) stops reading while a window of stdin waits to be sent, and goes
// on as the stream takes it. No server: the refusal comes before any call, and the terminal's
// client is a stand-in that takes requests only when the test lets it.
import { Readable } from "node:stream";
import { PassThrough } from "node:stream";
import type { Client } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { EXEC_LIMITS } from "../common/action-rules.js";
import { AttachResponseSchema, type AttachRequest, type TerminalService } from "../gen/skipper/v1/terminal_service_pb.js";
import { readBounded } from "../cli/io.js";
import { run } from "../cli/program.js";
import { QUEUED_STDIN_BYTES, runTerminal } from "../cli/terminal.js";

const CHUNK = 64 * 1024;

/** A stdin of `chunks` 64 KiB chunks, counting how many were read from it. */
function counted(chunks: number): { stream: Readable; read: () => number } {
  let read = 0;
  const stream = Readable.from(
    (function* () {
      for (let i = 0; i < chunks; i++) {
        read++;
        yield Buffer.alloc(CHUNK, i % 251);
      }
    })(),
    { objectMode: false, highWaterMark: CHUNK },
  );
  return { stream, read: () => read };
}

describe("skipper exec -i (a work order)", () => {
  it("stdin over the order's cap is refused, read no further than the cap, and nothing is queued", async () => {
    const input = counted(160); // 10 MiB
    const err: string[] = [];
    const io = {
      out: () => undefined,
      err: (t: string) => err.push(t),
      color: false,
      // No server: a call would fail differently (and no call is made before the refusal).
      env: { SKIPPER_SERVER: "https://127.0.0.1:1", SKIPPER_TOKEN: "t" },
      readStdin: async () => {
        throw new Error("the whole of stdin was asked for");
      },
      readStdinBytes: (max: number) => readBounded(input.stream, max),
    };
    const code = await run(["exec", "shop", "web", "--node", "host-1", "-i", "--", "cat"], io);
    expect(code).toBe(1);
    expect(err.join("\n")).toContain(`stdin is over ${EXEC_LIMITS.stdinBytes / 1024} KiB`);
    expect(err.join("\n")).toContain("-it");
    // The cap and one chunk past it (and what the stream had buffered), not 10 MiB.
    expect(input.read() * CHUNK).toBeLessThanOrEqual(EXEC_LIMITS.stdinBytes + 3 * CHUNK);
  });

  it("readBounded returns all of a small input, and at most the cap and one byte of a large one", async () => {
    expect((await readBounded(Readable.from([Buffer.from("ab"), Buffer.from("c")]), 10)).toString()).toBe("abc");
    expect((await readBounded(counted(4).stream, 100)).length).toBe(101);
  });
});

describe("skipper exec -it (a terminal)", () => {
  it("stdin is read only while less than a window of it waits to be sent; it all arrives once the stream takes it", async () => {
    const total = 64; // 4 MiB, four times the window
    const input = counted(total);
    let paused!: () => void;
    const pausedOnce = new Promise<void>((r) => (paused = r));
    const stdin = Object.assign(input.stream, {
      pause(this: Readable) {
        paused();
        return Readable.prototype.pause.call(this);
      },
    });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let received = 0;
    const client = {
      attach: (requests: AsyncIterable<AttachRequest>) =>
        (async function* () {
          yield create(AttachResponseSchema, { kind: { case: "opened", value: { execId: "x", nodeId: "host-1" } } });
          await released;
          for await (const r of requests) {
            if (r.kind.case === "stdin") received += r.kind.value.length;
            if (r.kind.case === "closeStdin") break;
          }
          yield create(AttachResponseSchema, { kind: { case: "exitCode", value: 0 } });
        })(),
    } as unknown as Client<typeof TerminalService>;
    const io = { stdin, stdout: new PassThrough(), stderr: new PassThrough(), env: {} };
    const ended = runTerminal(
      client,
      { tenantId: "shop", service: "web", nodeId: "host-1", replica: 0, argv: ["cat"], user: "", workdir: "", env: {}, tty: false },
      io,
    );
    await pausedOnce;
    // Nothing taken yet: what was read is the window and the chunk that crossed it (plus the stream's own buffer).
    expect(input.read() * CHUNK).toBeLessThanOrEqual(QUEUED_STDIN_BYTES + 3 * CHUNK);
    release();
    expect((await ended).exitCode).toBe(0);
    expect(received).toBe(total * CHUNK);
  });
});

// Units of the terminal path: the engine's multiplexed output split back into stdout and stderr
// (agent/engine/engine-exec.ts), and one relay between a client's Attach stream and a session's
// terminals (controller/dispatch/terminal-relay.ts, session-terminals.ts) with its caps.
import { describe, expect, it } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { SessionExecOutputSchema } from "../gen/skipper/v1/node_service_pb.js";
import { AttachRequestSchema, type AttachRequest, type AttachResponse } from "../gen/skipper/v1/terminal_service_pb.js";
import { Demultiplexer } from "../agent/engine/engine-exec.js";
import { MAX_TERMINALS_PER_NODE, SessionTerminals } from "../controller/dispatch/session-terminals.js";
import { TerminalRelay } from "../controller/dispatch/terminal-relay.js";

function frame(stream: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head[0] = stream;
  head.writeUInt32BE(payload.length, 4);
  return Buffer.concat([head, payload]);
}

describe("the engine's multiplexed output", () => {
  it("frames split anywhere, even inside a header, come back as their streams' bytes in order", () => {
    const all = Buffer.concat([frame(1, Buffer.from("out-1 ")), frame(2, Buffer.from("err-1")), frame(1, Buffer.alloc(70_000, 7))]);
    for (const cut of [1, 3, 8, 9, 13, 17, 1000]) {
      const got: [string, number][] = [];
      const d = new Demultiplexer({ output: (data, stderr) => got.push([stderr ? "err" : "out", data.length]) });
      for (let at = 0; at < all.length; at += cut) d.push(all.subarray(at, at + cut));
      const sums = { out: 0, err: 0 };
      for (const [s, n] of got) sums[s as "out" | "err"] += n;
      expect(sums).toEqual({ out: 6 + 70_000, err: 5 });
      expect(got.findIndex(([s]) => s === "err")).toBeGreaterThan(0);
    }
  });
});

/** A session's side: what the relay sent to the agent. */
function world(limits = { frameBytes: 16, heldBytes: 64, idleMs: 60_000, stdinWindowBytes: 20 }) {
  const sent: { case: string; value: Record<string, unknown> }[] = [];
  const terminals = new SessionTerminals("host-1", (kind) => sent.push(kind as never));
  const relay = new TerminalRelay(terminals, "t1", limits);
  terminals.start(
    { execId: "t1", tenantId: "t", service: "web", replica: 0, argv: ["sh"], user: "", workdir: "", env: {}, tty: true, rows: 0, cols: 0 },
    relay,
  );
  const requests: AttachRequest[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  const it: AsyncIterator<AttachRequest> = {
    next: async () => {
      while (requests.length === 0 && !ended) await new Promise<void>((r) => (wake = r));
      const value = requests.shift();
      return value ? { done: false, value } : { done: true, value: undefined };
    },
  };
  const client = {
    send(kind: NonNullable<MessageInitShape<typeof AttachRequestSchema>["kind"]>) {
      requests.push(create(AttachRequestSchema, { kind }));
      wake?.();
    },
    end() {
      ended = true;
      wake?.();
    },
  };
  return { sent, terminals, relay, it, client };
}

async function drain(gen: AsyncGenerator<AttachResponse>): Promise<{ answers: AttachResponse[]; error?: unknown }> {
  const answers: AttachResponse[] = [];
  try {
    for await (const a of gen) answers.push(a);
    return { answers };
  } catch (error) {
    return { answers, error };
  }
}

const out = (data: string, extra: Record<string, unknown> = {}) =>
  create(SessionExecOutputSchema, { execId: "t1", data: new TextEncoder().encode(data), ...extra });

describe("a terminal relay", () => {
  it("stdin and the end of stdin go to the agent in order; output and the exit code come back", async () => {
    const w = world();
    const answers = drain(w.relay.answers(w.it));
    w.client.send({ case: "stdin", value: new TextEncoder().encode("ls\n") });
    w.client.send({ case: "resize", value: { rows: 5, cols: 9 } });
    w.client.end();
    await new Promise((r) => setImmediate(r));
    w.terminals.output(out("a b\n"));
    w.terminals.output(create(SessionExecOutputSchema, { execId: "t1", exited: { code: 4 } }));
    const got = await answers;
    expect(got.answers.map((a) => a.kind.case)).toEqual(["stdout", "exitCode"]);
    expect(got.answers[1]?.kind.value).toBe(4);
    expect(w.sent.map((m) => m.case)).toEqual(["execOpen", "execInput", "execInput", "execInput"]);
    expect(w.sent[3]?.value).toMatchObject({ closeStdin: true });
    expect(w.terminals.size).toBe(0);
  });

  it("no more than a window of stdin is in flight: the client's stream waits until the agent says it took the bytes", async () => {
    const w = world();
    const answers = drain(w.relay.answers(w.it));
    for (let i = 0; i < 3; i++) w.client.send({ case: "stdin", value: new Uint8Array(16) });
    // Event-loop turns (the relay waits on promises only), enough for a third read to happen.
    for (let turn = 0; turn < 10; turn++) await new Promise((r) => setImmediate(r));
    const inputs = () => w.sent.filter((m) => m.case === "execInput").length;
    // 16 in flight: under the window of 20, the next is read; 32 in flight: reading waits.
    expect(inputs()).toBe(2);
    w.terminals.output(create(SessionExecOutputSchema, { execId: "t1", stdinTaken: 32n }));
    await new Promise((r) => setImmediate(r));
    expect(inputs()).toBe(3);
    w.terminals.output(create(SessionExecOutputSchema, { execId: "t1", exited: { code: 0 } }));
    expect((await answers).answers.at(-1)?.kind.case).toBe("exitCode");
  });

  it("a stdin message over the cap ends it INVALID_REQUEST and closes the terminal on the agent", async () => {
    const w = world();
    const answers = drain(w.relay.answers(w.it));
    w.client.send({ case: "stdin", value: new Uint8Array(17) });
    const got = await answers;
    expect((got.error as { code?: string }).code).toBe("INVALID_REQUEST");
    expect(w.sent.at(-1)?.value).toMatchObject({ close: true });
  });

  it("output a client does not read past the held cap closes the terminal RESOURCE_EXHAUSTED", async () => {
    const w = world();
    const gen = w.relay.answers(w.it);
    for (let i = 0; i < 10; i++) w.terminals.output(out("0123456789"));
    const got = await drain(gen);
    expect((got.error as { code?: string }).code).toBe("RESOURCE_EXHAUSTED");
    expect(w.sent.at(-1)?.value).toMatchObject({ close: true });
  });

  it("an idle terminal is closed; the session ending ends its terminals UNAVAILABLE", async () => {
    const idle = world({ frameBytes: 16, heldBytes: 64, idleMs: 20, stdinWindowBytes: 20 });
    const got = await drain(idle.relay.answers(idle.it));
    expect((got.error as { message?: string }).message).toMatch(/no byte either way/);
    expect(idle.sent.at(-1)?.value).toMatchObject({ close: true });
    const w = world();
    const answers = drain(w.relay.answers(w.it));
    w.terminals.sessionEnded();
    expect(((await answers).error as { code?: string }).code).toBe("UNAVAILABLE");
    expect(() => w.terminals.start({ execId: "t2" } as never, w.relay)).toThrow(/ended/);
  });

  it(`a node has at most ${MAX_TERMINALS_PER_NODE} terminals open through one controller`, () => {
    const w = world();
    for (let i = 2; i <= MAX_TERMINALS_PER_NODE; i++) w.terminals.start({ execId: `t${i}` } as never, w.relay);
    expect(() => w.terminals.start({ execId: "one-more" } as never, w.relay)).toThrow(/8 terminals open/);
  });
});

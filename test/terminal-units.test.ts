// Units of the terminal path: the engine's multiplexed output split back into stdout and stderr
// (agent/engine/engine-exec.ts) and its calls' deadlines, one relay between a client's Attach
// stream and a session's terminals (controller/dispatch/terminal-relay.ts, session-terminals.ts)
// with its caps, and the output window both ways: the relay acknowledging what its client took,
// the agent's OutputWindow stopping the engine's reads (agent/session/terminals.ts).
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { SessionExecOutputSchema } from "../gen/skipper/v1/node_service_pb.js";
import { AttachRequestSchema, type AttachRequest, type AttachResponse } from "../gen/skipper/v1/terminal_service_pb.js";
import { Demultiplexer, EngineExec } from "../agent/engine/engine-exec.js";
import { MAX_TERMINALS_PER_NODE, SessionTerminals } from "../controller/dispatch/session-terminals.js";
import { TerminalRelay } from "../controller/dispatch/terminal-relay.js";
import { AgentSession } from "../controller/dispatch/agent-session.js";
import { OutputWindow } from "../agent/session/terminals.js";

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

const OPEN = {
  tenantId: "t",
  service: "web",
  replica: 0,
  argv: ["sh"],
  user: "",
  workdir: "",
  env: {},
  tty: true,
  rows: 0,
  cols: 0,
  outputWindow: 40,
};

/** A session's side: what the relay sent to the agent. */
function world(limits = { frameBytes: 16, heldBytes: 64, idleMs: 60_000, stdinWindowBytes: 20, outputWindowBytes: 40 }) {
  const sent: { case: string; value: Record<string, unknown> }[] = [];
  const terminals = new SessionTerminals("host-1", (kind) => sent.push(kind as never));
  const relay = new TerminalRelay(terminals, "t1", limits);
  terminals.reserve("t1", relay);
  terminals.start({ execId: "t1", ...OPEN });
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
    const idle = world({ frameBytes: 16, heldBytes: 64, idleMs: 20, stdinWindowBytes: 20, outputWindowBytes: 40 });
    const got = await drain(idle.relay.answers(idle.it));
    expect((got.error as { message?: string }).message).toMatch(/no byte either way/);
    expect(idle.sent.at(-1)?.value).toMatchObject({ close: true });
    const w = world();
    const answers = drain(w.relay.answers(w.it));
    w.terminals.sessionEnded();
    expect(((await answers).error as { code?: string }).code).toBe("UNAVAILABLE");
    expect(() => w.terminals.reserve("t2", w.relay)).toThrow(/ended/);
  });

  it(`a node has at most ${MAX_TERMINALS_PER_NODE} terminals open through one controller`, () => {
    const w = world();
    for (let i = 2; i <= MAX_TERMINALS_PER_NODE; i++) w.terminals.reserve(`t${i}`, w.relay);
    expect(() => w.terminals.reserve("one-more", w.relay)).toThrow(/8 terminals open/);
  });
});

describe("a terminal's output window (controller side)", () => {
  it("output the client's stream took is acknowledged a quarter window at a time; output it does not read is not", async () => {
    const w = world();
    const gen = w.relay.answers(w.it);
    const acks = () => w.sent.filter((m) => m.case === "execInput" && (m.value.outputAcked as bigint) > 0n).map((m) => m.value.outputAcked);
    for (let i = 0; i < 3; i++) w.terminals.output(out("0123456789"));
    // Nothing read yet: nothing acknowledged, whatever waits.
    await new Promise((r) => setImmediate(r));
    expect(acks()).toEqual([]);
    // Each answer taken resumes the relay after it; the ack goes once 10 (40 / 4) bytes were taken.
    await gen.next();
    expect(acks()).toEqual([]);
    await gen.next();
    expect(acks()).toEqual([10n]);
    await gen.next();
    expect(acks()).toEqual([10n, 20n]);
    w.terminals.output(create(SessionExecOutputSchema, { execId: "t1", exited: { code: 0 } }));
    expect((await gen.next()).value?.kind.case).toBe("exitCode");
    // The terminal ended: nothing more goes to the agent for it.
    expect(acks()).toEqual([10n, 20n]);
    await gen.return(undefined);
  });

  it("a slot reserved and closed before its open went out sends the agent nothing; the open is not sent after", () => {
    const sent: { case: string }[] = [];
    const terminals = new SessionTerminals("host-1", (kind) => sent.push(kind as never));
    const ends: string[] = [];
    terminals.reserve("t9", { deliver: () => ends.push("deliver"), sessionEnded: () => ends.push("ended") });
    expect(terminals.size).toBe(1);
    terminals.input("t9", { data: new Uint8Array(1) });
    terminals.close("t9");
    terminals.start({ execId: "t9", ...OPEN });
    expect([sent, terminals.size]).toEqual([[], 0]);
  });
});

describe("a terminal's output window (agent side)", () => {
  it("reading stops once more than the window is unacknowledged and goes on once an ack brings it back under", () => {
    const win = new OutputWindow(100);
    expect(win.onSent(60)).toBe(false);
    expect(win.onSent(40)).toBe(false);
    expect(win.onSent(1)).toBe(true);
    expect(win.onSent(50)).toBe(false); // paused already (a chunk read before the pause took)
    expect(win.onAcked(50)).toBe(false); // 101 unacknowledged: still over
    expect(win.onAcked(60)).toBe(true);
    expect(win.onAcked(60)).toBe(false);
    expect(win.onAcked(10_000)).toBe(false);
    expect(win.acked).toBe(151);
  });

  it("a window of 0 (a controller that sends no acks) never stops reading", () => {
    const win = new OutputWindow(0);
    expect(win.onSent(10 * 1024 * 1024)).toBe(false);
    expect(win.paused).toBe(false);
  });
});

describe("the engine's calls for a terminal", () => {
  it("an engine that does not answer fails the start within the deadline, naming the call it hung on", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-engine-"));
    const socketPath = join(dir, "engine.sock");
    // Answers the exec's create (when asked to), never the start; holds every request it does not answer.
    let answerCreate = false;
    const server = createServer((req, res) => {
      if (answerCreate && req.url?.endsWith("/exec") && req.url.startsWith("/containers/")) res.end(JSON.stringify({ Id: "e1" }));
    });
    await new Promise<void>((r) => server.listen(socketPath, r));
    const spec = { containerId: "c1", argv: ["sh"], user: "", workdir: "", env: {}, tty: false, rows: 0, cols: 0 };
    const sink = { output: () => undefined, ended: () => undefined };
    try {
      await expect(EngineExec.start({ socketPath }, spec, sink, 100)).rejects.toThrow(
        "engine: POST /containers/c1/exec: no answer within 0.1 s",
      );
      answerCreate = true;
      await expect(EngineExec.start({ socketPath }, spec, sink, 100)).rejects.toThrow("engine: start exec: no answer within 0.1 s");
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("the controller's side of a session", () => {
  it("answers and other control messages go to the agent before terminal traffic already queued", () => {
    const session = new AgentSession({} as never, {} as never, {} as never);
    session.terminals.reserve("t1", { deliver: () => undefined, sessionEnded: () => undefined });
    session.terminals.start({ execId: "t1", ...OPEN });
    for (let i = 0; i < 3; i++) session.terminals.input("t1", { data: new Uint8Array(64 * 1024) });
    session.send({ case: "answer", value: { workOrderId: "o1", accepted: true } });
    session.send({ case: "cancel", value: { workOrderId: "o2" } });
    const order: string[] = [];
    for (let m = session.take(); m !== undefined; m = session.take()) order.push(m.kind.case ?? "");
    expect(order).toEqual(["answer", "cancel", "execOpen", "execInput", "execInput", "execInput"]);
  });
});

// budgetedStream over chunks cut anywhere: each message's bytes are held from its first byte to
// its last (headers split across chunks included), and nothing is held between messages.
import { describe, expect, it } from "vitest";
import { BodyBudget } from "./body-limits.js";
import { budgetedStream, EnvelopeMeter } from "./stream-budget.js";
import { SkipperError } from "../base/errors.js";

function frames(...lengths: number[]): Uint8Array {
  const parts = lengths.map((n) => {
    const b = Buffer.alloc(5 + n, 0x61);
    b.writeUInt8(0, 0);
    b.writeUInt32BE(n, 1);
    return b;
  });
  return new Uint8Array(Buffer.concat(parts));
}

async function* cut(bytes: Uint8Array, at: number[]): AsyncGenerator<Uint8Array> {
  let from = 0;
  for (const to of [...at, bytes.length]) {
    yield bytes.subarray(from, to);
    from = to;
  }
}

describe("budgetedStream", () => {
  it("holds a message's bytes until its last one, across chunks cut inside headers, and passes every byte on", async () => {
    const budget = new BodyBudget({ perConnection: 1000, perAddress: 1000, total: 1000 });
    const conn = {};
    const bytes = frames(10, 0, 300, 7);
    const held: number[] = [];
    const out: number[] = [];
    // Cut inside the first header, right after it, inside the third message and its header.
    for await (const c of budgetedStream(cut(bytes, [3, 5, 17, 22, 100]), () => budget.reserve(conn, "a"), 10_000)) {
      out.push(c.length);
      held.push(budget.held());
    }
    expect(out.reduce((a, b) => a + b, 0)).toBe(bytes.length);
    // Messages at [0,15), [15,20) (empty), [20,325), [325,337). After [0,3): 3 header bytes held;
    // [3,5): the header whole: 5; [5,17): message 1 done, 2 bytes of message 2's header: 2;
    // [17,22): message 2 done, 2 bytes of message 3's header: 2; [22,100): 80; the rest: 0.
    expect(held).toEqual([3, 5, 2, 2, 80, 0]);
  });

  it("refuses a message under way past the budget with RESOURCE_EXHAUSTED, and gives its bytes back", async () => {
    const budget = new BodyBudget({ perConnection: 100, perAddress: 1000, total: 1000 });
    const read = async () => {
      for await (const _ of budgetedStream(cut(frames(500), [50, 120]), () => budget.reserve({}, "a"), 10_000)) void _;
    };
    await expect(read()).rejects.toMatchObject({ code: "RESOURCE_EXHAUSTED" });
    expect(budget.held()).toBe(0);
  });
});

describe("EnvelopeMeter collecting messages (the Session route's reader)", () => {
  it("returns each whole message once, from chunks cut anywhere or holding several, and holds only the message under way", () => {
    const budget = new BodyBudget({ perConnection: 1000, perAddress: 1000, total: 1000 });
    const meter = new EnvelopeMeter(
      () => budget.reserve({}, "a"),
      () => 0,
      { maxBytes: 500 },
    );
    const bytes = frames(10, 0, 300, 7);
    const got: number[] = [];
    const held: number[] = [];
    let from = 0;
    for (const to of [3, 5, 17, 22, 100, bytes.length]) {
      for (const m of meter.push(bytes.subarray(from, to))) got.push(m.data.length);
      held.push(budget.held());
      from = to;
    }
    expect(got).toEqual([10, 0, 300, 7]);
    expect(held).toEqual([3, 5, 2, 2, 80, 0]);
    expect(meter.startedAt).toBeUndefined();
  });

  it("refuses a message announced over maxBytes before taking its payload, and gives back what it held", () => {
    const budget = new BodyBudget({ perConnection: 1000, perAddress: 1000, total: 1000 });
    const meter = new EnvelopeMeter(
      () => budget.reserve({}, "a"),
      () => 0,
      { maxBytes: 100 },
    );
    const push = () => meter.push(frames(101).subarray(0, 20));
    expect(push).toThrow(SkipperError);
    meter.release();
    expect(budget.held()).toBe(0);
  });
});

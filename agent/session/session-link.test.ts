// SessionLink against a scripted stream: answers reach the request they answer (by subject,
// order and token, in request order, a timed-out request keeping its place), refusals carry the
// unary call's Connect code, and the end of the stream fails what still waits with UNAVAILABLE.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import {
  SessionAnswerSubject,
  SessionResponseSchema,
  type NodeService,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/skipper/v1/node_service_pb.js";
import { SessionLink } from "./session-link.js";

/** A Session the test scripts: what the link sent, and a push of what the controller says. */
function scripted() {
  const sent: SessionRequest["kind"][] = [];
  const out: SessionResponse[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  const sentWaiters: (() => void)[] = [];
  const nodes = {
    session(input: AsyncIterable<{ kind: SessionRequest["kind"] }>) {
      void (async () => {
        for await (const m of input) {
          sent.push(m.kind);
          for (const w of sentWaiters.splice(0)) w();
        }
      })();
      return (async function* () {
        for (;;) {
          const m = out.shift();
          if (m) {
            yield m;
            continue;
          }
          if (ended) return;
          await new Promise<void>((r) => {
            wake = r;
          });
        }
      })();
    },
  } as unknown as Client<typeof NodeService>;
  return {
    nodes,
    sent,
    say(kind: SessionResponse["kind"]) {
      out.push(create(SessionResponseSchema, { kind } as never));
      wake?.();
    },
    end() {
      ended = true;
      wake?.();
    },
    async sentCount(n: number) {
      while (sent.length < n) await new Promise<void>((r) => sentWaiters.push(r));
    },
  };
}

const answer = (subject: SessionAnswerSubject, id: string, token: bigint, more: object = {}) =>
  ({ case: "answer", value: { subject, workOrderId: id, fencingToken: token, accepted: true, ...more } }) as SessionResponse["kind"];

describe("SessionLink", () => {
  it("matches answers to their requests in order; a timed-out request keeps its place; refusals carry the unary code", async () => {
    const s = scripted();
    const link = new SessionLink(s.nodes, { nodeId: "n1", agentVersion: "t", journalWorkOrderIds: [] }, pino({ level: "silent" }));
    const reading = (async () => {
      for await (const _ of link.messages());
    })();
    s.say({ case: "welcome", value: { sessionId: "s1", heartbeatIntervalMs: 10_000n, leaseMs: 2000n, maxInFlight: 1 } } as never);
    await s.sentCount(1);
    expect(s.sent[0]?.case).toBe("hello");
    const first = link.renew("o1", 1n, 20);
    await expect(first).rejects.toMatchObject({ code: Code.DeadlineExceeded });
    const second = link.renew("o1", 1n, 5000);
    const other = link.ack("o2", 7n);
    await s.sentCount(4);
    // The late answer of the first renewal, then the ack's, then the second renewal's (refused).
    s.say(answer(SessionAnswerSubject.LEASE_RENEWAL, "o1", 1n, { workOrder: { id: "late" } }));
    s.say(answer(SessionAnswerSubject.ACK, "o2", 7n));
    s.say(
      answer(SessionAnswerSubject.LEASE_RENEWAL, "o1", 1n, { accepted: false, code: "WORK_ORDER_NOT_CLAIMABLE", message: "stale token" }),
    );
    expect((await other).accepted).toBe(true);
    const refused = await second.catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ConnectError);
    expect(refused).toMatchObject({ code: Code.FailedPrecondition, rawMessage: "stale token" });
    const pending = link.result("o1", 1n, { $typeName: "skipper.v1.WorkOrderResult" } as never);
    await s.sentCount(5);
    s.end();
    await expect(pending).rejects.toMatchObject({ code: Code.Unavailable });
    await reading;
    expect(link.up).toBe(false);
    await expect(link.ack("o3", 1n)).rejects.toMatchObject({ code: Code.Unavailable });
  });

  it("a control message goes out before terminal output already waiting: a flooding terminal never holds a renewal back", async () => {
    // A transport that takes a message only when the test pulls one (a slow link).
    let input: AsyncIterator<{ kind: SessionRequest["kind"] }> | undefined;
    const nodes = {
      session(i: AsyncIterable<{ kind: SessionRequest["kind"] }>) {
        input = i[Symbol.asyncIterator]();
        return (async function* () {
          await new Promise(() => undefined);
        })();
      },
    } as unknown as Client<typeof NodeService>;
    const link = new SessionLink(nodes, { nodeId: "n1", agentVersion: "t", journalWorkOrderIds: [] }, pino({ level: "silent" }));
    void (async () => {
      for await (const _ of link.messages());
    })();
    await new Promise((r) => setImmediate(r));
    const pull = async () => (await input!.next()).value.kind.case as string;
    expect(await pull()).toBe("hello");
    for (let i = 0; i < 5; i++) link.send({ case: "execOutput", value: { execId: "t1", data: new Uint8Array(64 * 1024) } });
    expect(await pull()).toBe("execOutput");
    void link.renew("o1", 1n, 0).catch(() => undefined);
    link.send({ case: "heartbeat", value: {} });
    expect([await pull(), await pull(), await pull()]).toEqual(["leaseRenewal", "heartbeat", "execOutput"]);
    link.close();
  });
});

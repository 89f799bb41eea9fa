// A node's Session stream (NodeService.Session) driven by a test: what it sends is pushed by the
// test, what it receives is kept in order, and the test waits for the message it expects (woken by
// each message that arrives, never by a timer) or for the stream's end.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { NodeService, SessionRequestSchema, SessionResponse } from "../../gen/skipper/v1/node_service_pb.js";

type RequestInit = MessageInitShape<typeof SessionRequestSchema>;

export interface TestSession {
  /** Sends one message to the controller. */
  send(kind: RequestInit["kind"]): void;
  /** Everything received so far, in order. */
  readonly received: SessionResponse[];
  /** The first message received at or after `from` (an index into received) that `match` accepts. */
  next<T>(what: string, match: (m: SessionResponse) => T | undefined, from?: number): Promise<T>;
  /** Resolves when the stream has ended: with its error, or undefined when it ended cleanly. */
  ended(): Promise<unknown>;
  /** Cuts the stream as a vanished client would (the request is aborted). */
  abort(): void;
  /** Ends what the client sends (a clean close). */
  close(): void;
}

/** Opens a Session on `client` (a NodeService client with the node's credential). */
export function openSession(client: Client<typeof NodeService>, timeoutMs = 15_000): TestSession {
  const queue: RequestInit[] = [];
  let wakeSender: (() => void) | undefined;
  let closed = false;
  const input: AsyncIterable<RequestInit> = {
    async *[Symbol.asyncIterator]() {
      for (;;) {
        const m = queue.shift();
        if (m) {
          yield m;
          continue;
        }
        if (closed) return;
        await new Promise<void>((r) => {
          wakeSender = r;
        });
      }
    },
  };
  const ac = new AbortController();
  const received: SessionResponse[] = [];
  const waiters = new Set<() => void>();
  let end: { error: unknown } | undefined;
  const notify = () => {
    for (const w of [...waiters]) w();
  };
  void (async () => {
    try {
      for await (const m of client.session(input, { signal: ac.signal })) {
        received.push(m);
        notify();
      }
      end = { error: undefined };
    } catch (e) {
      end = { error: e };
    }
    notify();
  })();
  const until = <T>(what: string, probe: () => T | undefined): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const check = () => {
        let v: T | undefined;
        try {
          v = probe();
        } catch (e) {
          done();
          reject(e);
          return;
        }
        if (v !== undefined) {
          done();
          resolve(v);
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${what}; received: ${received.map((m) => m.kind.case).join(", ")}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  return {
    send(kind) {
      queue.push({ kind });
      wakeSender?.();
    },
    received,
    next(what, match, from = 0) {
      return until(what, () => {
        for (const m of received.slice(from)) {
          const v = match(m);
          if (v !== undefined) return v;
        }
        if (end) throw new Error(`the stream ended (${String(end.error)}) before ${what}`);
        return undefined;
      });
    },
    ended: () => until("the stream to end", () => end).then((e) => e.error),
    abort: () => ac.abort(),
    close() {
      closed = true;
      wakeSender?.();
    },
  };
}

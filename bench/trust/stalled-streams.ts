// Stalled streams as an attacker holds them: HTTP/2 connections, each with streams that send a
// body and never end it, and what the client sees of each (answered, with what, and when; closed).
// Nothing here ends a stream; every wait is bounded and says when its bound passed.
import http2 from "node:http2";
import { waitUntil } from "./wait-until.js";

/** What the client saw of one stream. */
export interface StreamSeen {
  /** performance.now() when the request was opened. */
  startedAt: number;
  /** When its body had been handed to the socket in full. */
  sentAt?: number;
  /** When an answer (response headers) or a reset arrived, and what it was ("HTTP 429", "grpc-status 8", "reset 0"). */
  answeredAt?: number;
  answer?: string;
  /** When the stream closed (reset, or both sides ended). */
  closedAt?: number;
  /** Never opened: the server's stream limit for the connection held it on the client's side. */
  queued?: boolean;
}

export interface StallPlan {
  url: string;
  ca: string;
  connections: number;
  streamsPerConnection: number;
  headers: Record<string, string>;
  body: Buffer;
  /** Source address of the connections (a second loopback address has its own per-address budgets). */
  localAddress?: string;
}

/** Streams held open; close() destroys their connections. */
export interface Stalled {
  streams: StreamSeen[];
  /** Whether every connection's ping came back (the server has read what was sent before it). */
  pinged: boolean;
  /** Whether every stream had its body sent or was answered before the send bound passed. */
  sendsDone: boolean;
  /** Ends every open stream's body (END_STREAM) and waits until each is closed; whether all were within `timeoutMs`. */
  end(timeoutMs: number): Promise<boolean>;
  /** Destroys the connections (resetting any stream still open); whether they closed within `timeoutMs`. */
  close(timeoutMs: number): Promise<boolean>;
}

/** Opens the streams, waits (at most `timeoutMs`) until each body is sent or answered, then one ping round trip per connection. */
export async function openStalled(plan: StallPlan, timeoutMs: number): Promise<Stalled> {
  const sessions: http2.ClientHttp2Session[] = [];
  const streams: StreamSeen[] = [];
  const requests: http2.ClientHttp2Stream[] = [];
  for (let c = 0; c < plan.connections; c++) {
    const session = http2.connect(plan.url, { ca: plan.ca, ...(plan.localAddress ? { localAddress: plan.localAddress } : {}) });
    session.on("error", () => undefined);
    session.once("remoteSettings", () => withSettings.add(session));
    sessions.push(session);
    for (let i = 0; i < plan.streamsPerConnection; i++) {
      const [seen, request] = stall(session, plan);
      streams.push(seen);
      requests.push(request);
    }
  }
  // A stream the client holds back for the server's concurrency limit (it never got a stream id)
  // is not held by the server: it neither sends nor is answered.
  const isSettled = (i: number) => (streams[i]!.sentAt ?? streams[i]!.answeredAt) !== undefined || queuedByLimit(requests[i]!);
  const sendsDone = (await waitUntil(() => (streams.every((_, i) => isSettled(i)) ? true : undefined), timeoutMs, 20)) ?? false;
  for (const [i, seen] of streams.entries()) {
    if (seen.sentAt === undefined && seen.answeredAt === undefined && queuedByLimit(requests[i]!)) seen.queued = true;
  }
  const pings = sessions.map(
    (s) =>
      new Promise<boolean>((resolve) => {
        if (s.destroyed || s.closed || !s.ping((err) => resolve(!err))) resolve(false);
      }),
  );
  const pinged = (await withTimeout(Promise.all(pings), timeoutMs))?.every(Boolean) ?? false;
  return {
    streams,
    pinged,
    sendsDone,
    end: async (ms) => {
      for (const r of requests) if (!r.closed && !r.destroyed) r.end();
      return (await waitUntil(() => (streams.every((s) => s.closedAt !== undefined) ? true : undefined), ms, 50)) ?? false;
    },
    close: async (ms) => {
      const closed = sessions.map((s) => new Promise<void>((r) => (s.closed && s.destroyed ? r() : s.once("close", () => r()))));
      for (const s of sessions) s.destroy();
      return (await withTimeout(Promise.all(closed), ms)) !== undefined;
    },
  };
}

// Sessions that have received the server's settings: only then is a pending stream held back by its limit.
const withSettings = new WeakSet<http2.ClientHttp2Session>();

// Held back on the client: its session is up with the server's settings, and the stream has no id.
function queuedByLimit(request: http2.ClientHttp2Stream): boolean {
  const session = request.session as http2.ClientHttp2Session | undefined;
  return request.pending && session !== undefined && !session.destroyed && withSettings.has(session);
}

function stall(session: http2.ClientHttp2Session, plan: StallPlan): [StreamSeen, http2.ClientHttp2Stream] {
  const seen: StreamSeen = { startedAt: performance.now() };
  const answered = (answer: string) => {
    if (seen.answeredAt !== undefined) return;
    seen.answeredAt = performance.now();
    seen.answer = answer;
  };
  const s = session.request(plan.headers, { endStream: false });
  s.on("error", () => undefined);
  s.on("response", (h) => {
    const grpc = h["grpc-status"];
    answered(grpc === undefined ? `HTTP ${h[":status"]}` : `grpc-status ${grpc}`);
  });
  s.on("data", () => undefined);
  s.on("close", () => {
    seen.closedAt = performance.now();
    answered(`reset ${s.rstCode ?? "?"}`);
  });
  s.write(plan.body, (err) => {
    if (!err) seen.sentAt = performance.now();
  });
  return [seen, s];
}

/** Streams with no answer (and not closed) at `at`. */
export function heldAt(streams: StreamSeen[], at: (s: StreamSeen) => number): StreamSeen[] {
  return streams.filter((s) => !s.queued && (s.answeredAt ?? Number.POSITIVE_INFINITY) > at(s));
}

/** "grpc-status 8 ×936, reset 0 ×2", the answers of `streams`, commonest first. */
export function answersOf(streams: StreamSeen[]): string {
  const by = new Map<string, number>();
  for (const s of streams) {
    const answer = s.answer ?? (s.queued ? "never opened (stream limit)" : undefined);
    if (answer) by.set(answer, (by.get(answer) ?? 0) + 1);
  }
  return (
    [...by]
      .sort((a, b) => b[1] - a[1])
      .map(([a, n]) => `${a} ×${n.toLocaleString("en-US")}`)
      .join(", ") || "none"
  );
}

/**
 * Waits until every stream is closed (an answered stream the server keeps open counts as open),
 * at most until `bound` (a performance.now() time); whether all were.
 */
export async function waitClosed(streams: StreamSeen[], bound: number): Promise<boolean> {
  const all = () => (streams.every((s) => s.closedAt !== undefined) ? true : undefined);
  return (await waitUntil(all, Math.max(0, bound - performance.now()), 100)) ?? false;
}

/** `p`'s value, or undefined once `ms` have passed. */
export async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<undefined>((r) => {
    timer = setTimeout(() => r(undefined), ms);
  });
  try {
    return await Promise.race([p, bound]);
  } finally {
    clearTimeout(timer);
  }
}

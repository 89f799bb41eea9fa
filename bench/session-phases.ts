// The controller phases over agent sessions (NodeService.Session, one bidirectional stream per
// node), as skippy runs an order on one (npm run bench -- --phases ...,session,keepalive):
//
//   session orders   each client opens its node's session; the controller pushes an order already
//                    claimed, the client acks it and waits for the ack's answer (a real agent
//                    journals the order, then waits, then runs it), sends the result and waits
//                    for its answer; the controller pushes the next one (one order in flight per
//                    session). Its rate counts finished orders, beside claim+result's two unary
//                    calls and pg-boss's claim+complete.
//   keepalive        each client sends heartbeats without a report (what an idle agent sends every
//                    interval) in bursts of KEEPALIVE_BURST, each burst closed by a request that
//                    is answered (an ack of an order that does not exist: refused, no write), so
//                    the controller's CPU per keepalive is measured, not the client's send rate.
//
// Targets (issue 38), against the same run's bare echo unary call (echo Check):
//   a finished order over a session costs at most 2 echo calls' CPU;
//   a keepalive costs at most 0.25 of an echo call's CPU.
import type { Client } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import {
  SessionAnswerSubject,
  SessionRequestSchema,
  type NodeService,
  type SessionRequest,
  type SessionResponse,
} from "../gen/skipper/v1/node_service_pb.js";
import type { PhaseResult } from "./closed-loop.js";
import { percentile } from "./measure.js";

/** Keepalives per burst; each burst ends with one answered request. */
export const KEEPALIVE_BURST = 200;

type Kind = NonNullable<Parameters<typeof create<typeof SessionRequestSchema>>[1]>["kind"];

/** One open session: send requests, wait for the next response that `pick` takes. */
export class BenchSession {
  private readonly queue: SessionRequest[] = [];
  private wakeSender: (() => void) | undefined;
  private readonly inbox: SessionResponse[] = [];
  private wakeReader: (() => void) | undefined;
  private closed = false;
  private failure: unknown;
  private readonly abort = new AbortController();
  readonly done: Promise<void>;

  constructor(client: Client<typeof NodeService>) {
    const self = this;
    async function* requests(): AsyncGenerator<SessionRequest> {
      for (;;) {
        const next = self.queue.shift();
        if (next) {
          yield next;
          continue;
        }
        if (self.closed) return;
        await new Promise<void>((r) => {
          self.wakeSender = r;
        });
      }
    }
    this.done = (async () => {
      try {
        for await (const m of client.session(requests(), { signal: this.abort.signal, timeoutMs: 0 })) {
          this.inbox.push(m);
          this.wakeReader?.();
        }
      } catch (e) {
        if (!this.closed) this.failure = e;
      } finally {
        this.closed = true;
        this.wakeReader?.();
      }
    })();
  }

  send(kind: Kind): void {
    this.queue.push(create(SessionRequestSchema, { kind }));
    this.wakeSender?.();
  }

  /** The next response `pick` takes (others are dropped); undefined when the session ended or `deadline` passed. */
  async next<T>(pick: (m: SessionResponse) => T | undefined, deadline = Number.POSITIVE_INFINITY): Promise<T | undefined> {
    for (;;) {
      const m = this.inbox.shift();
      if (m) {
        const got = pick(m);
        if (got !== undefined) return got;
        continue;
      }
      if (this.closed) {
        if (this.failure) throw this.failure;
        return undefined;
      }
      const left = deadline - performance.now();
      if (left <= 0) return undefined;
      const timer = Number.isFinite(left) ? setTimeout(() => this.wakeReader?.(), left) : undefined;
      await new Promise<void>((r) => {
        this.wakeReader = r;
      });
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.wakeSender?.();
    this.abort.abort();
    await this.done;
  }
}

export const answerOf = (subject: SessionAnswerSubject, id: string) => (m: SessionResponse) =>
  m.kind.case === "answer" && m.kind.value.subject === subject && m.kind.value.workOrderId === id ? m.kind.value : undefined;

/** Opens node `bench-node-<w>`'s session with client `w`; resolves once it is welcomed. */
export async function openSession(client: Client<typeof NodeService>, w: number, nodeId = `bench-node-${w}`): Promise<BenchSession> {
  const s = new BenchSession(client);
  s.send({ case: "hello", value: { nodeId, agentVersion: "bench" } });
  if (!(await s.next((m) => (m.kind.case === "welcome" ? m.kind.value : undefined)))) throw new Error(`${nodeId}: no welcome`);
  return s;
}

/** Figures of a phase whose workers counted `ops` and spent `latencies`. */
function figures(
  name: string,
  latencies: number[],
  seconds: number,
  cpu0: number | undefined,
  cpuOf: () => number,
  client0: NodeJS.CpuUsage,
): PhaseResult {
  latencies.sort((a, b) => a - b);
  const used = process.cpuUsage(client0);
  return {
    name,
    ops: latencies.length,
    seconds,
    rate: latencies.length / seconds,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    cpu: cpu0 === undefined ? undefined : (cpuOf() - cpu0) / seconds,
    clientCpu: (used.user + used.system) / 1e6 / seconds,
  };
}

/**
 * Finishes up to `budget[w]` of node w's pending orders over its session, for `durationMs`;
 * one latency per finished order (from the previous order's answer to this one's).
 */
export async function sessionOrdersPhase(
  nodes: Client<typeof NodeService>[],
  budget: number[],
  durationMs: number,
  cpuOf: () => number,
): Promise<PhaseResult> {
  const sessions = await Promise.all(nodes.map((c, w) => openSession(c, w)));
  const latencies: number[] = [];
  const cpu0 = cpuOf();
  const client0 = process.cpuUsage();
  const start = performance.now();
  const deadline = start + durationMs;
  await Promise.all(
    sessions.map(async (s, w) => {
      let t0 = performance.now();
      for (let left = budget[w] ?? 0; left > 0 && performance.now() < deadline; left--) {
        const order = await s.next((m) => (m.kind.case === "order" ? m.kind.value.workOrder : undefined), deadline);
        if (!order) return;
        const token = order.claim?.fencingToken ?? 0n;
        s.send({ case: "ack", value: { workOrderId: order.id, fencingToken: token } });
        const acked = await s.next(answerOf(SessionAnswerSubject.ACK, order.id));
        if (!acked?.accepted) throw new Error(`ack refused: ${acked?.code} ${acked?.message}`);
        const result = { success: true, code: "APPLY_OK", message: "bench", details: { durationMs: 1n } };
        s.send({ case: "result", value: { workOrderId: order.id, fencingToken: token, result } });
        const answered = await s.next(answerOf(SessionAnswerSubject.RESULT, order.id));
        if (!answered?.accepted) throw new Error(`result refused: ${answered?.code} ${answered?.message}`);
        const t1 = performance.now();
        latencies.push(t1 - t0);
        t0 = t1;
      }
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  await Promise.all(sessions.map((s) => s.close()));
  return figures("session orders", latencies, seconds, cpu0, cpuOf, client0);
}

/** Keepalives on every node's session for `durationMs`; one latency per burst, ops count keepalives. */
export async function sessionKeepalivePhase(
  nodes: Client<typeof NodeService>[],
  durationMs: number,
  cpuOf: () => number,
): Promise<PhaseResult> {
  const sessions = await Promise.all(nodes.map((c, w) => openSession(c, w)));
  // The full report first, as an agent sends it after its hello: keepalives then count for liveness.
  for (const [w, s] of sessions.entries()) {
    s.send({ case: "heartbeat", value: { report: { nodeId: `bench-node-${w}`, agentVersion: "bench", heartbeatIntervalMs: 10_000n } } });
    s.send({ case: "ack", value: { workOrderId: "bench-sync", fencingToken: 1n } });
    await s.next(answerOf(SessionAnswerSubject.ACK, "bench-sync"));
  }
  const bursts: number[] = [];
  const cpu0 = cpuOf();
  const client0 = process.cpuUsage();
  const start = performance.now();
  const deadline = start + durationMs;
  await Promise.all(
    sessions.map(async (s) => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        for (let i = 0; i < KEEPALIVE_BURST; i++) s.send({ case: "heartbeat", value: {} });
        s.send({ case: "ack", value: { workOrderId: "bench-sync", fencingToken: 1n } });
        await s.next(answerOf(SessionAnswerSubject.ACK, "bench-sync"));
        bursts.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  await Promise.all(sessions.map((s) => s.close()));
  const result = figures("session keepalive", bursts, seconds, cpu0, cpuOf, client0);
  // ops and rate count keepalives (the sync requests are 1 in KEEPALIVE_BURST + 1 of the messages).
  const ops = bursts.length * KEEPALIVE_BURST;
  return { ...result, ops, rate: ops / seconds };
}

/** Issue 38's session targets, against the same run's echo Check CPU per call. */
export function sessionTargets(
  byName: Map<string, PhaseResult>,
  cpuMs: (r: PhaseResult) => number,
): Array<{ target: string; ok: boolean; value: number }> {
  const echo = byName.get("echo Check");
  if (!echo) return [];
  const echoMs = cpuMs(echo);
  const targets: Array<{ target: string; ok: boolean; value: number }> = [];
  for (const store of ["file", "postgres"]) {
    const orders = byName.get(`session orders (${store})`);
    if (orders) {
      const value = cpuMs(orders) / echoMs;
      targets.push({ target: `${store}: controller CPU per finished order over a session <= 2 echo calls`, ok: value <= 2, value });
    }
    const boss = byName.get("pg-boss claim+complete");
    if (orders && boss)
      targets.push({
        target: `${store}: finished orders/s over sessions >= pg-boss's jobs/s`,
        ok: orders.rate >= boss.rate,
        value: orders.rate / boss.rate,
      });
    const keepalive = byName.get(`session keepalive (${store})`);
    if (keepalive) {
      const value = cpuMs(keepalive) / echoMs;
      targets.push({ target: `${store}: a keepalive on a session <= 0.25 echo call`, ok: value <= 0.25, value });
    }
  }
  return targets;
}

// Health probes run from the node: an HTTP GET that must answer the expected status (any 2xx or
// 3xx by default) or a TCP connect, each with a timeout. Used by health_check orders and by the
// deploy health gate. A probe never throws: its result says what happened.
import { connect } from "node:net";
import { create } from "@bufbuild/protobuf";
import { durationMs } from "@bufbuild/protobuf/wkt";
import { ProbeResultSchema, type ProbeResult } from "../../gen/skipper/v1/order_action_pb.js";
import type { HealthProbe } from "../../gen/skipper/v1/safety_pb.js";

const DEFAULT_TIMEOUT_MS = 5000;

export function describeProbe(p: HealthProbe): string {
  if (p.kind.case === "http") return `http GET ${p.kind.value.url}`;
  if (p.kind.case === "tcp") return `tcp ${p.kind.value.host}:${p.kind.value.port}`;
  return "probe without http or tcp";
}

export async function runProbe(p: HealthProbe, signal?: AbortSignal): Promise<ProbeResult> {
  const started = performance.now();
  const timeoutMs = p.timeout ? durationMs(p.timeout) : DEFAULT_TIMEOUT_MS;
  const done = (ok: boolean, message: string) =>
    create(ProbeResultSchema, { probe: describeProbe(p), ok, message, durationMs: BigInt(Math.round(performance.now() - started)) });
  if (p.kind.case === "http") {
    const expect = p.kind.value.expectStatus;
    try {
      const timeout = AbortSignal.timeout(timeoutMs);
      const res = await fetch(p.kind.value.url, { redirect: "manual", signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
      await res.body?.cancel();
      const ok = expect === 0 ? res.status >= 200 && res.status < 400 : res.status === expect;
      return done(ok, `HTTP ${res.status}${ok ? "" : expect === 0 ? ", expected 2xx or 3xx" : `, expected ${expect}`}`);
    } catch (e) {
      const err = e as Error & { cause?: { code?: string; message?: string } };
      const why = err.name === "TimeoutError" ? `no answer within ${timeoutMs} ms` : (err.cause?.code ?? err.cause?.message ?? err.message);
      return done(false, why);
    }
  }
  if (p.kind.case === "tcp") {
    const { host, port } = p.kind.value;
    const message = await new Promise<string>((resolve) => {
      const socket = connect({ host, port, timeout: timeoutMs });
      const end = (m: string) => {
        socket.destroy();
        resolve(m);
      };
      socket.once("connect", () => end(""));
      socket.once("timeout", () => end(`no connection within ${timeoutMs} ms`));
      socket.once("error", (e: NodeJS.ErrnoException) => end(e.code ?? e.message));
    });
    return done(message === "", message === "" ? "connected" : message);
  }
  return done(false, "the probe names neither http nor tcp");
}

/** Runs every probe (concurrently). */
export function runProbes(probes: HealthProbe[], signal?: AbortSignal): Promise<ProbeResult[]> {
  return Promise.all(probes.map((p) => runProbe(p, signal)));
}

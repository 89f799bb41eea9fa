// Sends one hostile request (HTTP/2, or HTTP/1.1 where the attempt says) and reads what the
// controller answered: the HTTP status and, separately, the RPC-level status wherever a protocol
// carries one (grpc-status in headers or trailers, a gRPC-Web trailer frame, a Connect error body
// or end-of-stream message, the REST envelope's error code). An INTERNAL or UNKNOWN there is a
// bug even under HTTP 200. Every wait has a deadline: no answer in time is a hang.
import http2 from "node:http2";
import https from "node:https";
import type { Attempt } from "./hostile-attempt.js";

export interface Answer {
  /** HTTP status; "hang" (none in time), "reset" (the stream ended without one), "unsendable" (the client would not send it). */
  http: number | "hang" | "reset" | "unsendable";
  /** The RPC-level status, e.g. "grpc 3", "connect invalid_argument", "rest INVALID_REQUEST", "open stream". */
  rpc?: string;
  /** The RPC-level status is INTERNAL or UNKNOWN (gRPC 13 or 2, Connect internal or unknown, REST INTERNAL_ERROR). */
  internal: boolean;
  /** The start of what came back, for the log. */
  detail: string;
}

// Kept of a body: enough for an error message, not a listing.
const KEEP_BYTES = 64 * 1024;
// A watch answered with headers and then nothing: open, as a valid watch stays (not a hang).
const OPEN_STREAM_MS = 3_000;

/** Sends `a` on `session` (or over HTTP/1.1 with `agent`) and resolves with its answer within hangMs. */
export function send(a: Attempt, session: http2.ClientHttp2Session, agent: https.Agent, url: string, hangMs: number): Promise<Answer> {
  return new Promise((resolve) => {
    let status: number | undefined;
    let headers: Record<string, unknown> = {};
    let trailers: Record<string, unknown> = {};
    const chunks: Buffer[] = [];
    let kept = 0;
    let settled = false;
    let cancel: () => void = () => undefined;
    let openTimer: NodeJS.Timeout | undefined;
    const finish = (answer?: Answer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(openTimer);
      resolve(answer ?? read(status, headers, trailers, Buffer.concat(chunks)));
      cancel();
    };
    const timer = setTimeout(() => finish({ http: "hang", internal: false, detail: "" }), hangMs);
    const onHeaders = (code: number, h: Record<string, unknown>) => {
      status = code;
      headers = h;
      if (a.streaming && code === 200 && h["grpc-status"] === undefined) {
        openTimer = setTimeout(() => finish({ http: 200, rpc: "open stream", internal: false, detail: "" }), OPEN_STREAM_MS);
      }
    };
    const onData = (chunk: Buffer) => {
      if (kept < KEEP_BYTES) {
        chunks.push(chunk);
        kept += chunk.length;
      }
      // A watch the input happened to open validly answers with its first message and stays open.
      if (a.streaming && status === 200 && firstFrameIsMessage(Buffer.concat(chunks))) {
        finish({ http: 200, rpc: "stream message", internal: false, detail: "" });
      }
    };
    try {
      if (a.http1) {
        const { hostname, port } = new URL(url);
        // Node frames a GET's (or DELETE's...) body by nothing unless told its length: the server
        // would read it as the next request.
        const headers = a.body.length > 0 ? { ...a.headers, "content-length": String(a.body.length) } : a.headers;
        const req = https.request({ hostname, port, path: a.path, method: a.method, headers, agent });
        cancel = () => req.destroy();
        req.on("response", (res) => {
          onHeaders(res.statusCode ?? 0, res.headers);
          res.on("data", onData);
          res.on("end", () => {
            trailers = res.trailers;
            finish();
          });
          res.on("error", () => finish());
        });
        req.on("error", () => finish(status === undefined ? { http: "reset", internal: false, detail: "" } : undefined));
        req.end(a.body);
        return;
      }
      // Node ends a GET or HEAD stream with its headers unless told otherwise: a body sent with one
      // would never leave the client.
      const stream = session.request({ ":method": a.method, ":path": a.path, ...a.headers }, { endStream: a.body.length === 0 });
      cancel = () => {
        if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
      };
      stream.on("response", (h) => onHeaders(Number(h[":status"]), h));
      stream.on("trailers", (t) => {
        trailers = t;
      });
      stream.on("data", onData);
      stream.on("error", () => undefined);
      // The whole answer has arrived. (A Node client whose upload the server cut short with
      // RST_STREAM NO_ERROR, as RFC 9113 8.1 allows once the response is complete, never emits
      // "close" while its own writes are pending, so the answer's end is what counts.)
      stream.on("end", () => {
        finish();
        if (!stream.writableFinished) stream.destroy();
      });
      stream.on("close", () => finish());
      if (a.body.length > 0) stream.end(a.body);
      else stream.end();
    } catch (e) {
      finish({ http: "unsendable", internal: false, detail: (e as Error).message });
    }
  });
}

/** The answer in `status`, headers, trailers and body, by the protocol its content type names. */
function read(status: number | undefined, headers: Record<string, unknown>, trailers: Record<string, unknown>, body: Buffer): Answer {
  if (status === undefined) return { http: "reset", internal: false, detail: "" };
  const type = String(headers["content-type"] ?? "");
  const grpcStatus = headers["grpc-status"] ?? trailers["grpc-status"];
  const text = body.subarray(0, 300).toString("utf8");
  if (grpcStatus !== undefined) {
    const code = Number(grpcStatus);
    const message = String(headers["grpc-message"] ?? trailers["grpc-message"] ?? "");
    return { http: status, rpc: `grpc ${code}`, internal: code === 13 || code === 2, detail: safeDecode(message).slice(0, 300) };
  }
  if (type.startsWith("application/grpc-web")) {
    const end = endFrame(body, 0x80);
    const m = end && /grpc-status:\s*(\d+)/i.exec(end.toString("latin1"));
    if (m) {
      const code = Number(m[1]);
      return { http: status, rpc: `grpc ${code}`, internal: code === 13 || code === 2, detail: end.toString("latin1").slice(0, 300) };
    }
  }
  if (type.startsWith("application/connect+")) {
    const end = endFrame(body, 0x02);
    const code = end ? jsonCode(end.toString("utf8"), (j) => (j.error as { code?: unknown } | undefined)?.code) : undefined;
    if (code !== undefined)
      return { http: status, rpc: `connect ${code}`, internal: code === "internal" || code === "unknown", detail: text };
  }
  if (type.startsWith("application/json")) {
    const connect = jsonCode(text.length < body.length ? body.toString("utf8") : text, (j) => j.code);
    if (connect !== undefined)
      return { http: status, rpc: `connect ${connect}`, internal: connect === "internal" || connect === "unknown", detail: text };
    const rest = jsonCode(body.toString("utf8"), (j) => (j.error as { code?: unknown } | null | undefined)?.code);
    if (rest !== undefined) return { http: status, rpc: `rest ${rest}`, internal: rest === "INTERNAL_ERROR", detail: text };
  }
  return { http: status, internal: false, detail: text };
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function jsonCode(text: string, pick: (j: Record<string, unknown>) => unknown): string | undefined {
  try {
    const j = JSON.parse(text) as unknown;
    if (typeof j !== "object" || j === null || Array.isArray(j)) return undefined;
    const code = pick(j as Record<string, unknown>);
    return typeof code === "string" ? code : undefined;
  } catch {
    return undefined;
  }
}

/** The payload of the first complete frame in `body` carrying `flag`. */
function endFrame(body: Buffer, flag: number): Buffer | undefined {
  for (let offset = 0; offset + 5 <= body.length; ) {
    const end = offset + 5 + body.readUInt32BE(offset + 1);
    if (end > body.length) return undefined;
    if ((body[offset]! & flag) !== 0) return body.subarray(offset + 5, end);
    offset = end;
  }
  return undefined;
}

/** Whether `body` starts with a complete message frame (not an end-of-stream or trailer frame). */
function firstFrameIsMessage(body: Buffer): boolean {
  if (body.length < 5) return false;
  return (body[0]! & 0x82) === 0 && body.length >= 5 + body.readUInt32BE(1);
}

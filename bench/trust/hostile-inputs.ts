// Hostile input at every door: each RPC of the contract over Connect (JSON and binary), gRPC and
// gRPC-Web, and each REST route derived from the same contract, sent without a credential, with
// a wrong one, with a node's and with the admin's, carrying bodies no client should send (garbage
// bytes, truncated and oversized messages, deep nesting, wrong types, path traversal in ids, NUL
// bytes, 5 MB strings). Counted: answers by class, 5xx (each a bug), requests left unanswered
// (hangs), whether the controller survived, files that appeared outside its data directory, and
// its memory before and after.
import http2 from "node:http2";
import { brotliCompressSync, gzipSync } from "node:zlib";
import { readdir } from "node:fs/promises";
import { join, relative } from "node:path";
import { getOption, type DescMethod } from "@bufbuild/protobuf";
import { http } from "../../gen/google/api/annotations_pb.js";
import { HealthService } from "../../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
// Every service the controller serves, from the controller's own list: what is served is attacked.
import { SERVICES } from "../../controller/server.js";
import { atMost, exactly, fmt, info, type Figure, type Probe } from "./figures.js";
import { startController, TRUST_ADMIN_TOKEN } from "./controller-process.js";

const SECTION = "hostile input";
const SHORT_RPCS = ["HealthService.Check", "ResourceService.CreateResource", "NodeService.Heartbeat", "NodeService.WatchWorkOrders"];
// An answer slower than this counts as a hang (the server's own limits close stalled requests in 60 s).
const HANG_MS = 15_000;

interface Attempt {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer;
  label: string;
  /** A server-streaming method: a valid call stays open (a watch), so its first message is the answer. */
  streaming?: boolean;
}

export const hostileInputsProbe: Probe = {
  name: "hostile-inputs",
  async run({ short, workDir, log }) {
    const dataDir = join(workDir, "data");
    const cwd = join(workDir, "cwd");
    const ctl = await startController({ dataDir, cwd, inspect: true });
    const nodeToken = (await ctl.admin(NodeService).registerNode({ nodeId: "hostile-node" })).token;
    const before = await listFiles(workDir, dataDir);
    const rssBefore = ctl.rssMb();
    // What the controller holds, after a full GC (RSS also counts garbage not yet collected).
    const liveBefore = await ctl.liveMb();
    const attempts = [...rpcAttempts(nodeToken), ...restAttempts(nodeToken)];
    // The short run keeps every body and protocol for a few calls (public, admin, node, a stream)
    // and a quarter of the rest: a sample by index alone once missed the one input that crashed.
    const chosen = short ? attempts.filter((a, i) => SHORT_RPCS.some((r) => a.label.startsWith(`${r} `)) || i % 4 === 0) : attempts;
    log(`${chosen.length} requests`);
    const byClass = new Map<string, number>();
    const fiveHundreds: string[] = [];
    let hangs = 0;
    const goaways = new Map<number, number>();
    const opened = () => {
      const ss = http2.connect(ctl.url, { ca: ctl.ca });
      ss.on("error", () => undefined);
      ss.on("goaway", (code) => goaways.set(code, (goaways.get(code) ?? 0) + 1));
      return ss;
    };
    // A few workers at a time, each on its own connection, renewed every few requests and for
    // each large upload: Node's HTTP/2 server rejects new streams on a connection that holds
    // more than 10 MB (maxSessionMemory) and ends it after 100 rejections, which would keep later
    // inputs from reaching the controller at all (that protection is the client's own loss).
    const queue = [...chosen];
    const worker = async () => {
      let s = opened();
      let used = 0;
      for (let a = queue.shift(); a; a = queue.shift()) {
        const large = a.body.length > 1024 * 1024;
        if (large || used >= 20 || s.closed || s.destroyed) {
          s.close();
          s = opened();
          used = 0;
        }
        used++;
        const status = await send(s, a);
        if (large) {
          s.destroy();
          s = opened();
          used = 0;
        }
        const cls = status === "hang" ? "hang" : status === "reset" ? "reset" : `${String(status)[0]}xx`;
        byClass.set(cls, (byClass.get(cls) ?? 0) + 1);
        if (status === "hang") {
          hangs++;
          // Which one: a hang is a bug to find, and the count alone does not say where.
          if (hangs <= 5) log(`unanswered: ${a.method} ${a.path} (${a.label})`);
        }
        if (typeof status === "number" && status >= 500) fiveHundreds.push(`${a.label} -> ${status}`);
      }
      s.close();
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    const alive = ctl.alive();
    const health = alive
      ? await ctl
          .client(HealthService)
          .check({})
          .then(
            () => true,
            () => false,
          )
      : false;
    const rssAfter = alive ? ctl.rssMb() : NaN;
    const liveAfter = alive ? await ctl.liveMb() : NaN;
    await ctl.stop();
    const after = await listFiles(workDir, dataDir);
    const outside = [...after].filter((f) => !before.has(f) && !/^controller-\d+\.out$/.test(f));
    if (fiveHundreds.length) log(`5xx: ${fiveHundreds.slice(0, 10).join("; ")}`);
    if (outside.length) log(`outside the data dir: ${outside.join(", ")}`);
    const classes = [...byClass]
      .sort()
      .map(([k, v]) => `${k} ${fmt(v)}`)
      .join(", ");
    const figures: Figure[] = [
      info(SECTION, "requests tried (RPC × protocol × credential × body, and REST routes)", `${fmt(chosen.length)} (${classes})`),
      exactly(SECTION, "5xx answers", fiveHundreds.length, 0, chosen.length),
      info(SECTION, "sessions the server ended (GOAWAY code: count)", [...goaways].map(([c, n]) => `${c}: ${n}`).join(", ") || "none"),
      exactly(SECTION, `requests unanswered after ${HANG_MS / 1000} s`, hangs, 0, chosen.length),
      exactly(SECTION, "requests dropped without an answer (stream or connection reset)", byClass.get("reset") ?? 0, 0, chosen.length),
      exactly(SECTION, "controller crashed or stopped answering", alive && health ? 0 : 1, 0),
      exactly(SECTION, "files written outside the data directory", outside.length, 0),
      info(SECTION, "controller RSS before → after", `${fmt(Math.round(rssBefore))} → ${fmt(Math.round(rssAfter))} MB`),
      info(
        SECTION,
        "controller memory held (live after a full GC) before → after",
        `${fmt(Math.round(liveBefore))} → ${fmt(Math.round(liveAfter))} MB`,
      ),
      atMost(SECTION, "memory held growth (live after a full GC)", Math.max(0, Math.round(liveAfter - liveBefore)), 150, "MB"),
    ];
    return figures;
  },
};

// --- what is sent ---

const CREDENTIALS = (nodeToken: string): [string, Record<string, string>][] => [
  ["none", {}],
  ["wrong", { authorization: "Bearer not-a-token-0123456789" }],
  ["node", { authorization: `Bearer ${nodeToken}` }],
  ["admin", { authorization: `Bearer ${TRUST_ADMIN_TOKEN}` }],
];

const EVIL_IDS = ["../../../../etc/passwd", "..", "a/../../b", "%2e%2e%2f%2e%2e", "x\u0000y", "é".repeat(200), "a".repeat(5000), " ", ""];

function envelope(payload: Buffer, announced = payload.length, flags = 0): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(announced, 1);
  return Buffer.concat([head, payload]);
}

function garbageBodies(): [string, Buffer][] {
  const random = (n: number, seed: number) => {
    const b = Buffer.alloc(n);
    let x = seed;
    for (let i = 0; i < n; i++) {
      x = (x * 1103515245 + 12345) & 0x7fffffff;
      b[i] = x & 0xff;
    }
    return b;
  };
  return [
    ["empty", Buffer.alloc(0)],
    ["random 64", random(64, 1)],
    ["random 4k", random(4096, 2)],
    ["illegal tag", Buffer.from([0xff, 0xff, 0xff, 0x0f, 0x12, 0x01])],
    ["varint overflow", Buffer.from([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])],
    ["length past end", Buffer.from([0x0a, 0x7f, 0x61])],
    ["deep groups", Buffer.from(Array.from({ length: 2000 }, () => 0x0b))],
  ];
}

function jsonBodies(): [string, string][] {
  const deep = `${"[".repeat(10_000)}${"]".repeat(10_000)}`;
  return [
    ["not json", "{not json"],
    ["deep nesting", `{"resource": ${deep}}`],
    ["wrong types", '{"resource_type": 7, "id": {"a": 1}, "page_size": "many"}'],
    ["unknown fields", '{"no_such_field": true, "__proto__": {"admin": true}}'],
    ["huge string", JSON.stringify({ id: "x".repeat(5 * 1024 * 1024) })],
    ["evil ids", JSON.stringify({ id: EVIL_IDS[0], resource_type: "tenant", node_id: EVIL_IDS[2], tenant_id: EVIL_IDS[4] })],
    ["null bytes", '{"id": "a\\u0000b", "resource_type": "ten\\u0000ant"}'],
    ["array", "[]"],
  ];
}

// Bodies that claim an encoding: garbage, encodings nobody speaks, valid ones holding bad
// messages, and one that inflates to 8 MiB (past every cap).
const COMPRESSED: [string, Buffer][] = [
  ["gzip", Buffer.from("not gzip at all")],
  ["br", Buffer.from("not brotli at all")],
  ["zstd", Buffer.from("{}")],
  ["deflate", Buffer.from("{}")],
  ["gzip", gzipSync(Buffer.from('{"resource_type": 7}'))],
  ["br", brotliCompressSync(Buffer.from("{not json"))],
  ["gzip", gzipSync(Buffer.alloc(8 * 1024 * 1024, 0x20))],
];

function rpcAttempts(nodeToken: string): Attempt[] {
  const out: Attempt[] = [];
  for (const service of SERVICES) {
    for (const method of service.methods) {
      const path = `/v1/${service.typeName}/${method.name}`;
      for (const [cred, auth] of CREDENTIALS(nodeToken)) {
        // One POST of `body` as `type` (plus `extra` headers), labelled by its encoding and body.
        const post = (enc: string, what: string, type: string, body: Buffer, extra: Record<string, string> = {}) =>
          out.push({
            method: "POST",
            path,
            headers: { ...auth, "content-type": type, ...extra },
            body,
            label: `${service.name}.${method.name} ${enc} ${cred} ${what}`,
            streaming: method.methodKind === "server_streaming",
          });
        const streaming = method.methodKind === "server_streaming";
        for (const [name, body] of garbageBodies()) {
          post("connect-proto", name, streaming ? "application/connect+proto" : "application/proto", streaming ? envelope(body) : body);
          post("grpc", name, "application/grpc", envelope(body), { te: "trailers" });
          post("grpc-web", name, "application/grpc-web+proto", envelope(body));
        }
        for (const [name, text] of jsonBodies()) {
          const body = Buffer.from(text);
          post("connect-json", name, streaming ? "application/connect+json" : "application/json", streaming ? envelope(body) : body);
        }
        post("grpc", "announces 5 MiB", "application/grpc", envelope(Buffer.alloc(16), 5 * 1024 * 1024));
        post("grpc", "truncated prefix", "application/grpc", Buffer.from([0, 0, 0]));
        post("grpc", "bad gzip", "application/grpc", envelope(Buffer.from("not gzip"), 8, 1), { "grpc-encoding": "gzip" });
        post("text/plain", "", "text/plain", Buffer.from("hello"));
        // Compressed bodies: garbage that claims an encoding, encodings nobody speaks, and a body
        // that is what it says (so the inflated bytes reach the decode check).
        const json = streaming ? "application/connect+json" : "application/json";
        const wrap = (b: Buffer) => (streaming ? envelope(b, b.length, 1) : b);
        const encodingHeader = streaming ? "connect-content-encoding" : "content-encoding";
        for (const [enc, body] of COMPRESSED) {
          const what = `${enc} ${body.length} B`;
          post("connect-json compressed", what, json, wrap(body), { [encodingHeader]: enc });
          post("grpc compressed", what, "application/grpc", envelope(body, body.length, 1), { "grpc-encoding": enc, te: "trailers" });
          post("grpc-web compressed", what, "application/grpc-web+proto", envelope(body, body.length, 1), { "grpc-encoding": enc });
        }
        post("grpc", "flagged compressed, no encoding", "application/grpc", envelope(Buffer.from("x"), 1, 1), { te: "trailers" });
        // Connect GET (for methods without side effects it is served; for others refused).
        for (const [what, query] of [
          ["bad json message", "connect=v1&encoding=json&message=%7Bbad"],
          ["bad base64", "connect=v1&encoding=proto&base64=1&message=!!!*"],
          ["unknown compression", "connect=v1&encoding=json&compression=zstd&message=e30"],
          ["gzip garbage", "connect=v1&encoding=json&compression=gzip&base64=1&message=bm90Z3ppcA"],
          ["unknown encoding", "connect=v1&encoding=xml&message=x"],
          ["no message", "connect=v1&encoding=json"],
          ["bad connect version", "connect=v9&encoding=json&message=%7B%7D"],
        ]) {
          out.push({
            method: "GET",
            path: `${path}?${query}`,
            headers: { ...auth },
            body: Buffer.alloc(0),
            label: `${service.name}.${method.name} connect-get ${cred} ${what}`,
          });
        }
      }
    }
  }
  return out;
}

function restAttempts(nodeToken: string): Attempt[] {
  const out: Attempt[] = [];
  for (const service of SERVICES) {
    for (const method of service.methods) {
      const rule = getOption(method as DescMethod, http);
      const pattern = rule?.pattern;
      if (!pattern || pattern.case === undefined || pattern.case === "custom") continue;
      const verb = pattern.case.toUpperCase();
      const template = pattern.value as string;
      for (const [cred, auth] of CREDENTIALS(nodeToken)) {
        for (const id of EVIL_IDS) {
          const path = template.replace(/\{[^}]+\}/g, encodeURIComponent(id) || "%20");
          for (const [name, text] of [["no body", ""], ...jsonBodies()] as [string, string][]) {
            if (verb === "GET" && name !== "no body") continue;
            out.push({
              method: verb,
              path,
              headers: { ...auth, "content-type": "application/json" },
              body: Buffer.from(text),
              label: `REST ${verb} ${template} id=${JSON.stringify(id.slice(0, 20))} ${cred} ${name}`,
            });
          }
        }
        if (verb !== "GET") {
          for (const enc of ["br", "gzip", "zstd"]) {
            out.push({
              method: verb,
              path: template.replace(/\{[^}]+\}/g, "x1"),
              headers: { ...auth, "content-type": "application/json", "content-encoding": enc },
              body: Buffer.from("\u0000garbage"),
              label: `REST ${verb} ${template} ${cred} content-encoding ${enc} garbage`,
            });
          }
        }
        // Raw traversal in the path itself, not encoded.
        const raw = template.replace(/\{[^}]+\}/g, "..%2F..%2F..%2Fetc");
        out.push({ method: verb, path: raw, headers: { ...auth }, body: Buffer.alloc(0), label: `REST ${verb} raw ${raw} ${cred}` });
      }
    }
  }
  return out;
}

// --- how it is sent ---

function send(session: http2.ClientHttp2Session, a: Attempt): Promise<number | "hang" | "reset"> {
  return new Promise((resolve) => {
    let status: number | undefined;
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request({ ":method": a.method, ":path": a.path, ...a.headers });
    } catch {
      resolve("reset");
      return;
    }
    const timer = setTimeout(() => {
      stream.close(http2.constants.NGHTTP2_CANCEL);
      resolve("hang");
    }, HANG_MS);
    // gRPC and gRPC-Web answer HTTP 200 and carry the status in headers, trailers, or (gRPC-Web)
    // a trailer frame in the body; a Connect stream in its end-of-stream message. Each is mapped
    // to the HTTP class it stands for: internal, unknown, data loss and unavailable are 5xx.
    const rpcStatus = (code: number) => {
      if (code !== 0) status = [2, 13, 14, 15].includes(code) ? 500 : 400;
    };
    stream.on("response", (h) => {
      status = Number(h[":status"]);
      if (h["grpc-status"] !== undefined) rpcStatus(Number(h["grpc-status"]));
    });
    stream.on("trailers", (t) => {
      if (t["grpc-status"] !== undefined) rpcStatus(Number(t["grpc-status"]));
    });
    stream.on("data", (chunk: Buffer) => {
      const text = chunk.toString("latin1");
      const grpcWeb = /grpc-status:\s*(\d+)/.exec(text);
      if (grpcWeb) rpcStatus(Number(grpcWeb[1]));
      const connect = /"code"\s*:\s*"([a-z_]+)"/.exec(text);
      if (connect && status === 200) status = ["internal", "unknown", "data_loss", "unavailable"].includes(connect[1]!) ? 500 : 400;
      // A watch the input happened to open validly answers with its first message and stays
      // open: that is its answer (the client hangs up).
      if (a.streaming && status === 200 && !grpcWeb && !connect) {
        clearTimeout(timer);
        stream.close(http2.constants.NGHTTP2_CANCEL);
        resolve(status);
      }
    });
    stream.on("error", () => undefined);
    const done = () => {
      clearTimeout(timer);
      resolve(status ?? "reset");
    };
    // The whole answer has arrived. (A Node client whose upload the server cut short with
    // RST_STREAM NO_ERROR, as RFC 9113 8.1 allows once the response is complete, never emits
    // "close" while its own writes are pending, so the answer's end is what counts.)
    stream.on("end", () => {
      done();
      if (!stream.writableFinished) stream.destroy();
    });
    stream.on("close", done);
    if (a.body.length > 0) stream.end(a.body);
    else stream.end();
  });
}

/** Every file under `root` outside `dataDir`, as relative paths. */
async function listFiles(root: string, dataDir: string): Promise<Set<string>> {
  const out = new Set<string>();
  const walk = async (dir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const p = join(dir, e.name);
      if (p === dataDir) continue;
      if (e.isDirectory()) await walk(p);
      else out.add(relative(root, p));
    }
  };
  await walk(root);
  return out;
}

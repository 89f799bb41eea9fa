// The hostile sweep's RPC requests: for every method of every service the controller serves
// (SERVICES, so a new RPC is covered without a line here), with every credential, each protocol
// the front door speaks: Connect unary in JSON and binary, plain and compressed; Connect GET;
// Connect streaming for server-streaming methods; gRPC (proto and JSON) at the canonical path and
// gRPC-Web under /v1, with envelopes that lie; plus content types and HTTP methods no client uses.
import { gzipSync } from "node:zlib";
import type { DescMethod } from "@bufbuild/protobuf";
import { SERVICES } from "../../controller/server/build.js";
import type { Attempt } from "./hostile-attempt.js";
import {
  binaryBodies,
  compressedBodies,
  envelope,
  jsonBodies,
  random,
  typedBinary,
  typedJsonText,
  type Body,
  type Compressed,
} from "./hostile-bodies.js";

/** What one call of `send` sets beyond the method's defaults (POST to its /v1 path, no body). */
type Init = Partial<Attempt> & { headers: Record<string, string>; query?: string };
type Send = (protocol: string, category: string, what: string, init: Init) => void;

/** Every RPC attempt, for every method and credential. */
export function rpcRequests(creds: [string, Record<string, string>][]): Attempt[] {
  const out: Attempt[] = [];
  for (const service of SERVICES) {
    for (const method of service.methods) {
      const target = `${service.name}.${method.name}`;
      for (const [credential, auth] of creds) {
        // The huge bodies only where they are read (admitted) or refused for size (open calls).
        const heavy = credential === "admin" || credential === "none";
        const send: Send = (protocol, category, what, { query, ...init }) =>
          out.push({
            method: "POST",
            body: Buffer.alloc(0),
            target,
            protocol,
            category,
            what,
            credential,
            streaming: method.methodKind === "server_streaming",
            ...init,
            path: `${init.path ?? `/v1/${service.typeName}/${method.name}`}${query ?? ""}`,
            headers: { ...auth, ...init.headers },
          });
        if (method.methodKind === "unary") connectUnary(method, send, heavy);
        else connectStreaming(method, send, heavy);
        connectGet(method, send);
        grpc(method, send, heavy, `/${service.typeName}/${method.name}`);
        grpcWeb(method, send);
        oddities(method, send);
      }
    }
  }
  return out;
}

function connectUnary(method: DescMethod, send: Send, heavy: boolean): void {
  const json = { "content-type": "application/json", "connect-protocol-version": "1" };
  const proto = { "content-type": "application/proto", "connect-protocol-version": "1" };
  for (const [what, body] of jsonBodies(method.input, heavy)) send("connect-json", "body", what, { headers: json, body });
  for (const [what, body] of binaryBodies(method.input)) send("connect-proto", "body", what, { headers: proto, body });
  const goodJson = Buffer.from(typedJsonText(method.input, "nul"));
  for (const [what, enc, body] of compressedBodies(Buffer.from("{not json"), goodJson, heavy)) {
    send("connect-json", "compressed", `${enc}: ${what}`, { headers: { ...json, "content-encoding": enc }, body });
  }
  const goodProto = typedBinary(method.input, "plausible")!;
  for (const [what, enc, body] of compressedBodies(random(64, 9), goodProto, false).filter(someCompressed)) {
    send("connect-proto", "compressed", `${enc}: ${what}`, { headers: { ...proto, "content-encoding": enc }, body });
  }
  // A streaming content type on a unary method.
  send("connect-json", "content type", "connect+json on a unary method", {
    headers: { "content-type": "application/connect+json" },
    body: envelope(goodJson),
  });
}

function connectStreaming(method: DescMethod, send: Send, heavy: boolean): void {
  for (const [type, bodies, good] of [
    ["application/connect+json", jsonBodies(method.input, heavy), Buffer.from(typedJsonText(method.input, "plausible"))],
    ["application/connect+proto", binaryBodies(method.input), typedBinary(method.input, "plausible")!],
  ] as [string, Body[], Buffer][]) {
    const protocol = type === "application/connect+json" ? "connect-stream-json" : "connect-stream-proto";
    const headers = { "content-type": type, "connect-protocol-version": "1" };
    for (const [what, body] of bodies) send(protocol, "body", what, { headers, body: envelope(body) });
    envelopes(protocol, headers, "connect-content-encoding", good, send, heavy);
  }
  // A unary content type on a streaming method.
  send("connect-json", "content type", "application/json on a streaming method", {
    headers: { "content-type": "application/json" },
    body: Buffer.from("{}"),
  });
}

/**
 * Envelopes that lie (length, flags, count) and compressed ones (those `keep` keeps), around
 * `good`, the method's message.
 */
function envelopes(
  protocol: string,
  headers: Record<string, string>,
  encodingHeader: string,
  good: Buffer,
  send: Send,
  heavy: boolean,
  keep: (c: Compressed) => boolean = () => true,
) {
  const lies: Body[] = [
    ["truncated prefix", Buffer.from([0, 0, 0])],
    ["announces more than sent", envelope(good, good.length + 100)],
    ["announces less than sent", envelope(good, Math.max(0, good.length - 1))],
    ["announces 5 MiB", envelope(random(16, 6), 5 * 1024 * 1024)],
    ["announces 4 GiB", envelope(good, 0xffffffff)],
    ["two messages", Buffer.concat([envelope(good), envelope(good)])],
    ["no message", Buffer.alloc(0)],
    ["trailer flag", envelope(good, good.length, 0x80)],
    ["end-stream flag", envelope(Buffer.from("{}"), 2, 0x02)],
    ["every flag", envelope(good, good.length, 0xff)],
    ["compressed flag, no encoding", envelope(good, good.length, 1)],
  ];
  for (const [what, body] of lies) send(protocol, "envelope", what, { headers, body });
  const bad = protocol.endsWith("json") ? Buffer.from("{not json") : random(64, 7);
  for (const [what, enc, bytes] of compressedBodies(bad, good, heavy).filter(keep)) {
    send(protocol, "compressed", `${enc}: ${what}`, {
      headers: { ...headers, [encodingHeader]: enc },
      body: envelope(bytes, bytes.length, 1),
    });
  }
}

function connectGet(method: DescMethod, send: Send): void {
  const json = typedJsonText(method.input, "plausible");
  const b64 = (b: Buffer | string) => Buffer.from(b).toString("base64url");
  const queries: [string, string][] = [
    ["valid json message", `encoding=json&message=${encodeURIComponent(json)}`],
    ["bad json message", "encoding=json&message=%7Bbad"],
    ["nul in message", `encoding=json&message=${encodeURIComponent(typedJsonText(method.input, "nul"))}`],
    ["huge numbers", `encoding=json&message=${encodeURIComponent(typedJsonText(method.input, "huge numbers"))}`],
    ["wrong types", `encoding=json&message=${encodeURIComponent(typedJsonText(method.input, "wrong types"))}`],
    ["bad base64", "encoding=proto&base64=1&message=!!!*"],
    ["base64 of garbage proto", `encoding=proto&base64=1&message=${b64(random(64, 8))}`],
    ["raw garbage proto", "encoding=proto&message=%FF%FF%FF%0F%12%01"],
    ["percent-encoded NUL", "encoding=json&message=%7B%22id%22%3A%22a%00b%22%7D"],
    ["invalid percent-encoding", "encoding=json&message=%zz%E0%A4"],
    ["gzip garbage", `encoding=json&compression=gzip&base64=1&message=${b64("not gzip")}`],
    ["brotli garbage", `encoding=json&compression=br&base64=1&message=${b64("not brotli")}`],
    ["gzip of bad json", `encoding=json&compression=gzip&base64=1&message=${b64(gzipOf("{bad"))}`],
    ["gzip, not base64", "encoding=json&compression=gzip&message=%1F%8B%08%00"],
    ["unknown compression zstd", "encoding=json&compression=zstd&message=e30"],
    ["unknown compression deflate", "encoding=json&compression=deflate&base64=1&message=e30"],
    ["unknown encoding", "encoding=xml&message=x"],
    ["no message", "encoding=json"],
    ["no encoding", "message=%7B%7D"],
    ["repeated parameters", "encoding=json&encoding=proto&message=%7B%7D&message=%7B"],
    // Under HTTP/2's 64 KiB header list (past it the stream is reset by the protocol layer).
    ["huge message", `encoding=json&message=${"x".repeat(40_000)}`],
  ];
  for (const [what, q] of queries) send("connect-get", "query", what, { method: "GET", headers: {}, query: `?connect=v1&${q}` });
  send("connect-get", "query", "bad connect version", { method: "GET", headers: {}, query: "?connect=v9&encoding=json&message=%7B%7D" });
}

function grpc(method: DescMethod, send: Send, heavy: boolean, canonical: string): void {
  const headers = { "content-type": "application/grpc", te: "trailers" };
  const good = typedBinary(method.input, "plausible")!;
  for (const [what, body] of binaryBodies(method.input)) send("grpc", "body", what, { path: canonical, headers, body: envelope(body) });
  for (const [what, timeout] of [
    ["bad grpc-timeout", "99999999999H"],
    ["negative grpc-timeout", "-1S"],
  ] as const) {
    send("grpc", "header", what, { path: canonical, headers: { ...headers, "grpc-timeout": timeout }, body: envelope(good) });
  }
  envelopes("grpc", headers, "grpc-encoding", good, (p, c, w, init) => send(p, c, w, { path: canonical, ...init }), heavy, someOrBomb);
  const json = { "content-type": "application/grpc+json", te: "trailers" };
  for (const f of ["plausible", "nul", "huge numbers", "wrong types"] as const) {
    send("grpc-json", "body", `typed ${f}`, {
      path: canonical,
      headers: json,
      body: envelope(Buffer.from(typedJsonText(method.input, f))),
    });
  }
  send("grpc-json", "body", "not json", { path: canonical, headers: json, body: envelope(Buffer.from("{not json")) });
}

function grpcWeb(method: DescMethod, send: Send): void {
  const headers = { "content-type": "application/grpc-web+proto", "x-grpc-web": "1" };
  const good = typedBinary(method.input, "plausible")!;
  const some = new Set(["typed nul", "typed plausible", "random 64", "truncated message", "varint overflow"]);
  for (const [what, body] of binaryBodies(method.input).filter(([w]) => some.has(w))) {
    send("grpc-web", "body", what, { headers, body: envelope(body) });
  }
  envelopes("grpc-web", headers, "grpc-encoding", good, send, false, someCompressed);
  const json = { "content-type": "application/grpc-web+json" };
  for (const f of ["nul", "wrong types"] as const) {
    send("grpc-web-json", "body", `typed ${f}`, { headers: json, body: envelope(Buffer.from(typedJsonText(method.input, f))) });
  }
  send("grpc-web-text", "body", "base64 text", {
    headers: { "content-type": "application/grpc-web-text" },
    body: Buffer.from(envelope(good).toString("base64")),
  });
}

function oddities(method: DescMethod, send: Send): void {
  const body = Buffer.from(typedJsonText(method.input, "plausible"));
  send("connect-json", "content type", "text/plain", { headers: { "content-type": "text/plain" }, body: Buffer.from("hello") });
  send("connect-json", "content type", "none", { headers: {}, body });
  send("connect-json", "content type", "json with a bad charset", {
    headers: { "content-type": "application/json; charset=utf-16" },
    body,
  });
  send("connect-json", "header", "connect-protocol-version 2", {
    headers: { "content-type": "application/json", "connect-protocol-version": "2" },
    body,
  });
  send("connect-json", "header", "negative connect-timeout-ms", {
    headers: { "content-type": "application/json", "connect-timeout-ms": "-5" },
    body,
  });
  send("connect-json", "header", "huge connect-timeout-ms", {
    headers: { "content-type": "application/json", "connect-timeout-ms": "99999999999999999999" },
    body,
  });
  for (const verb of ["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]) {
    send("connect-json", "method", verb, {
      method: verb,
      headers: { "content-type": "application/json" },
      body: verb === "HEAD" ? Buffer.alloc(0) : body,
    });
  }
}

// The compressed variants kept where every one is not: each encoding's garbage, a valid message, and an unknown encoding.
function someCompressed([what]: Compressed): boolean {
  return ["random bytes", "valid gzip of garbage", "valid brotli of a message", "gzip cut short", "zstd frame", "deflate"].includes(what);
}

function someOrBomb(c: Compressed): boolean {
  return someCompressed(c) || c[0].startsWith("gzip bomb");
}

function gzipOf(text: string): Buffer {
  return gzipSync(Buffer.from(text));
}

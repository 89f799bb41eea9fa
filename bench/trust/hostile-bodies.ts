// What the hostile sweep puts in a body, derived from each method's request message where it can
// be (so a new field is attacked without anyone listing it): typed messages whose strings hold NUL,
// traversal, long or broken Unicode, whose numbers overflow and whose fields have the wrong JSON
// type; JSON and protobuf garbage; the same compressed well, compressed badly, or claiming an
// encoding nobody speaks; and gRPC-style envelopes that lie about their length or flags.
import { create, fromJson, toBinary, type DescField, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";

/** A body and what it is, as the log names it. */
export type Body = [what: string, bytes: Buffer];

/** Deterministic pseudo-random bytes. */
export function random(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n);
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    b[i] = x & 0xff;
  }
  return b;
}

/** One gRPC / Connect-streaming / gRPC-Web frame: flags, a 4-byte announced length, the payload. */
export function envelope(payload: Buffer, announced = payload.length, flags = 0): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(announced >>> 0, 1);
  return Buffer.concat([head, payload]);
}

// --- typed messages from the contract ---

/** How a contract-derived message is spoiled. */
export type Flavour =
  | "plausible"
  | "nul"
  | "traversal"
  | "unicode"
  | "surrogate"
  | "long"
  | "huge numbers"
  | "wrong types"
  | "enum unknown";

export const FLAVOURS: Flavour[] = [
  "plausible",
  "nul",
  "traversal",
  "unicode",
  "surrogate",
  "long",
  "huge numbers",
  "wrong types",
  "enum unknown",
];
/** The flavours that still decode as the message, so they reach the handler (and its checks). */
const DECODABLE: Flavour[] = ["plausible", "nul", "traversal", "unicode", "long"];

const TEXT: Record<Flavour, string> = {
  plausible: "hostile-x1",
  nul: "a\u0000b",
  traversal: "../../../../etc/passwd",
  unicode: `${"é".repeat(300)}\u202e\u200b🦀\ufeff`,
  surrogate: "x\ud800y\udfff",
  long: "x".repeat(100_000),
  "huge numbers": "hostile-x1",
  "wrong types": "hostile-x1",
  "enum unknown": "hostile-x1",
};
// JSON.stringify cannot write these numbers; a marker string is swapped for the raw text after.
const RAW = "\u0001raw:";
const raw = (text: string) => `${RAW}${text}`;

/** The request message of a method as proto3 JSON text, every field set and spoiled as `flavour` says. */
export function typedJsonText(desc: DescMessage, flavour: Flavour): string {
  return JSON.stringify(typedObject(desc, flavour, 0)).replace(/"\\u0001raw:([^"]*)"/g, "$1");
}

/** The same message in the binary encoding, for the flavours a message can hold; undefined otherwise. */
export function typedBinary(desc: DescMessage, flavour: Flavour): Buffer | undefined {
  if (!DECODABLE.includes(flavour)) return undefined;
  try {
    const message = fromJson(desc, JSON.parse(typedJsonText(desc, flavour)) as JsonValue, { ignoreUnknownFields: true });
    return Buffer.from(toBinary(desc, message));
  } catch {
    // a field the JSON form cannot fill (a bytes field's "base64", a timestamp): an empty message
    return Buffer.from(toBinary(desc, create(desc)));
  }
}

function typedObject(desc: DescMessage, flavour: Flavour, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const oneofsSet = new Set<string>();
  for (const field of desc.fields) {
    // One member per oneof: a second is refused by the decoder before anything else is looked at.
    if (field.oneof) {
      if (oneofsSet.has(field.oneof.name)) continue;
      oneofsSet.add(field.oneof.name);
    }
    out[field.name] = fieldValue(field, flavour, depth);
  }
  return out;
}

function fieldValue(field: DescField, flavour: Flavour, depth: number): unknown {
  const wrong = flavour === "wrong types";
  switch (field.fieldKind) {
    case "list": {
      if (wrong) return "not a list";
      const one = singular(field, flavour, depth);
      return [one, one];
    }
    case "map":
      if (wrong) return ["not", "a", "map"];
      return {
        [TEXT[flavour].slice(0, 1000)]:
          field.mapKind === "message" ? typedObject(field.message, flavour, depth + 1) : scalar(field, flavour),
      };
    default:
      return singular(field, flavour, depth);
  }
}

function singular(field: DescField, flavour: Flavour, depth: number): unknown {
  if (field.message) {
    if (flavour === "wrong types") return 12345;
    const wkt = wellKnown(field.message.typeName, flavour);
    if (wkt !== undefined) return wkt;
    return depth >= 2 ? {} : typedObject(field.message, flavour, depth + 1);
  }
  if (field.enum) {
    if (flavour === "wrong types") return { not: "an enum" };
    if (flavour === "enum unknown") return "NO_SUCH_VALUE_AT_ALL";
    return field.enum.values[1]?.name ?? field.enum.values[0]?.name ?? 0;
  }
  return scalar(field, flavour);
}

// Scalar type numbers as protobuf's descriptor.proto has them.
const STRING = 9;
const BYTES = 12;
const BOOL = 8;
const SIXTY_FOUR = new Set([3, 4, 6, 16, 18]);
const FLOATING = new Set([1, 2]);

function scalar(field: DescField, flavour: Flavour): unknown {
  const t = (field as { scalar?: number }).scalar ?? STRING;
  const wrong = flavour === "wrong types";
  if (t === STRING) return wrong ? { not: "a string" } : TEXT[flavour];
  if (t === BYTES) return wrong ? 7 : flavour === "plausible" ? "aGk=" : "!!! not base64 \u0000";
  if (t === BOOL) return wrong ? "maybe" : true;
  if (flavour === "huge numbers") {
    if (FLOATING.has(t)) return raw("1e400");
    return SIXTY_FOUR.has(t) ? "99999999999999999999999" : raw("-99999999999999999999");
  }
  return wrong ? [1] : 1;
}

function wellKnown(typeName: string, flavour: Flavour): unknown {
  const bad = flavour !== "plausible";
  switch (typeName) {
    case "google.protobuf.Timestamp":
      return bad ? "9999-99-99T99:99:99Z" : "2026-01-01T00:00:00Z";
    case "google.protobuf.Duration":
      return bad ? "-99999999999999999999s" : "1s";
    case "google.protobuf.Struct":
      return { [TEXT[flavour].slice(0, 1000)]: TEXT[flavour], deep: { a: [1, null, TEXT[flavour]] } };
    case "google.protobuf.Value":
      return TEXT[flavour];
    case "google.protobuf.ListValue":
      return [TEXT[flavour]];
    case "google.protobuf.FieldMask":
      return bad ? "a..b,\u0000,__proto__" : "name";
    case "google.protobuf.Any":
      return { "@type": "type.googleapis.com/no.such.Type", value: TEXT[flavour] };
    case "google.protobuf.Empty":
      return {};
    default:
      if (typeName.startsWith("google.protobuf.") && typeName.endsWith("Value")) return typeName.includes("String") ? TEXT[flavour] : 1;
      return undefined;
  }
}

/** `make`'s value, made once (the large bodies are shared by every attempt that sends one). */
function once<T>(make: () => T): () => T {
  let v: T | undefined;
  return () => (v ??= make());
}
const HUGE_STRING = once(() => Buffer.from(JSON.stringify({ id: "x".repeat(5 * 1024 * 1024) })));
const BOMB = once(() => gzipSync(Buffer.alloc(8 * 1024 * 1024, 0x20)));

// --- untyped garbage ---

/** Bytes that are no protobuf message (or only by accident). */
export function garbageBinary(): Body[] {
  return [
    ["empty", Buffer.alloc(0)],
    ["random 64", random(64, 1)],
    ["random 4k", random(4096, 2)],
    ["illegal tag", Buffer.from([0xff, 0xff, 0xff, 0x0f, 0x12, 0x01])],
    ["varint overflow", Buffer.from([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])],
    ["length past end", Buffer.from([0x0a, 0x7f, 0x61])],
    ["deep groups", Buffer.from(Array.from({ length: 2000 }, () => 0x0b))],
    ["wrong wire type", Buffer.from([0x09, 1, 2, 3, 4, 5, 6, 7, 8, 0x15, 1, 2])],
    ["json as proto", Buffer.from('{"id": "x"}')],
  ];
}

/** Text that is no request in JSON, whatever the method; `heavy` adds a 5 MB string. */
export function garbageJson(desc: DescMessage, heavy: boolean): Body[] {
  const plausible = typedJsonText(desc, "plausible");
  const deep = `${"[".repeat(10_000)}${"]".repeat(10_000)}`;
  const out: Body[] = [
    ["not json", Buffer.from("{not json")],
    ["truncated json", Buffer.from(plausible.slice(0, Math.max(1, Math.floor(plausible.length / 2))))],
    ["empty", Buffer.alloc(0)],
    ["null", Buffer.from("null")],
    ["array", Buffer.from("[]")],
    ["number", Buffer.from("1e400")],
    ["deep nesting", Buffer.from(`{"x": ${deep}}`)],
    ["unknown fields", Buffer.from('{"no_such_field": true, "__proto__": {"admin": true}, "constructor": {"prototype": {"x": 1}}}')],
    ["invalid utf-8", Buffer.concat([Buffer.from('{"id": "'), Buffer.from([0xff, 0xfe, 0xc0, 0xaf]), Buffer.from('"}')])],
    ["bom", Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(plausible)])],
    ["duplicate keys", Buffer.from(plausible.length > 2 ? `{"meta": 1, "meta": {}, ${plausible.slice(1)}` : '{"a": 1, "a": 2}')],
  ];
  if (heavy) out.push(["huge string", HUGE_STRING()]);
  return out;
}

/** Every JSON body for `desc`: the typed flavours, then the garbage. */
export function jsonBodies(desc: DescMessage, heavy: boolean): Body[] {
  return [...FLAVOURS.map((f): Body => [`typed ${f}`, Buffer.from(typedJsonText(desc, f))]), ...garbageJson(desc, heavy)];
}

/** Every binary body for `desc`: the typed flavours that a message can hold, one cut short, then garbage. */
export function binaryBodies(desc: DescMessage): Body[] {
  const out: Body[] = [];
  for (const f of FLAVOURS) {
    const b = typedBinary(desc, f);
    if (b) out.push([`typed ${f}`, b]);
  }
  const whole = typedBinary(desc, "plausible")!;
  if (whole.length > 1) out.push(["truncated message", whole.subarray(0, Math.ceil(whole.length / 2))]);
  return [...out, ...garbageBinary()];
}

// --- compression ---

/** A body claiming `encoding` (a header value), and what it is. */
export type Compressed = [what: string, encoding: string, bytes: Buffer];

/**
 * Bodies that claim an encoding, around `bad` (a message that does not decode) and `good` (one
 * that does, so the inflated bytes reach the handler): garbage claiming gzip or brotli, valid
 * streams cut short or with a broken checksum, encodings nobody speaks, and (heavy) a bomb.
 */
export function compressedBodies(bad: Buffer, good: Buffer, heavy: boolean): Compressed[] {
  const gz = gzipSync(good);
  const corruptCrc = Buffer.from(gz);
  corruptCrc[corruptCrc.length - 5]! ^= 0xff;
  const out: Compressed[] = [
    ["random bytes", "gzip", random(200, 3)],
    ["random bytes", "br", random(200, 4)],
    ["valid gzip of garbage", "gzip", gzipSync(bad)],
    ["valid brotli of garbage", "br", brotliCompressSync(bad)],
    ["valid gzip of a message", "gzip", gz],
    ["valid brotli of a message", "br", brotliCompressSync(good)],
    ["gzip cut short", "gzip", gz.subarray(0, Math.ceil(gz.length / 2))],
    ["brotli cut short", "br", brotliCompressSync(good).subarray(0, 3)],
    ["gzip bad checksum", "gzip", corruptCrc],
    ["empty gzip", "gzip", Buffer.alloc(0)],
    ["zstd frame", "zstd", Buffer.concat([Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), random(40, 5)])],
    ["deflate", "deflate", deflateSync(good)],
    ["list of encodings", "gzip, br", gz],
    ["upper case", "GZIP", gz],
    ["unknown token", "x-unknown;q=1", good],
  ];
  if (heavy) out.push(["gzip bomb 8 MiB", "gzip", BOMB()]);
  return out;
}

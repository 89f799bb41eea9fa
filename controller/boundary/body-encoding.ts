// Compressed request bodies, opened at the front door rather than by the Connect router: the
// router answered a body that is not valid gzip or brotli with INTERNAL, an encoding it does not
// know with UNIMPLEMENTED (HTTP 501), a Connect GET whose base64 message does not decode with
// HTTP 500, and inflated under the admitted cap whatever the method. Here every encoding a client
// names is checked, a body is inflated under its class's cap (body-limits.ts), and the router gets
// the plain bytes, which the front door then checks decode as the method's request message. A
// client's mistake is INVALID_REQUEST, never a 5xx.
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { SkipperError } from "../base/errors.js";

/** The encodings a client may compress with. */
export const ENCODINGS = ["identity", "gzip", "br"] as const;

/** The encoding `value` names (absent or empty: identity); INVALID_REQUEST for one not in ENCODINGS. */
export function encodingOf(value: string | string[] | undefined, header: string): (typeof ENCODINGS)[number] {
  const v = (Array.isArray(value) ? value.join(",") : (value ?? "")).trim().toLowerCase();
  if (v === "" || v === "identity") return "identity";
  if (v === "gzip" || v === "br") return v;
  throw new SkipperError("INVALID_REQUEST", `${header} ${JSON.stringify(v.slice(0, 40))} is not supported: use gzip, br or identity`, {
    field: header,
  });
}

/** `bytes` inflated (at most maxBytes); INVALID_REQUEST when they are not `encoding` or inflate past the cap. */
export function inflate(bytes: Uint8Array, encoding: "gzip" | "br", maxBytes: number): Buffer {
  try {
    const opts = { maxOutputLength: maxBytes };
    return encoding === "gzip" ? gunzipSync(bytes, opts) : brotliDecompressSync(bytes, opts);
  } catch (e) {
    const tooLarge = (e as { code?: string }).code === "ERR_BUFFER_TOO_LARGE" || e instanceof RangeError;
    throw new SkipperError(
      "INVALID_REQUEST",
      tooLarge
        ? `the request body inflates past ${maxBytes} bytes`
        : `the request body is not valid ${encoding === "br" ? "brotli" : "gzip"}`,
      tooLarge ? { field: "body", limit: maxBytes } : { field: "body" },
    );
  }
}

/**
 * An enveloped body (Connect streaming, gRPC, gRPC-Web) with every compressed message inflated and
 * marked uncompressed; a body whose framing is broken is returned as it is (the decode check
 * names the problem).
 */
export function inflateEnvelopes(body: Buffer, encoding: "identity" | "gzip" | "br", maxBytes: number): Buffer {
  const out: Buffer[] = [];
  let offset = 0;
  let total = 0;
  while (offset + 5 <= body.length) {
    const flags = body[offset]!;
    const length = body.readUInt32BE(offset + 1);
    const end = offset + 5 + length;
    if (end > body.length) return body;
    let payload = body.subarray(offset + 5, end);
    if ((flags & 0b1) !== 0) {
      if (encoding === "identity") {
        throw new SkipperError("INVALID_REQUEST", "a message is marked compressed but the call names no encoding", { field: "body" });
      }
      payload = inflate(payload, encoding, maxBytes - total);
    }
    const prefix = Buffer.alloc(5);
    prefix[0] = flags & ~0b1;
    prefix.writeUInt32BE(payload.length, 1);
    out.push(prefix, payload);
    total += payload.length;
    offset = end;
  }
  if (offset !== body.length) return body;
  return Buffer.concat(out);
}

/**
 * A Connect GET's query checked (encoding, base64, compression, message): undefined when the
 * router may take it, or why not.
 */
export function connectGetProblem(
  search: URLSearchParams,
  decode?: (bytes: Uint8Array, json: boolean) => void,
  rawMessage?: string,
): SkipperError | undefined {
  const bad = (message: string, field: string) => new SkipperError("INVALID_REQUEST", message, { field });
  const message = search.get("message");
  if (message === null) return undefined; // the router says what is missing
  if (search.get("base64") === "1" && !/^[A-Za-z0-9+/_-]*={0,2}$/.test(message)) {
    return bad("message is not base64url (base64=1)", "message");
  }
  let compression: ReturnType<typeof encodingOf>;
  try {
    compression = encodingOf(search.get("compression") ?? undefined, "compression");
  } catch (e) {
    return e as SkipperError;
  }
  if (!decode) return undefined;
  const json = search.get("encoding") === "json";
  if (!json && search.get("encoding") !== "proto") return undefined; // the router names the encoding
  try {
    let bytes: Uint8Array =
      search.get("base64") === "1" ? Buffer.from(message, "base64url") : json ? Buffer.from(message, "utf8") : rawBytes(rawMessage ?? "");
    if (compression !== "identity") bytes = inflate(bytes, compression, 4 * 1024 * 1024);
    decode(bytes, json);
  } catch (e) {
    if (e instanceof SkipperError) return e;
    return bad(`message is not a valid request: ${e instanceof Error ? e.message : String(e)}`, "message");
  }
  return undefined;
}

/** The bytes a percent-encoded query value stands for (not read as UTF-8: a binary message). */
function rawBytes(value: string): Buffer {
  const out: number[] = [];
  for (let i = 0; i < value.length; i++) {
    const c = value[i]!;
    if (c === "%" && /^[0-9A-Fa-f]{2}$/.test(value.slice(i + 1, i + 3))) {
      out.push(Number.parseInt(value.slice(i + 1, i + 3), 16));
      i += 2;
    } else if (c === "+") out.push(0x20);
    else out.push(...Buffer.from(c, "utf8"));
  }
  return Buffer.from(out);
}

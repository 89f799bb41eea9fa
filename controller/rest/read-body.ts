// Reads a request body with a size cap, refusing as early as the request allows: on a declared
// content-length above the cap, on an enveloped message (Connect streaming, gRPC, gRPC-Web) whose
// 5-byte prefix announces more than the cap, and otherwise as soon as the cap is crossed. Memory
// held is what has arrived, never what was announced. The rest of an oversize body is discarded
// as it arrives (Node does that itself for a body nobody reads), so the answer reaches the client.
import type { Readable } from "node:stream";

/** Thrown when a body is larger than allowed; answered 413 (REST) or INVALID_REQUEST (RPC). */
export class BodyTooLargeError extends Error {
  override readonly name = "BodyTooLargeError";
  constructor(readonly limit: number) {
    super(`request body exceeds ${limit} bytes`);
  }
}

type BodySource = Readable & { headers: Record<string, string | string[] | undefined> };

export interface ReadBodyOptions {
  /** The body is a stream of enveloped messages: check each one's announced length as its prefix arrives. */
  enveloped?: boolean;
}

/** The body as text; rejects with BodyTooLargeError past `maxBytes`. */
export async function readBody(req: BodySource, maxBytes: number): Promise<string> {
  return (await readBodyBytes(req, maxBytes)).toString("utf8");
}

/** The body's bytes; rejects with BodyTooLargeError past `maxBytes`. */
export function readBodyBytes(req: BodySource, maxBytes: number, opts: ReadBodyOptions = {}): Promise<Buffer> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.reject(new BodyTooLargeError(maxBytes));
  // Listeners rather than `for await`: leaving that loop early destroys the request, and with it
  // the socket the answer must be written to.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // Offset of the next envelope's 5-byte prefix in the body.
    let nextEnvelope = 0;
    const stop = () => {
      req.off("data", onData).off("end", onEnd).off("error", onError);
    };
    const tooLarge = () => {
      stop();
      req.resume();
      reject(new BodyTooLargeError(maxBytes));
    };
    const onData = (chunk: Buffer | string) => {
      const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      size += buf.length;
      if (size > maxBytes) return tooLarge();
      chunks.push(buf);
      if (!opts.enveloped) return;
      while (size >= nextEnvelope + 5) {
        const length = prefixAt(chunks, nextEnvelope + 1).readUInt32BE(0);
        nextEnvelope += 5 + length;
        if (nextEnvelope > maxBytes) return tooLarge();
      }
    };
    const onEnd = () => {
      stop();
      resolve(Buffer.concat(chunks));
    };
    const onError = (err: Error) => {
      stop();
      reject(err);
    };
    req.on("data", onData).on("end", onEnd).on("error", onError);
  });
}

// The 4 bytes at `offset` of the concatenated chunks (the caller made sure they have arrived).
function prefixAt(chunks: Buffer[], offset: number): Buffer {
  const out = Buffer.alloc(4);
  let pos = 0;
  let filled = 0;
  for (const c of chunks) {
    if (filled === 4) break;
    const end = pos + c.length;
    if (end > offset + filled) {
      const from = offset + filled - pos;
      filled += c.copy(out, filled, from, Math.min(c.length, from + 4 - filled));
    }
    pos = end;
  }
  return out;
}

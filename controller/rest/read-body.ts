// Reads a request body as UTF-8 text with a size cap, refusing early on a declared
// content-length above the cap and otherwise stopping as soon as the cap is crossed. The rest of
// an oversize body is discarded as it arrives (Node does that itself for a body nobody started
// reading), so the 413 reaches the client and a keep-alive connection stays usable.
import type { Readable } from "node:stream";

/** Thrown when a body is larger than allowed; the REST layer answers 413. */
export class BodyTooLargeError extends Error {
  override readonly name = "BodyTooLargeError";
  constructor(readonly limit: number) {
    super(`request body exceeds ${limit} bytes`);
  }
}

/** The body as text; rejects with BodyTooLargeError past `maxBytes`. */
export function readBody(req: Readable & { headers: Record<string, string | string[] | undefined> }, maxBytes: number): Promise<string> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.reject(new BodyTooLargeError(maxBytes));
  // Listeners rather than `for await`: leaving that loop early destroys the request, and with it
  // the socket the 413 must be written to.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = () => {
      req.off("data", onData).off("end", onEnd).off("error", onError);
    };
    const onData = (chunk: Buffer | string) => {
      const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      size += buf.length;
      if (size > maxBytes) {
        stop();
        req.resume();
        reject(new BodyTooLargeError(maxBytes));
      } else {
        chunks.push(buf);
      }
    };
    const onEnd = () => {
      stop();
      resolve(Buffer.concat(chunks).toString("utf8"));
    };
    const onError = (err: Error) => {
      stop();
      reject(err);
    };
    req.on("data", onData).on("end", onEnd).on("error", onError);
  });
}

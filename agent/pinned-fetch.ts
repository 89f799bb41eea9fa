// HTTPS GETs to a controller this host does not trust yet, trusted by a pin alone: the SHA-256 of
// the public key of the certificate it presents (common/agent-bundle-signature.ts certificatePin),
// as curl's --pinnedpubkey. The chain is not checked (there is no CA yet: this is how join gets
// it); a certificate whose key does not match is refused before any answer is read. Only what is
// public goes this way (the bundle, its manifest, the CA): the token is sent later, over TLS
// checked against the CA fetched here.
import type { X509Certificate } from "node:crypto";
import https from "node:https";
import type { TLSSocket } from "node:tls";
import { certificatePin, pinDigest } from "../common/agent-bundle-signature.js";

/** The controller presented another key than the pin: most likely the wrong fingerprint, or someone in between. */
export class PinMismatchError extends Error {
  override readonly name = "PinMismatchError";
}

/** The body of GET `url` from a server whose certificate's key has `pin`; at most `maxBytes`. */
export function pinnedGet(url: string, pin: string, maxBytes: number, timeoutMs = 60_000): Promise<Buffer> {
  const want = pinDigest(pin);
  return new Promise((resolve, reject) => {
    const req = https.request(url, { method: "GET", rejectUnauthorized: false, agent: false, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        size += c.length;
        if (size > maxBytes) req.destroy(new Error(`${url} answered more than ${maxBytes} bytes`));
        else chunks.push(c);
      });
      res.on("end", () => {
        const body = Buffer.concat(chunks);
        if (res.statusCode === 200) resolve(body);
        else reject(new Error(`${url} answered HTTP ${res.statusCode}: ${body.toString("utf8", 0, 300).trim()}`));
      });
      res.on("error", reject);
    });
    req.on("socket", (socket) => {
      (socket as TLSSocket).once("secureConnect", () => {
        const cert = (socket as TLSSocket).getPeerX509Certificate();
        const got = cert ? certificatePin(cert as X509Certificate) : "none";
        if (got !== `SHA256:${want}`)
          socket.destroy(
            new PinMismatchError(
              `the controller at ${new URL(url).host} presented a certificate whose key is ${got}, not the fingerprint given (SHA256:${want}): check the fingerprint (skipper node join-command prints it), or someone is in between`,
            ),
          );
      });
    });
    req.on("timeout", () => req.destroy(new Error(`${url} did not answer within ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end();
  });
}

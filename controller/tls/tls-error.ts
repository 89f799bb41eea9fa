// Errors found while preparing TLS material. They stop the controller at startup, so the message
// is what the operator reads: it names the file or setting to fix. The code is for tests and
// callers that branch on the kind of failure without matching message text.

/** Why TLS material could not be prepared. */
export type TlsErrorCode =
  | "TLS_PAIR_INCOMPLETE"
  | "TLS_FILE_UNREADABLE"
  | "TLS_CERT_INVALID"
  | "TLS_KEY_INVALID"
  | "TLS_KEY_MISMATCH"
  | "TLS_HOSTNAME_INVALID";

/** A startup TLS problem with a stable code and an operator-facing message. */
export class TlsError extends Error {
  override readonly name = "TlsError";
  constructor(
    readonly code: TlsErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Type guard for TlsError (works across module copies). */
export function isTlsError(e: unknown): e is TlsError {
  return e instanceof Error && e.name === "TlsError" && typeof (e as TlsError).code === "string";
}

// The registry client's one error: a stable code and a message that names the registry, the
// repository and (when there was one) the HTTP status. Never a password, a token or a header's
// value: what the registry said is kept to its error code ("NAME_UNKNOWN") at most.

/** Why a registry call failed; the watch retries UNREACHABLE and TIMEOUT sooner than the rest. */
export type RegistryErrorCode =
  | "INVALID_REPOSITORY" // the repository is no image name (no tag, no digest), or an option is out of range
  | "UNAUTHORIZED" // 401/403: no credential given, or the one given refused
  | "NOT_FOUND" // 404: no such repository or tag
  | "UNREACHABLE" // no connection, TLS failure, 429 or 5xx
  | "TOO_LARGE" // a body, the pages or the tags beyond the client's limits
  | "BAD_RESPONSE" // an answer the OCI distribution API does not give
  | "TIMEOUT"; // no whole answer within the request's deadline

/** Where the failure happened: the message's prefix. */
export interface RegistryErrorSubject {
  registry: string;
  repository: string;
  status?: number;
}

export class RegistryError extends Error {
  override readonly name = "RegistryError";
  readonly registry: string;
  readonly repository: string;
  /** The HTTP status of the answer that failed, 0 when there was none. */
  readonly status: number;
  constructor(
    readonly code: RegistryErrorCode,
    subject: RegistryErrorSubject,
    detail: string,
    options?: { cause?: unknown },
  ) {
    const status = subject.status ?? 0;
    super(`registry ${subject.registry}, repository ${subject.repository}: ${detail}${status ? ` (HTTP ${status})` : ""}`, options);
    this.registry = subject.registry;
    this.repository = subject.repository;
    this.status = status;
  }
}

/** Type guard for RegistryError (works across module copies). */
export function isRegistryError(e: unknown): e is RegistryError {
  return e instanceof Error && e.name === "RegistryError" && typeof (e as RegistryError).code === "string";
}

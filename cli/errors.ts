// What the CLI tells its user when something fails, and with which exit code. Exit codes follow
// Nomad's convention, so CI can gate on them: 0 done (converged, complete), 2 the thing asked
// about is blocked (paused, failed, rolled back, no node to run on), 1 every error (bad input, a
// refused call, a controller that cannot be reached). An error names what to do next when there
// is something to do (`hint`).
import { Code, ConnectError } from "@connectrpc/connect";
import { ApiErrorSchema } from "../gen/skipper/v1/envelope_pb.js";

export const EXIT_OK = 0;
export const EXIT_ERROR = 1;
export const EXIT_BLOCKED = 2;

/** An error of the CLI's own, with the exit code and a hint for the user. */
export class CliError extends Error {
  override readonly name = "CliError";
  readonly exitCode: number;
  readonly hint: string | undefined;
  constructor(message: string, opts: { exitCode?: number; hint?: string } = {}) {
    super(message);
    this.exitCode = opts.exitCode ?? EXIT_ERROR;
    this.hint = opts.hint;
  }
}

/** Type guard for CliError (works across module copies). */
export function isCliError(e: unknown): e is CliError {
  return e instanceof Error && e.name === "CliError";
}

/** The message and hint to print for any error a command threw; `server` is the controller's URL. */
export function describeError(e: unknown, server?: string): { message: string; hint?: string; exitCode: number } {
  if (isCliError(e)) return { message: e.message, exitCode: e.exitCode, ...(e.hint ? { hint: e.hint } : {}) };
  if (e instanceof ConnectError) return describeConnectError(e, server);
  return { message: e instanceof Error ? e.message : String(e), exitCode: EXIT_ERROR };
}

function describeConnectError(e: ConnectError, server: string | undefined): { message: string; hint?: string; exitCode: number } {
  const api = e.findDetails(ApiErrorSchema)[0];
  const code = api?.code || Code[e.code];
  const message = `${code}: ${api?.message || e.rawMessage}`;
  const cause = causeText(e);
  const at = server ? ` at ${server}` : "";
  const hint = (() => {
    switch (e.code) {
      case Code.Unauthenticated:
        return "the controller refused the credential: run `skipper login` again, or check --token / SKIPPER_TOKEN";
      case Code.PermissionDenied:
        return "the credential's role does not allow this: use a key with a stronger role (`skipper keys create --role ...`)";
      case Code.Unavailable:
      case Code.Unknown:
      case Code.Internal:
        if (/self[- ]signed|unable to (verify|get)|certificate/i.test(cause))
          return `the controller's certificate is not trusted: pass --ca-file with its CA (npm start writes data/tls/ca.crt)`;
        if (/ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ETIMEDOUT|ECONNRESET|socket hang up/i.test(cause))
          return `is the controller running${at}? Check --server, SKIPPER_SERVER or the context (\`skipper context list\`)`;
        return undefined;
      case Code.DeadlineExceeded:
        return `the controller${at} did not answer in time`;
      default:
        return undefined;
    }
  })();
  // A call that never reached a handler has no ApiError: what the transport met says it best.
  const text = !api && cause ? `could not call the controller${at}: ${cause}` : message;
  return { message: text, exitCode: EXIT_ERROR, ...(hint ? { hint } : {}) };
}

// Connect wraps a transport failure; the node error under it says what happened (ECONNREFUSED...).
function causeText(e: ConnectError): string {
  const parts: string[] = [];
  let c: unknown = e.cause;
  for (let i = 0; c instanceof Error && i < 4; i++, c = c.cause) {
    const code = (c as NodeJS.ErrnoException).code;
    parts.push(code && !c.message.includes(code) ? `${code} ${c.message}` : c.message);
  }
  return parts.join(": ");
}

// A failed call as the dashboard says it: the API's own code and words (its ApiError detail), and
// whether trying again later may help.
import { Code, ConnectError } from "@connectrpc/connect";
import { ApiErrorSchema } from "../../gen/skipper/v1/envelope_pb.js";

/** A failure that may pass by itself: the controller could not be reached. */
export function transient(e: unknown): boolean {
  return e instanceof ConnectError && [Code.Unavailable, Code.Unknown, Code.DeadlineExceeded].includes(e.code);
}

/** A failed call as the API words it: its code (FORBIDDEN for a viewer) and its message; `denied` says what a refusal means here. */
export function problemOf(e: unknown, denied = "This credential's role does not allow it."): string {
  if (!(e instanceof ConnectError)) return e instanceof Error ? e.message : String(e);
  const api = e.findDetails(ApiErrorSchema)[0];
  const text = `${api?.code || Code[e.code]}: ${api?.message || e.rawMessage}`;
  return e.code === Code.PermissionDenied ? `${text}. ${denied}` : text;
}

// Who did something to a rollout, in one phrase: "paused by admin at 2026-01-02T03:04:05Z (why)".
import type { RolloutActor } from "../gen/skipper/v1/rollout_pb.js";
import { when } from "./output.js";

/** `what by who at when (reason)`. */
export function actorLine(what: string, a: RolloutActor): string {
  return `${what} by ${a.actor || "?"} at ${when(a.at)}${a.reason ? ` (${a.reason})` : ""}`;
}

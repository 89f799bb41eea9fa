// Flag values every command reads alike: a duration ("30s", "10m") refused as a CliError naming
// the flag, so the user sees what to type rather than a stack.
import { duration } from "../common/duration.js";
import { CliError } from "./errors.js";

/** Milliseconds in `text` (at least `min`), or a CliError naming `what`. */
export function durationFlag(text: string, what: string, min = 1, hint?: string): number {
  try {
    return duration(text, what, min);
  } catch (e) {
    throw new CliError((e as Error).message, hint ? { hint } : {});
  }
}

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

/** Commander's collector for a repeatable option. */
export const collect = (value: string, previous: string[]): string[] => [...previous, value];

/** `--label key=value` flags as a map, or a CliError naming the bad one. */
export function labelFlags(flags: string[], flag = "--label"): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const l of flags) {
    const eq = l.indexOf("=");
    if (eq <= 0) throw new CliError(`${flag} ${JSON.stringify(l)} must be key=value`);
    labels[l.slice(0, eq)] = l.slice(eq + 1);
  }
  return labels;
}

/** A whole number from `min` to `max` given as `flag`, or a CliError naming it. */
export function countFlag(text: string, flag: string, min: number, max: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min || n > max) throw new CliError(`${flag} must be a whole number from ${min} to ${max}`);
  return n;
}

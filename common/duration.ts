// Durations in flags and environment variables ("500ms", "5s", "2m", "7d"; a bare number is
// milliseconds), parsed the same way by the controller and the agent.

/** Milliseconds in `text`, or an error naming `what` when it is malformed or under `min` ms. */
export function duration(text: string, what: string, min: number): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!m) throw new Error(`${what} must be a duration like 500ms, 5s, 2m or 7d, got '${text}'`);
  const ms = Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] ?? "ms"]!;
  if (ms < min) throw new Error(`${what} must be at least ${min} ms`);
  return Math.round(ms);
}

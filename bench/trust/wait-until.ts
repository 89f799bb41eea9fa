// Waiting on observed progress with a bound: probes choose their moments from what they see
// (a log line, a file, an order's status), never from elapsed time, and a bound that passes
// fails a figure instead of hanging the suite.

/**
 * Polls `fn` until it returns a value other than undefined; undefined once `timeoutMs` has
 * passed. Errors thrown by `fn` count as "not yet".
 */
export async function waitUntil<T>(
  fn: () => T | undefined | Promise<T | undefined>,
  timeoutMs: number,
  everyMs = 100,
): Promise<T | undefined> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch {
      // not yet
    }
    if (performance.now() >= deadline) return undefined;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
